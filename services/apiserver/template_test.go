package apiserver

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// checkTemplate refuses exactly what exec (or the port space) can never
// take, and nothing just under those limits.
func TestCheckTemplate(t *testing.T) {
	chunks := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("a", size)
		}
		return out
	}
	envOf := func(args []string) map[string]string {
		env := map[string]string{}
		for i, a := range args {
			env[fmt.Sprintf("V%d", i)] = a
		}
		return env
	}
	ports := func(n int) []*tetherv1.PortSpec {
		out := make([]*tetherv1.PortSpec, n)
		for i := range out {
			out[i] = &tetherv1.PortSpec{Name: fmt.Sprintf("p%d", i)}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		t     *tetherv1.GameServerTemplate
		field string // "" when accepted
	}{
		{"ordinary", &tetherv1.GameServerTemplate{Command: "game", Args: []string{"--port", "${TETHER_PORT_GAME}"}, Env: map[string]string{"MODE": "x"}}, ""},
		{"argument of MAX_ARG_STRLEN-1 bytes", &tetherv1.GameServerTemplate{Command: "/g", Args: []string{strings.Repeat("a", maxArgStrlen-1)}}, ""},
		{"argument of MAX_ARG_STRLEN bytes", &tetherv1.GameServerTemplate{Command: "/g", Args: []string{"x", strings.Repeat("a", maxArgStrlen)}}, "spec.template.args[1]"},
		{"environment string of MAX_ARG_STRLEN-1 bytes", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"K": strings.Repeat("a", maxArgStrlen-3)}}, ""},
		{"environment string of MAX_ARG_STRLEN bytes", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"K": strings.Repeat("a", maxArgStrlen-2)}}, "spec.template.env[K]"},
		{"1.9 MB of arguments", &tetherv1.GameServerTemplate{Command: "/g", Args: chunks(19, 100_000)}, ""},
		{"2.1 MB of arguments", &tetherv1.GameServerTemplate{Command: "/g", Args: chunks(21, 100_000)}, "spec.template.args"},
		{"2.1 MB of environment", &tetherv1.GameServerTemplate{Command: "/g", Env: envOf(chunks(21, 100_000))}, "spec.template.env"},
		{"1 MB of each", &tetherv1.GameServerTemplate{Command: "/g", Args: chunks(11, 100_000), Env: envOf(chunks(11, 100_000))}, "spec.template.env"},
		{"NUL in an argument", &tetherv1.GameServerTemplate{Command: "/g", Args: []string{"a\x00b"}}, "spec.template.args[0]"},
		{"NUL in an environment value", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"K": "a\x00b"}}, "spec.template.env[K]"},
		{"NUL in the command", &tetherv1.GameServerTemplate{Command: "/g\x00"}, "spec.template.command"},
		{"a relative command (found on PATH)", &tetherv1.GameServerTemplate{Command: "sleep"}, ""},
		{"1000 ports", &tetherv1.GameServerTemplate{Command: "/g", Ports: ports(1000)}, ""},
		{"65535 ports, one variable each over ARG_MAX", &tetherv1.GameServerTemplate{Command: "/g", Ports: ports(maxPorts)}, "spec.template.ports"},
		{"65536 ports", &tetherv1.GameServerTemplate{Command: "/g", Ports: ports(maxPorts + 1)}, "spec.template.ports"},
		{"the token variable", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"TETHER_GAMESERVER_TOKEN": "x"}}, "spec.template.env[TETHER_GAMESERVER_TOKEN]"},
		{"a port variable", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"A": "1", "TETHER_PORT_GAME": "1"}}, "spec.template.env[TETHER_PORT_GAME]"},
		{"an SDK variable", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"TETHER_SDK_HTTP": "x"}}, "spec.template.env[TETHER_SDK_HTTP]"},
		{"the server's name", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"TETHER_GAMESERVER": "x"}}, "spec.template.env[TETHER_GAMESERVER]"},
		{"another TETHER_ variable", &tetherv1.GameServerTemplate{Command: "/g", Env: map[string]string{"TETHER_EXAMPLE_LISTEN_HOST": "127.0.0.1"}}, ""},
		{"the token in an argument", &tetherv1.GameServerTemplate{Command: "/g", Args: []string{"-v", "--token=${TETHER_GAMESERVER_TOKEN}"}}, "spec.template.args[1]"},
		{"the token in an argument, no braces", &tetherv1.GameServerTemplate{Command: "/g", Args: []string{"$TETHER_GAMESERVER_TOKEN"}}, "spec.template.args[0]"},
		{"the token's descriptor in an argument", &tetherv1.GameServerTemplate{Command: "/g", Args: []string{"$TETHER_GAMESERVER_TOKEN_FD", "${TETHER_GAMESERVER_TOKEN_FD}"}}, ""},
		{"no template", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTemplate("spec", tc.t)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ae, ok := err.(*apiError)
			if !ok || ae.code != codes.InvalidArgument || ae.field != tc.field {
				t.Fatalf("got %#v, want INVALID_ARGUMENT on %s", err, tc.field)
			}
		})
	}
}
