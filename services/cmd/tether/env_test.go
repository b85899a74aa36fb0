package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tetherhq/tether/services/agent"
)

// TestFlagsReadTheirEnvironment: a flag not given on the command line takes
// its TETHER_ variable (or its alias), the command line wins over it, and
// a value the flag refuses is an error that names the variable.
func TestFlagsReadTheirEnvironment(t *testing.T) {
	env := map[string]string{
		"TETHER_PORT_MIN": "7400", "TETHER_SDK_KEEPALIVE": "3s", "TETHER_CAPACITY": "20",
		"NATS_URL": "nats://alias:4222", "TETHER_DATABASE_URL": "postgres://own", "DATABASE_URL": "postgres://alias",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	portMin := fs.Int("port-min", agent.DefaultPortMin, "")
	keepalive := fs.Duration("sdk-keepalive", agent.DefaultStreamKeepalive, "")
	capacity := fs.Int("capacity", agent.DefaultCapacity, "")
	portMax := fs.Int("port-max", agent.DefaultPortMax, "")
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "")
	dbURL := fs.String("database-url", "", "")
	if err := fs.Parse([]string{"--capacity", "5"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	switch {
	case *portMin != 7400 || *keepalive != 3*time.Second:
		t.Errorf("from the environment: port-min %d, sdk-keepalive %s", *portMin, *keepalive)
	case *capacity != 5:
		t.Errorf("capacity %d: the command line's 5 must win over TETHER_CAPACITY", *capacity)
	case *portMax != agent.DefaultPortMax:
		t.Errorf("port-max %d without a variable, want its default", *portMax)
	case *natsURL != "nats://alias:4222" || *dbURL != "postgres://own":
		t.Errorf("nats-url %q (from NATS_URL), database-url %q (TETHER_DATABASE_URL before DATABASE_URL)", *natsURL, *dbURL)
	case !fs.Lookup("port-min").Changed:
		t.Error("a flag set from the environment is not marked given (a required flag would be refused)")
	}

	env["TETHER_PORT_MAX"] = "many"
	err := applyEnv(fs, lookup)
	if err == nil || !strings.Contains(err.Error(), "TETHER_PORT_MAX") {
		t.Fatalf("a bad value: %v, want an error naming TETHER_PORT_MAX", err)
	}
}

// TestEveryFlagDocumentsItsVariable: each flag of each command says which
// variable it reads, and no two flags of a command share one.
func TestEveryFlagDocumentsItsVariable(t *testing.T) {
	root := rootCommand()
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		seen := map[string]string{}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			env := envName(f.Name)
			if !strings.Contains(f.Usage, "(env "+env) || strings.Count(f.Usage, "(env ") != 1 {
				t.Errorf("%s --%s: usage %q does not name %s once", c.CommandPath(), f.Name, f.Usage, env)
			}
			if other, ok := seen[env]; ok {
				t.Errorf("%s: --%s and --%s both read %s", c.CommandPath(), f.Name, other, env)
			}
			seen[env] = f.Name
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestAgentFlagsDefaultAsTheAgentDoes: `tether agent` defaults from the
// agent's own defaults, which its zero options take (the port range had
// drifted: 7300 in the command, 7100 in the agent).
func TestAgentFlagsDefaultAsTheAgentDoes(t *testing.T) {
	root := rootCommand()
	cmd, _, err := root.Find([]string{"agent"})
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{
		"port-min": strconv.Itoa(agent.DefaultPortMin), "port-max": strconv.Itoa(agent.DefaultPortMax),
		"agones-port-min": strconv.Itoa(agent.DefaultAgonesPortMin), "agones-port-max": strconv.Itoa(agent.DefaultAgonesPortMax),
		"capacity": strconv.Itoa(agent.DefaultCapacity), "outbox-max": strconv.Itoa(agent.DefaultOutboxMax),
		"sdk-addr": agent.DefaultSDKAddr, "sdk-http-addr": agent.DefaultSDKHTTPAddr,
		"sdk-keepalive": agent.DefaultStreamKeepalive.String(), "address": agent.DefaultAddress,
	} {
		f := cmd.Flags().Lookup(flag)
		if f == nil {
			t.Errorf("tether agent has no --%s", flag)
			continue
		}
		if f.DefValue != want {
			t.Errorf("tether agent --%s defaults to %s, the agent to %s", flag, f.DefValue, want)
		}
	}
}
