package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	defaults := config{heartbeatInterval: time.Second, portName: "game"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    config
		wantErr string
	}{
		{name: "defaults", want: defaults},
		{name: "flags", args: []string{
			"--ready-delay", "2s", "--exit-after=1m", "--exit-code", "4", "--crash-before-ready",
			"--stop-heartbeat-after", "30s", "--reconnect-every", "5s", "--ignore-sigterm", "--ignore-shutdown-notice",
			"--heartbeat-interval", "250ms", "--port-name", "query", "--listen-host", "127.0.0.1",
		}, want: config{
			readyDelay: 2 * time.Second, exitAfter: time.Minute, exitCode: 4, crashBeforeReady: true,
			stopHeartbeatAfter: 30 * time.Second, reconnectEvery: 5 * time.Second, ignoreSigterm: true, ignoreShutdownNotice: true,
			heartbeatInterval: 250 * time.Millisecond, portName: "query", listenHost: "127.0.0.1",
		}},
		{name: "environment", env: map[string]string{
			"TETHER_EXAMPLE_READY_DELAY": "3s", "TETHER_EXAMPLE_CRASH_BEFORE_READY": "true",
			"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "10s", "TETHER_EXAMPLE_IGNORE_SIGTERM": "1",
		}, want: config{
			readyDelay: 3 * time.Second, crashBeforeReady: true, stopHeartbeatAfter: 10 * time.Second, ignoreSigterm: true,
			heartbeatInterval: time.Second, portName: "game",
		}},
		{name: "a flag wins over its variable", args: []string{"--exit-code=9", "--ignore-sigterm=false"},
			env:  map[string]string{"TETHER_EXAMPLE_EXIT_CODE": "5", "TETHER_EXAMPLE_IGNORE_SIGTERM": "true"},
			want: defaults.with(func(c *config) { c.exitCode = 9 })},
		{name: "bad variable", env: map[string]string{"TETHER_EXAMPLE_RECONNECT_EVERY": "often"}, wantErr: "$TETHER_EXAMPLE_RECONNECT_EVERY"},
		{name: "bad flag", args: []string{"--ready-delay", "soon"}, wantErr: "invalid value"},
		{name: "unknown flag", args: []string{"--fly"}, wantErr: "not defined"},
		{name: "argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "negative duration", args: []string{"--exit-after", "-1s"}, wantErr: "negative"},
		{name: "zero heartbeat interval", args: []string{"--heartbeat-interval", "0s"}, wantErr: "not positive"},
		{name: "exit code out of range", args: []string{"--exit-code", "256"}, wantErr: "not in 0-255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, err := parse(tt.args, lookup, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("parse:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	var usage strings.Builder
	_, err := parse([]string{"--help"}, func(string) (string, bool) { return "", false }, &usage)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(usage.String(), "-crash-before-ready") {
		t.Fatalf("usage does not list the flags:\n%s", usage.String())
	}
}

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{
		"ready-delay":          "TETHER_EXAMPLE_READY_DELAY",
		"crash-before-ready":   "TETHER_EXAMPLE_CRASH_BEFORE_READY",
		"stop-heartbeat-after": "TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER",
	} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

// with returns c changed by change.
func (c config) with(change func(*config)) config {
	change(&c)
	return c
}
