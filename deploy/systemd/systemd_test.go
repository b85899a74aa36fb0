package systemd_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/services/testkit/tethercli"
)

const (
	// tetherCmdDir is the tether binary's source, relative to this package.
	tetherCmdDir = "../../services/cmd/tether"
	binary       = "/usr/local/bin/tether"
	envFile      = "/etc/tether/tether.env"
)

// units are the unit files of this directory and the subcommand each runs.
var units = map[string]string{
	"tether-apiserver.service":  "apiserver",
	"tether-projector.service":  "projector",
	"tether-controller.service": "controller",
	"tether-migrate.service":    "migrate",
	"tether-agent.service":      "agent",
}

// unit is a parsed unit file: section → key → its values, in order (a key
// may repeat; an empty assignment is kept as "").
type unit map[string]map[string][]string

// get is the last value of key in section, and whether it is set.
func (u unit) get(section, key string) (string, bool) {
	vs := u[section][key]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// parseUnit reads a unit file the way systemd does for what these tests
// need: [Section] headers, Key=Value lines, # and ; comments, and lines
// continued with a trailing backslash.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is neither a section nor Key=Value in one", path, n, line)
			}
			key = strings.TrimSpace(key)
			u[section][key] = append(u[section][key], strings.TrimSpace(value))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestEveryUnitIsChecked(t *testing.T) {
	files, err := filepath.Glob("*.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := units[f]; !ok {
			t.Errorf("%s is not checked by this test: add it to units", f)
		}
	}
	if len(files) != len(units) {
		t.Errorf("unit files %v, want %d", files, len(units))
	}
}

// hardening is what every unit's [Service] must say. The agent leaves out
// what would break the game servers it starts (they inherit its sandbox):
// agentOmits; and keeps the capabilities that start them as their own user
// (agentCapabilities).
var hardening = map[string]string{
	"NoNewPrivileges":         "yes",
	"CapabilityBoundingSet":   "",
	"ProtectSystem":           "strict",
	"ProtectHome":             "yes",
	"PrivateTmp":              "yes",
	"PrivateDevices":          "yes",
	"ProtectKernelTunables":   "yes",
	"ProtectKernelModules":    "yes",
	"ProtectKernelLogs":       "yes",
	"ProtectControlGroups":    "yes",
	"RestrictNamespaces":      "yes",
	"RestrictRealtime":        "yes",
	"RestrictSUIDSGID":        "yes",
	"LockPersonality":         "yes",
	"MemoryDenyWriteExecute":  "yes",
	"SystemCallArchitectures": "native",
	"EnvironmentFile":         envFile,
}

// agentOmits are hardening settings the agent must not have: its game
// servers inherit them (a JIT needs writable executable memory; a 32-bit
// game server needs its architecture's system calls).
var agentOmits = []string{"MemoryDenyWriteExecute", "SystemCallArchitectures", "SystemCallFilter", "DynamicUser", "ProtectProc"}

// agentCapabilities are the agent's capabilities, all it has: it runs as
// root to start game servers as their user (--run-as) and signal them.
var agentCapabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL"}

func TestUnitsAreHardened(t *testing.T) {
	for file, cmd := range units {
		t.Run(cmd, func(t *testing.T) {
			u := parseUnit(t, file)
			agent := cmd == "agent"
			for key, want := range hardening {
				if agent && (slices.Contains(agentOmits, key) || key == "CapabilityBoundingSet") {
					continue
				}
				if got, ok := u.get("Service", key); !ok || got != want {
					t.Errorf("%s: %s=%q (set: %v), want %q", file, key, got, ok, want)
				}
			}
			families := []string{"AF_INET", "AF_INET6", "AF_UNIX"}
			if agent {
				for _, key := range agentOmits {
					if _, ok := u.get("Service", key); ok {
						t.Errorf("%s: %s is set; the game servers would inherit it", file, key)
					}
				}
				families = append(families, "AF_NETLINK")
			}
			if got, _ := u.get("Service", "RestrictAddressFamilies"); !slices.Equal(strings.Fields(got), families) {
				t.Errorf("%s: RestrictAddressFamilies=%s, want %s", file, got, strings.Join(families, " "))
			}
			wantUser := "tether"
			if agent {
				wantUser = "root"
			}
			if user, _ := u.get("Service", "User"); user != wantUser {
				t.Errorf("%s: User=%q, want %s", file, user, wantUser)
			}
			dynamic, _ := u.get("Service", "DynamicUser")
			if !agent && dynamic != "yes" {
				t.Errorf("%s: DynamicUser=%q, want yes", file, dynamic)
			}
			typ, _ := u.get("Service", "Type")
			restart, _ := u.get("Service", "Restart")
			_, install := u["Install"]
			switch {
			case cmd == "migrate" && (typ != "oneshot" || install):
				t.Errorf("%s: Type=%s, [Install]: %v; want a oneshot, started by hand", file, typ, install)
			case cmd != "migrate" && (restart != "on-failure" || !install):
				t.Errorf("%s: Restart=%q, [Install]: %v; want on-failure, installed", file, restart, install)
			}
		})
	}
}

// execStart is a unit's ExecStart split into words.
func execStart(t *testing.T, u unit, file string) []string {
	t.Helper()
	vs := u["Service"]["ExecStart"]
	if len(vs) != 1 {
		t.Fatalf("%s: %d ExecStart lines, want 1", file, len(vs))
	}
	return strings.Fields(vs[0])
}

func TestExecStartRunsATetherSubcommand(t *testing.T) {
	cli := tethercli.Read(t, tetherCmdDir)
	admin := map[string]string{} // --admin-addr → unit
	for file, cmd := range units {
		u := parseUnit(t, file)
		words := execStart(t, u, file)
		if len(words) < 2 || words[0] != binary || words[1] != cmd {
			t.Errorf("%s: ExecStart=%q, want %s %s …", file, words, binary, cmd)
			continue
		}
		cli.CheckArgs(t, file, words[1:])
		if addr := flagValue(words, "--admin-addr"); addr != "" {
			if other, ok := admin[addr]; ok {
				t.Errorf("%s and %s both serve their admin endpoints on %s: they could not share a host", file, other, addr)
			}
			admin[addr] = file
		} else if cmd != "migrate" {
			t.Errorf("%s: no --admin-addr: nothing to probe /healthz and /readyz on", file)
		}
	}
}

// flagValue is the value of --name in words ("--name v" or "--name=v").
func flagValue(words []string, name string) string {
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			return v
		}
		if w == name && i+1 < len(words) {
			return words[i+1]
		}
	}
	return ""
}

// TestAgentRunsGameServersAsTheirOwnUser checks what keeps game servers
// from the agent: they run as a user of their own (--run-as, not root),
// only from the directories the unit names (--allowed-commands, without
// which the agent does not start), and the agent has the capabilities to
// start them so and no others (none ambient, which its game servers would
// inherit).
func TestAgentRunsGameServersAsTheirOwnUser(t *testing.T) {
	const file = "tether-agent.service"
	u := parseUnit(t, file)
	runAs := flagValue(execStart(t, u, file), "--run-as")
	if runAs == "" || runAs == "root" || runAs == "0" || runAs == "tether" {
		t.Errorf("%s: --run-as %q, want a user of the game servers' own", file, runAs)
	}
	if dirs := flagValue(execStart(t, u, file), "--allowed-commands"); dirs == "" {
		t.Errorf("%s: no --allowed-commands: the agent refuses to start without it", file)
	}
	if caps, _ := u.get("Service", "CapabilityBoundingSet"); !slices.Equal(strings.Fields(caps), agentCapabilities) {
		t.Errorf("%s: CapabilityBoundingSet=%q, want %s", file, caps, strings.Join(agentCapabilities, " "))
	}
	if ambient, ok := u.get("Service", "AmbientCapabilities"); !ok || ambient != "" {
		t.Errorf("%s: AmbientCapabilities=%q (set: %v), want empty: ambient capabilities pass to game servers", file, ambient, ok)
	}
}

// TestAgentLeavesGameServersRunning checks what lets a restarted agent find
// and stop its predecessor's game servers: systemd signals the agent alone,
// the same static user runs every agent, and the log dir (with the process
// records and the outbox) is writable and kept.
func TestAgentLeavesGameServersRunning(t *testing.T) {
	const file = "tether-agent.service"
	u := parseUnit(t, file)
	if mode, _ := u.get("Service", "KillMode"); mode != "process" {
		t.Errorf("%s: KillMode=%q, want process: anything else kills the game servers with the agent", file, mode)
	}
	logDir := flagValue(execStart(t, u, file), "--log-dir")
	if logDir == "" {
		t.Fatalf("%s: no --log-dir: the agent would keep its records in a temporary directory", file)
	}
	if rw, _ := u.get("Service", "ReadWritePaths"); !slices.Contains(strings.Fields(rw), logDir) {
		t.Errorf("%s: ReadWritePaths=%q does not hold the log dir %s", file, rw, logDir)
	}
	if state, _ := u.get("Service", "StateDirectory"); "/var/lib/"+state != logDir {
		t.Errorf("%s: StateDirectory=%q, want the log dir %s, kept across restarts", file, state, logDir)
	}
}

// TestEnvironmentFile checks tether.env: the connections and the shared
// secret are there, and every TETHER_ variable, commented out or not, sets
// a flag some subcommand has.
func TestEnvironmentFile(t *testing.T) {
	cli := tethercli.Read(t, tetherCmdDir)
	data, err := os.ReadFile("tether.env")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		commented := strings.HasPrefix(line, "#")
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "#"), "=")
		if !ok || strings.ContainsAny(name, " \t") {
			if !commented && line != "" {
				t.Errorf("tether.env:%d: %q is not NAME=value", n+1, line)
			}
			continue
		}
		if !commented {
			set[name] = true
		}
		flag, ok := tethercli.FlagOfEnv(name)
		if !ok {
			continue
		}
		known := false
		for _, cmd := range units {
			known = known || cli.HasFlag(cmd, flag)
		}
		if !known {
			t.Errorf("tether.env:%d: %s sets --%s, which no tether subcommand of these units has", n+1, name, flag)
		}
	}
	for _, name := range []string{"NATS_URL", "DATABASE_URL", "TETHER_PLAYER_TOKEN_KEYS"} {
		if !set[name] {
			t.Errorf("tether.env sets no %s", name)
		}
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on the units, in
// a root of their own holding the host's system units and a stand-in
// tether binary, where the tool is installed. Its complaints about these
// units (an unknown key, a value it cannot parse) fail the test; the exit
// status is not used, since it also reports on the host's own units.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze not installed: %v", err)
	}
	const systemUnits = "/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(systemUnits, "multi-user.target")); err != nil {
		t.Skipf("no system units to verify against: %v", err)
	}
	root := t.TempDir()
	copyTree(t, systemUnits, filepath.Join(root, systemUnits))
	stub := filepath.Join(root, binary)
	if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "etc/systemd/system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"verify", "--root=" + root}
	for file := range units {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "/etc/systemd/system/"+file)
	}
	out, err := exec.CommandContext(t.Context(), analyze, args...).CombinedOutput()
	t.Logf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	for line := range strings.Lines(string(out)) {
		for file := range units {
			if strings.Contains(line, file) {
				t.Errorf("systemd-analyze verify: %s", strings.TrimSpace(line))
			}
		}
	}
}

// copyTree copies the regular files and symbolic links under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, data, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("copy %s: %w", src, err))
	}
}
