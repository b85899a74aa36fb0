package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const arenaYAML = `# A fleet in the REST shape (docs/architecture.md, "The REST contract").
name: arena
replicas: 3
template:
  command: /usr/local/bin/mygame
  args: ["--port", "${TETHER_PORT_GAME}"]
  env: {MODE: ranked}
  ports:
    - name: game
      protocol: UDP
health: {initialDelaySeconds: 5, periodSeconds: 5, failureThreshold: 3}
sdkDisconnectGraceSeconds: 30
playerSessions: {maxPlayers: 16, reservationTimeoutSeconds: 60, reconnectWindowSeconds: 120}
scheduling: DISTRIBUTED
labels: {mode: ranked}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiFleet is the part of a fleet's JSON the tests look at.
type apiFleet struct {
	Name     string `json:"name"`
	Replicas int    `json:"replicas"`
	Template struct {
		Command string `json:"command"`
		Ports   []struct {
			Name     string `json:"name"`
			Protocol string `json:"protocol"`
		} `json:"ports"`
	} `json:"template"`
	Scheduling string            `json:"scheduling"`
	Labels     map[string]string `json:"labels"`
	Sequence   string            `json:"sequence"`
	DeleteTime string            `json:"deleteTime"`
}

func decodeFleet(t *testing.T, js string) apiFleet {
	t.Helper()
	var f apiFleet
	if err := json.Unmarshal([]byte(js), &f); err != nil {
		t.Fatalf("not a fleet in JSON: %v\n%s", err, js)
	}
	return f
}

// tableRows returns a table's data rows (without the header) split into cells.
func tableRows(t *testing.T, out string, header ...string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(header, " ") {
		t.Fatalf("table header %q, want %q\n%s", got, header, out)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

var fleetHeader = []string{"NAME", "REPLICAS", "READY", "ALLOCATED", "UNHEALTHY", "SCHEDULING", "AGE"}

func TestFleetLifecycle(t *testing.T) {
	s := newStack(t)

	// An empty system lists no fleets, in every format.
	if rows := tableRows(t, s.ok("fleets", "list"), fleetHeader...); len(rows) != 0 {
		t.Fatalf("fleets on an empty system: %v", rows)
	}
	if out := s.ok("fleets", "list", "-o", "json"); strings.Join(strings.Fields(out), "") != `{"fleets":[]}` {
		t.Fatalf("empty list as JSON: %s", out)
	}

	// Create from a YAML file. Reads of the views trail the writes, so the
	// reads below pass the sequence the write returned.
	created := decodeFleet(t, s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML), "-o", "json"))
	if created.Name != "fleets/arena" || created.Replicas != 3 || created.Sequence == "" {
		t.Fatalf("create returned %+v", created)
	}
	seq := created.Sequence

	// Get, as a table and as JSON in the REST shape.
	rows := tableRows(t, s.ok("fleets", "get", "arena", "--min-sequence", seq), fleetHeader...)
	if len(rows) != 1 || strings.Join(rows[0][:6], " ") != "arena 3 0 0 0 DISTRIBUTED" {
		t.Fatalf("get table rows: %v", rows)
	}
	got := decodeFleet(t, s.ok("fleets", "get", "fleets/arena", "-o", "json", "--min-sequence", seq))
	if got.Name != "fleets/arena" || got.Replicas != 3 || got.Template.Command != "/usr/local/bin/mygame" ||
		len(got.Template.Ports) != 1 || got.Template.Ports[0].Protocol != "UDP" || got.Labels["mode"] != "ranked" {
		t.Fatalf("get -o json: %+v", got)
	}
	var fromYAML apiFleet
	if err := yaml.Unmarshal([]byte(s.ok("fleets", "get", "arena", "-o", "yaml")), &fromYAML); err != nil || fromYAML.Name != "fleets/arena" || fromYAML.Scheduling != "DISTRIBUTED" {
		t.Fatalf("get -o yaml: %v %+v", err, fromYAML)
	}

	// List, as a table and as {"fleets": [...]}.
	rows = tableRows(t, s.ok("fleets", "list", "--min-sequence", seq), fleetHeader...)
	if len(rows) != 1 || rows[0][0] != "arena" {
		t.Fatalf("list rows: %v", rows)
	}
	var list struct{ Fleets []apiFleet }
	if err := json.Unmarshal([]byte(s.ok("fleets", "list", "-o", "json")), &list); err != nil || len(list.Fleets) != 1 || list.Fleets[0].Name != "fleets/arena" {
		t.Fatalf("list -o json: %v %+v", err, list)
	}

	// Scale: the write answers with the new count at once; reads of the
	// views follow.
	scaled := decodeFleet(t, s.ok("fleets", "scale", "arena", "5", "-o", "json"))
	if scaled.Replicas != 5 || scaled.Sequence == "" {
		t.Fatalf("scale returned %+v", scaled)
	}
	rows = tableRows(t, s.ok("fleets", "get", "arena", "--min-sequence", scaled.Sequence), fleetHeader...)
	if len(rows) != 1 || rows[0][1] != "5" {
		t.Fatalf("get after scale: %v", rows)
	}
	if got := decodeFleet(t, s.ok("fleets", "get", "arena", "-o", "json")); got.Template.Command != "/usr/local/bin/mygame" {
		t.Fatalf("scaling changed the template: %+v", got)
	}

	// Delete, then the fleet is gone: NOT_FOUND and a non-zero exit.
	deleted := decodeFleet(t, s.ok("fleets", "delete", "arena", "-o", "json"))
	if deleted.DeleteTime == "" {
		t.Fatalf("delete returned %+v", deleted)
	}
	gone := s.run("fleets", "get", "arena", "--min-sequence", deleted.Sequence)
	if gone.code != 1 || gone.stderr != "error: fleets/arena not found (NOT_FOUND)\n" || gone.stdout != "" {
		t.Fatalf("get after delete: exit %d, stdout %q, stderr %q", gone.code, gone.stdout, gone.stderr)
	}
	if rows := tableRows(t, s.ok("fleets", "list", "--min-sequence", deleted.Sequence), fleetHeader...); len(rows) != 0 {
		t.Fatalf("list after delete: %v", rows)
	}
	if r := s.run("fleets", "delete", "arena"); r.code != 1 || r.stderr != "error: fleets/arena not found (NOT_FOUND)\n" {
		t.Fatalf("second delete: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestCreateFromStdinAsJSONWithNameFlag(t *testing.T) {
	s := newStack(t)
	in := strings.NewReader(`{"name": "ignored", "replicas": 1, "template": {"command": "/bin/game"}}`)
	r := runCLI(t.Context(), s.addr, in, "fleets", "create", "-f", "-", "--name", "fleets/duel", "-o", "json")
	if r.code != 0 {
		t.Fatalf("create from stdin: exit %d: %s", r.code, r.stderr)
	}
	if f := decodeFleet(t, r.stdout); f.Name != "fleets/duel" || f.Replicas != 1 {
		t.Fatalf("created %+v", f)
	}
	// As a table, delete says what it deleted.
	if out := s.ok("fleets", "delete", "duel"); out != "fleets/duel deleted\n" {
		t.Fatalf("delete printed %q", out)
	}
}

func TestFleetCommandsReportAPIErrors(t *testing.T) {
	s := newStack(t)
	created := s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	if rows := tableRows(t, created, fleetHeader...); len(rows) != 1 || strings.Join(rows[0][:6], " ") != "arena 3 0 0 0 DISTRIBUTED" {
		t.Fatalf("create printed:\n%s", created)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"invalid fleet id", []string{"fleets", "create", "-f", writeFile(t, "bad-id.yaml", arenaYAML), "--name", "Bad_Id"},
			"(INVALID_ARGUMENT, field fleet_id)"},
		{"negative replicas", []string{"fleets", "scale", "arena", "--", "-2"}, "(INVALID_ARGUMENT, field fleet.replicas)"},
		{"missing command", []string{"fleets", "create", "-f", writeFile(t, "nocmd.yaml", "name: nocmd\nreplicas: 1\n")},
			"(INVALID_ARGUMENT, field fleet.template.command)"},
		{"duplicate", []string{"fleets", "create", "-f", writeFile(t, "again.yaml", arenaYAML)},
			"error: fleets/arena already exists (ALREADY_EXISTS)"},
		{"scale unknown fleet", []string{"fleets", "scale", "nope", "2"}, "error: fleets/nope not found (NOT_FOUND)"},
		{"replicas not a number", []string{"fleets", "scale", "arena", "many"}, `error: replicas "many" is not a whole number`},
		{"no id", []string{"fleets", "create", "-f", writeFile(t, "anon.yaml", "replicas: 1\n")}, "the fleet needs an id"},
		{"no file flag", []string{"fleets", "create"}, `required flag(s) "file" not set`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.stderr) || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and stderr with %q", r.code, r.stdout, r.stderr, tc.stderr)
			}
		})
	}
}

func TestBadFleetFileFailsBeforeCallingTheAPI(t *testing.T) {
	// Nothing listens here: the file is refused before any call.
	const addr = "127.0.0.1:1"
	for _, tc := range []struct {
		name, content, want string
	}{
		{"unknown top-level field", "name: x\nreplicas: 1\ncolour: red\n", `unknown field "colour" at the top level`},
		{"misspelt field", "name: x\nreplica: 1\n", `(did you mean "replicas"?)`},
		{"unknown nested field", "name: x\ntemplate:\n  command: /g\n  ports: [{name: game, number: 7000}]\n",
			`unknown field "template.ports[0].number" in template.ports[0]`},
		{"wrong type", "name: x\nreplicas: three\n", `invalid value for int32 field replicas: "three"`},
		{"unknown enum", "name: x\nscheduling: RANDOM\n", `invalid value for enum field scheduling: "RANDOM"`},
		{"not an object", "- replicas: 1\n", "want a fleet object (replicas, template, ...), got a list"},
		{"empty", "", "the file is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "fleet.yaml", tc.content)
			r := runCLI(t.Context(), addr, nil, "fleets", "create", "-f", path)
			if r.code != 1 || !strings.HasPrefix(r.stderr, "error: "+path+": ") || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, "line 1:") || strings.Contains(r.stderr, "proto:") {
				t.Fatalf("error shows protojson internals: %q", r.stderr)
			}
		})
	}
	if r := runCLI(t.Context(), addr, nil, "fleets", "create", "-f", filepath.Join(t.TempDir(), "missing.yaml")); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Fatalf("missing file: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestUnreachableServerAndBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable", []string{"fleets", "list"}, "error: cannot reach the API server at 127.0.0.1:1: "},
		{"bad output", []string{"fleets", "list", "-o", "xml"}, `error: --output must be table, json or yaml, not "xml"`},
		{"bad timeout", []string{"hosts", "list", "--timeout", "0s"}, "error: --timeout must be positive"},
		{"bad game server name", []string{"gameservers", "get", "a/b/c"}, `error: game server name "a/b/c": want GAMESERVER (an id no other fleet has), FLEET/GAMESERVER`},
		{"bad interval", []string{"gameservers", "watch", "--interval", "0s"}, "error: --interval must be positive"},
		{"unknown subcommand", []string{"fleets", "bogus"}, `error: unknown command "bogus" for "tetherctl fleets"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t.Context(), "127.0.0.1:1", nil, tc.args...)
			if r.code != 1 || !strings.HasPrefix(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

// The fleet examples of deploy/examples: updating arena with arena-v2
// makes revision 2 and starts its rollout (the file's strategy too); the
// rollout pauses, resumes and is undone from tetherctl; the autoscaled
// example is created as written.
func TestFleetsUpdateAndRollout(t *testing.T) {
	s := newStack(t)
	examples := "../../../deploy/examples/"
	s.ok("fleets", "create", "-f", examples+"arena.yaml")
	out := s.ok("fleets", "update", "arena", "-f", examples+"arena-v2.yaml", "-o", "json")
	var f struct {
		Sequence string `json:"sequence"`
		Revision string `json:"revision"`
		Template struct {
			Env map[string]string `json:"env"`
		} `json:"template"`
		Strategy struct {
			MaxSurge string `json:"maxSurge"`
		} `json:"strategy"`
		Status struct {
			Rollout struct {
				State  string `json:"state"`
				Reason string `json:"reason"`
			} `json:"rollout"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if f.Revision != "2" || f.Template.Env["BUILD"] != "2" || f.Strategy.MaxSurge != "1" ||
		f.Status.Rollout.State != "PROGRESSING" || f.Status.Rollout.Reason != "template changed" {
		t.Fatalf("after the update: %+v", f)
	}
	for _, step := range []struct{ cmd, want string }{
		{"status", "rollout to revision 2 (from 1) PROGRESSING"},
		{"pause", "rollout to revision 2 (from 1) PAUSED"},
		{"resume", "rollout to revision 2 (from 1) PROGRESSING"},
		{"undo", "rollout to revision 1 (from 2) PROGRESSING"},
	} {
		args := []string{"fleets", "rollout", step.cmd, "arena"}
		if step.cmd == "status" {
			args = append(args, "--min-sequence", f.Sequence)
		}
		if got := s.ok(args...); !strings.Contains(got, step.want) {
			t.Fatalf("fleets rollout %s:\n%s\nwant %q", step.cmd, got, step.want)
		}
	}
	if r := s.run("fleets", "update", "arena", "-f", writeFile(t, "empty.yaml", "name: arena\n")); r.code == 0 || !strings.Contains(r.stderr, "no field to change") {
		t.Fatalf("an update with no field: exit %d, %q", r.code, r.stderr)
	}
	out = s.ok("fleets", "create", "-f", examples+"lobby-autoscaled.yaml", "-o", "json")
	if !strings.Contains(out, `"bufferSize": "3"`) || !strings.Contains(out, `"zone": "dev-c"`) {
		t.Fatalf("the autoscaled example as created:\n%s", out)
	}
}
