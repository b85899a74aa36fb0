package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/services/dev/devkeys"
)

// ctl runs tetherctl in-process with args as they are (runCLI adds
// --addr; these tests choose the server through contexts).
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(context.Background(), newRoot(&out), args, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// probe runs tetherctl with args followed by a command that settles the
// connection, as an API command would, without calling the API.
func probe(t *testing.T, args ...string) (connection, error) {
	t.Helper()
	var (
		out, errOut bytes.Buffer
		got         connection
		gotErr      error
	)
	a := newApp(&out)
	root := a.root()
	root.AddCommand(&cobra.Command{Use: "probe", RunE: func(*cobra.Command, []string) error {
		got, gotErr = a.connection()
		return nil
	}})
	if code := execute(context.Background(), root, append(args, "probe"), &errOut); code != 0 {
		t.Fatalf("tetherctl %s probe: exit %d\n%s", strings.Join(args, " "), code, errOut.String())
	}
	return got, gotErr
}

// writeMode writes content to dir/name with mode and returns its path.
func writeMode(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return path
}

// isolate clears the variables tetherctl reads, hides this machine's
// `tether dev` keys, and points $TETHER_CONFIG at config.
func isolate(t *testing.T, config string) {
	t.Helper()
	for _, v := range []string{serverEnv, addrEnv, caEnv, tokenEnv} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(configEnv, config)
}

// A setting comes from its flag, else its variable, else the selected
// context, else (the key, on loopback) tether dev's admin key, else the
// default; --context picks another context than current-context.
func TestConnectionPrecedence(t *testing.T) {
	dir := t.TempDir()
	writeMode(t, dir, "main.token", "main-token\n", 0o600)
	cfg := writeMode(t, dir, "config.yaml", `current-context: main
contexts:
- name: main
  server: ctx-api:7070
  ca: ca.pem
  tls: true
  tokenFile: main.token
- name: other
  server: other-api:7070
  token: other-token
- name: local
  server: 127.0.0.1:7070
`, 0o600)
	ctxCA := filepath.Join(dir, "ca.pem")
	type env struct{ server, addr, ca, token, config string }
	envAll := env{server: "env-api:7070", ca: "/env/ca.pem", token: "env-token"}
	for _, tc := range []struct {
		name    string
		env     env
		args    []string
		want    connection
		wantErr string
	}{
		{name: "the current context", want: connection{server: "ctx-api:7070", ca: ctxCA, tls: true, token: "main-token"}},
		{name: "variables beat the context", env: envAll,
			want: connection{server: "env-api:7070", ca: "/env/ca.pem", tls: true, token: "env-token"}},
		{name: "flags beat the variables", env: envAll,
			args: []string{"--server", "flag-api:7070", "--ca", "/flag/ca.pem", "--tls=false", "--token", "flag-token"},
			want: connection{server: "flag-api:7070", ca: "/flag/ca.pem", tls: false, token: "flag-token"}},
		{name: "$TETHER_ADDR when $TETHER_SERVER is unset", env: env{addr: "addr-api:7070", token: "env-token"},
			want: connection{server: "addr-api:7070", ca: ctxCA, tls: true, token: "env-token"}},
		{name: "$TETHER_SERVER beats $TETHER_ADDR", env: env{server: "env-api:7070", addr: "addr-api:7070", token: "env-token"},
			want: connection{server: "env-api:7070", ca: ctxCA, tls: true, token: "env-token"}},
		{name: "the context's key never goes to another server", env: env{server: "elsewhere:7070"},
			wantErr: `context "main" holds a key for ctx-api:7070, not for elsewhere:7070`},
		{name: "--addr is --server's older name", env: envAll, args: []string{"--addr", "flag-api:7070"},
			want: connection{server: "flag-api:7070", ca: "/env/ca.pem", tls: true, token: "env-token"}},
		{name: "--addr and --server that differ", args: []string{"--addr", "a:1", "--server", "b:1"}, wantErr: "--addr is the older name of --server"},
		{name: "--context picks another context", args: []string{"--context", "other"},
			want: connection{server: "other-api:7070", token: "other-token"}},
		{name: "--ca '' drops the context's CA", args: []string{"--ca", ""},
			want: connection{server: "ctx-api:7070", tls: true, token: "main-token"}},
		{name: "a context without a key, on loopback: tether dev's key", args: []string{"--context", "local"},
			want: connection{server: "127.0.0.1:7070", token: "dev-admin-key"}},
		{name: "--server naming the context's own server keeps its key", args: []string{"--context", "other", "--server", "other-api:7070"},
			want: connection{server: "other-api:7070", token: "other-token"}},
		{name: "no config file: the defaults", env: env{config: filepath.Join(dir, "none.yaml")},
			want: connection{server: defaultServer, token: "dev-admin-key"}},
		{name: "--config beats $TETHER_CONFIG", env: env{config: filepath.Join(dir, "none.yaml")}, args: []string{"--config", cfg},
			want: connection{server: "ctx-api:7070", ca: ctxCA, tls: true, token: "main-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := cfg
			if tc.env.config != "" {
				config = tc.env.config
			}
			isolate(t, config)
			t.Setenv(serverEnv, tc.env.server)
			t.Setenv(addrEnv, tc.env.addr)
			t.Setenv(caEnv, tc.env.ca)
			t.Setenv(tokenEnv, tc.env.token)
			cache := t.TempDir()
			t.Setenv("XDG_CACHE_HOME", cache)
			dataDir := filepath.Join(cache, "tether", "dev")
			if err := os.MkdirAll(devkeys.Dir(dataDir), 0o700); err != nil {
				t.Fatal(err)
			}
			writeMode(t, devkeys.Dir(dataDir), "admin.key", "dev-admin-key\n", 0o600)

			got, err := probe(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one that says %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.tokenFrom = ""
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDefaultConfigPath(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct{ name, xdg, want string }{
		{"XDG_CONFIG_HOME", "/xdg", "/xdg/tether/config.yaml"},
		{"XDG_CONFIG_HOME unset", "", filepath.Join(home, ".config", "tether", "config.yaml")},
		{"XDG_CONFIG_HOME relative, so ignored", "rel", filepath.Join(home, ".config", "tether", "config.yaml")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv(xdgConfigEnv, tc.xdg)
			got, err := defaultConfigPath()
			if err != nil || got != tc.want {
				t.Errorf("defaultConfigPath() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The config subcommands, run one after another: each run reads what the
// ones before wrote (use-context persists), and the file stays 0600 in a
// directory made 0700.
func TestConfigCommands(t *testing.T) {
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "made", "tether")
	cfg := filepath.Join(cfgDir, "config.yaml")
	isolate(t, cfg)
	t.Chdir(dir)
	for _, step := range []struct {
		args               []string
		wantCode           int
		wantOut, wantError string
	}{
		{args: []string{"config", "current-context"}, wantCode: 1, wantError: "no current context"},
		{args: []string{"config", "get-contexts"}, wantOut: "CURRENT  NAME  SERVER  CA  AUTH\n"},
		{args: []string{"config", "set-context", "dev", "--server", "127.0.0.1:7070", "--token-file", "dev.token"}, wantOut: `Context "dev" created`},
		{args: []string{"config", "set-context", "prod", "--server", "api-1:7070,api-2:7070", "--ca", "ca.pem"}, wantOut: `Context "prod" created`},
		{args: []string{"config", "set-context", "new", "--ca", "ca.pem"}, wantCode: 1, wantError: `context "new" is new: give its --server`},
		{args: []string{"config", "set-context", "prod", "--token", "abc"}, wantCode: 1, wantError: "--token-file"},
		{args: []string{"config", "use-context", "prod"}, wantOut: `Switched to context "prod"`},
		{args: []string{"config", "current-context"}, wantOut: "prod\n"},
		{args: []string{"config", "set-context", "prod", "--tls"}, wantOut: `Context "prod" modified`},
		{args: []string{"config", "set-context", "prod", "--ca", ""}, wantOut: `Context "prod" modified`},
		{args: []string{"config", "get-contexts"}, wantOut: "*        prod  api-1:7070,api-2:7070  (system)  none"},
		{args: []string{"config", "use-context", "dev"}, wantOut: `Switched to context "dev"`},
		{args: []string{"config", "delete-context", "dev"}, wantOut: `Deleted context "dev"`, wantError: "was the current context"},
		{args: []string{"config", "current-context"}, wantCode: 1, wantError: "no current context"},
		{args: []string{"config", "set-context", "dev", "--server", "127.0.0.1:7071", "--token-file", "dev.token"}, wantOut: `Context "dev" created`},
		{args: []string{"config", "use-context", "dev"}, wantOut: `Switched to context "dev"`},
	} {
		r := ctl(t, step.args...)
		name := strings.Join(step.args, " ")
		if r.code != step.wantCode || !strings.Contains(r.stdout, step.wantOut) || !strings.Contains(r.stderr, step.wantError) {
			t.Fatalf("tetherctl %s: exit %d, want %d\nstdout %q, want %q in it\nstderr %q, want %q in it",
				name, r.code, step.wantCode, r.stdout, step.wantOut, r.stderr, step.wantError)
		}
	}

	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got config
	if err := yaml.UnmarshalStrict(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := config{CurrentContext: "dev", Contexts: []namedContext{
		{Name: "prod", Server: "api-1:7070,api-2:7070", TLS: true},
		{Name: "dev", Server: "127.0.0.1:7071", TokenFile: filepath.Join(dir, "dev.token")},
	}}
	if gotY, wantY := string(raw), mustYAML(t, want); gotY != wantY {
		t.Errorf("config file:\n%s\nwant:\n%s", gotY, wantY)
	}
	for path, mode := range map[string]os.FileMode{cfg: configFileMode, cfgDir: configDirMode, filepath.Dir(cfgDir): configDirMode} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %04o, want %04o", path, fi.Mode().Perm(), mode)
		}
	}
	if entries, _ := os.ReadDir(cfgDir); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want the config file only (no temporary files left)", cfgDir, len(entries))
	}
}

func mustYAML(t *testing.T, c config) string {
	t.Helper()
	raw, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// A config file that is a symbolic link (dotfiles kept elsewhere) stays
// one: its target is replaced.
func TestConfigWriteFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	target := writeMode(t, dir, "real.yaml", "contexts:\n- name: a\n  server: a:1\n", 0o600)
	link := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	isolate(t, link)
	if r := ctl(t, "config", "use-context", "a"); r.code != 0 {
		t.Fatalf("use-context: exit %d\n%s", r.code, r.stderr)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symbolic link (%v)", link, err)
	}
	if raw, _ := os.ReadFile(target); !strings.Contains(string(raw), "current-context: a") {
		t.Errorf("the link's target was not updated:\n%s", raw)
	}
}

// A config file that holds an inline token is refused unless only its
// owner may read and write it; with tokenFile its mode is free.
func TestInlineTokenNeedsAPrivateFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix file modes")
	}
	const inline = "contexts:\n- name: a\n  server: a:7070\n  token: s3cret\n"
	const file = "contexts:\n- name: a\n  server: a:7070\n  tokenFile: a.token\n"
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		refused bool
	}{
		{"inline token, 0600", inline, 0o600, false},
		{"inline token, 0400", inline, 0o400, false},
		{"inline token, group may read", inline, 0o640, true},
		{"inline token, others may read", inline, 0o604, true},
		{"inline token, group may write", inline, 0o620, true},
		{"inline token, 0644", inline, 0o644, true},
		{"tokenFile, 0644", file, 0o644, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeMode(t, dir, "a.token", "s3cret", 0o600)
			cfg := writeMode(t, dir, "config.yaml", tc.content, tc.mode)
			isolate(t, cfg)
			for _, args := range [][]string{{"config", "get-contexts"}, {"--context", "a", "--timeout", "1ms", "fleets", "list"}} {
				r := ctl(t, args...)
				refused := strings.Contains(r.stderr, "chmod 600 "+cfg)
				if refused != tc.refused {
					t.Errorf("tetherctl %s: refused %v, want %v (exit %d)\n%s", strings.Join(args, " "), refused, tc.refused, r.code, r.stderr)
				}
				if refused && (r.code != 1 || !strings.Contains(r.stderr, "inline token") || !strings.Contains(r.stderr, "tokenFile")) {
					t.Errorf("tetherctl %s: exit %d, %q; want a refusal that says why and what to do", strings.Join(args, " "), r.code, r.stderr)
				}
				if strings.Contains(r.stdout+r.stderr, "s3cret") {
					t.Errorf("tetherctl %s printed the token", strings.Join(args, " "))
				}
			}
		})
	}
}

// get-contexts says how each context authenticates, never with what.
func TestGetContextsNeverPrintsAToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeMode(t, dir, "b.token", "file-s3cret-key\n", 0o600)
	cfg := writeMode(t, dir, "config.yaml", `current-context: b
contexts:
- name: a
  server: a:7070
  token: inline-s3cret-key
- name: b
  server: b-1:7070,b-2:7070
  ca: /etc/tether/ca.pem
  tokenFile: `+tokenFile+`
- name: c
  server: 127.0.0.1:7070
  tls: true
`, 0o600)
	isolate(t, cfg)
	for _, tc := range []struct {
		format string
		want   []string
	}{
		{formatTable, []string{
			"CURRENT  NAME  SERVER             CA                  AUTH",
			"         a     a:7070             -                   token (inline)",
			"*        b     b-1:7070,b-2:7070  /etc/tether/ca.pem  token-file " + tokenFile,
			"         c     127.0.0.1:7070     (system)            none",
		}},
		{formatJSON, []string{`"auth": "token (inline)"`, `"auth": "token-file ` + tokenFile + `"`, `"auth": "none"`, `"current": true`}},
		{formatYAML, []string{"auth: token (inline)", "auth: token-file " + tokenFile, "auth: none"}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			r := ctl(t, "-o", tc.format, "config", "get-contexts")
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			for _, secret := range []string{"inline-s3cret-key", "file-s3cret-key"} {
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("get-contexts printed a token:\n%s", r.stdout)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

// A context that is not there is an error that names it and says which
// there are, whichever way it was asked for; the file stays as it was.
func TestUnknownContextIsAClearError(t *testing.T) {
	const content = "current-context: main\ncontexts:\n- name: main\n  server: a:7070\n- name: other\n  server: b:7070\n"
	for _, tc := range []struct {
		name    string
		content string // "": no config file
		args    []string
		want    []string
	}{
		{"--context", content, []string{"--context", "nope", "fleets", "list"}, []string{`no context "nope"`, "it has main, other", "get-contexts"}},
		{"--context, no config file", "", []string{"--context", "nope", "fleets", "list"}, []string{`no context "nope"`, "does not exist", "set-context nope"}},
		{"use-context", content, []string{"config", "use-context", "nope"}, []string{`no context "nope"`, "it has main, other"}},
		{"delete-context", content, []string{"config", "delete-context", "nope"}, []string{`no context "nope"`, "it has main, other"}},
		{"current-context names none", "current-context: gone\ncontexts:\n- name: main\n", []string{"fleets", "list"},
			[]string{`current-context "gone"`, "it has main", "use-context"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "config.yaml")
			if tc.content != "" {
				writeMode(t, dir, "config.yaml", tc.content, 0o600)
			}
			isolate(t, cfg)
			r := ctl(t, tc.args...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q lacks %q", r.stderr, w)
				}
			}
			raw, _ := os.ReadFile(cfg)
			if string(raw) != tc.content {
				t.Errorf("the config file changed:\n%s", raw)
			}
		})
	}
}

// The config file is read strictly: what it does not define, a key given
// twice, a value of the wrong type, or contexts that clash are errors that
// name the culprit.
func TestConfigIsStrict(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"unknown field", "contexts: []\nbogus: 1\n", `unknown field "bogus"`},
		{"unknown field of a context", "contexts:\n- name: a\n  insecure: true\n", `unknown field "contexts[0].insecure"`},
		{"field spelt in another case", "contexts:\n- name: a\n  tokenfile: t\n", `unknown field "contexts[0].tokenfile" (did you mean "tokenFile"?)`},
		{"field given twice", "contexts:\n- name: a\n  server: a:1\n  server: b:1\n", `key "server" already set`},
		{"wrong type", "contexts:\n- name: a\n  tls: maybe\n", "tls"},
		{"context without a name", "contexts:\n- server: a:1\n", "contexts[0] has no name"},
		{"two contexts of one name", "contexts:\n- name: a\n- name: a\n", `two contexts are named "a"`},
		{"token and tokenFile", "contexts:\n- name: a\n  token: k\n  tokenFile: f\n", `context "a" has both token and tokenFile`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeMode(t, t.TempDir(), "config.yaml", tc.content, 0o600)
			isolate(t, cfg)
			r := ctl(t, "config", "get-contexts")
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, cfg) {
				t.Errorf("exit %d, stderr %q; want an error naming %s and %q", r.code, r.stderr, cfg, tc.want)
			}
		})
	}
}
