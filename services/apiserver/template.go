package apiserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tetherhq/tether/events"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Limits of execve(2) on Linux, which a game server's command line and
// environment must fit to start at all.
const (
	// maxArgStrlen is MAX_ARG_STRLEN: the longest single argument or
	// environment string, its terminating NUL included (32 pages).
	maxArgStrlen = 128 << 10
	// maxArgBytes is ARG_MAX with the default 8 MiB stack limit (a quarter
	// of it): all arguments and environment strings, with their NULs and
	// pointers, together.
	maxArgBytes = 2 << 20
	// agentEnvReserve is what the agent adds to each environment besides the
	// ports: PATH, HOME, the server's name, token and SDK addresses.
	agentEnvReserve = 4 << 10
	// maxPorts is the port space: no host can give a server more ports.
	maxPorts = 65535
	// pointerSize is the size of one argv or envp pointer.
	pointerSize = 8
)

// checkTemplate refuses a template that can never start on any host: more
// ports than a host can have, a NUL byte where exec cannot take one, or a
// command line and environment over the exec limits. prefix is the
// template's parent field path ("fleet" or "spec").
func checkTemplate(prefix string, t *tetherv1.GameServerTemplate) error {
	if t == nil {
		return nil
	}
	path := prefix + ".template"
	if err := checkAgentVariables(path, t); err != nil {
		return err
	}
	if n := len(t.GetPorts()); n > maxPorts {
		return invalidField(path+".ports", fmt.Sprintf("%d ports: no host has more than %d", n, maxPorts))
	}
	if strings.ContainsRune(t.GetCommand(), 0) {
		return invalidField(path+".command", "contains a NUL byte, which exec cannot take")
	}
	total := pointerSize + len(t.GetCommand()) + 1 + pointerSize // argv[0] and argv's NULL
	for i, a := range t.GetArgs() {
		if err := checkExecString(fmt.Sprintf("%s.args[%d]", path, i), a); err != nil {
			return err
		}
		total += len(a) + 1 + pointerSize
	}
	if total > maxArgBytes {
		return invalidField(path+".args", fmt.Sprintf("the command line takes %d bytes; exec takes at most %d (ARG_MAX) for arguments and environment together", total, maxArgBytes))
	}
	total += agentEnvReserve + pointerSize
	for _, p := range t.GetPorts() {
		total += len("TETHER_PORT_=65535") + len(p.GetName()) + 1 + pointerSize
	}
	if total > maxArgBytes {
		return invalidField(path+".ports", fmt.Sprintf("arguments and the agent's variables, one TETHER_PORT_<NAME> per port, take %d bytes; exec takes at most %d (ARG_MAX)", total, maxArgBytes))
	}
	for k, v := range t.GetEnv() {
		if err := checkExecString(fmt.Sprintf("%s.env[%s]", path, k), k+"="+v); err != nil {
			return err
		}
		total += len(k) + 1 + len(v) + 1 + pointerSize
	}
	if total > maxArgBytes {
		return invalidField(path+".env", fmt.Sprintf("arguments and environment (with the agent's variables and one per port) take %d bytes; exec takes at most %d (ARG_MAX)", total, maxArgBytes))
	}
	return nil
}

// checkAgentVariables refuses a template that sets a variable the agent
// sets for its game servers (events.AgentVariable), or whose arguments name
// the SDK token: a template's TETHER_GAMESERVER_TOKEN replaced the token
// the agent hands over on descriptor 3, and the token expanded into an
// argument showed in ps to every user of the host. path is the template's
// field path.
func checkAgentVariables(path string, t *tetherv1.GameServerTemplate) error {
	for _, k := range slices.Sorted(maps.Keys(t.GetEnv())) {
		if events.AgentVariable(k) {
			return invalidField(fmt.Sprintf("%s.env[%s]", path, k),
				"is the agent's: it sets TETHER_GAMESERVER and the TETHER_GAMESERVER_*, TETHER_SDK_*, TETHER_PORT_* and AGONES_SDK_* variables of every game server")
		}
	}
	for i, a := range t.GetArgs() {
		if events.NamesToken(a) {
			return invalidField(fmt.Sprintf("%s.args[%d]", path, i), fmt.Sprintf(
				"names %s, which the agent never puts in arguments (ps shows them to every user of the host): the game server reads its token from descriptor 3 (%s_FD)",
				events.TokenVariable, events.TokenVariable))
		}
	}
	return nil
}

// checkExecString refuses a single exec string over MAX_ARG_STRLEN or with
// a NUL byte.
func checkExecString(field, s string) error {
	if strings.ContainsRune(s, 0) {
		return invalidField(field, "contains a NUL byte, which exec cannot take")
	}
	if len(s)+1 > maxArgStrlen {
		return invalidField(field, fmt.Sprintf("is %d bytes; exec takes at most %d per string (MAX_ARG_STRLEN)", len(s), maxArgStrlen-1))
	}
	return nil
}

// checkHostPorts refuses a template that asks for more game ports than any
// known host's agent hands out (HostRegistered.game_ports): no host could
// ever start it. Where no host has reported its range yet, nothing can be
// known and the template passes; so does it, with a warning, when the views
// cannot be read (a fleet is written to the stream, not the views).
func (s *Server) checkHostPorts(ctx context.Context, prefix string, t *tetherv1.GameServerTemplate) error {
	n := len(t.GetPorts())
	if n == 0 {
		return nil
	}
	most, err := s.opts.Views.MostGamePorts(ctx)
	if err != nil {
		s.log.Warn("template's ports not checked against the hosts: views unreadable", "err", err)
		return nil
	}
	if most > 0 && n > int(most) {
		return invalidField(prefix+".template.ports", fmt.Sprintf(
			"%d ports: no host hands out more than %d (the size of its agent's --port-min/--port-max range)", n, most))
	}
	return nil
}
