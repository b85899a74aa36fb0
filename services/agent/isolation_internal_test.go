package agent

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestLookupRunAs(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody on this machine: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	tests := []struct {
		name       string
		spec       string
		euid, egid int
		allowRoot  bool
		wantCred   bool   // a credential to start processes with
		wantErr    string // "" for none
		wantIsRoot bool   // the error is ErrRootGameServers
	}{
		{name: "none", spec: "", euid: 0},
		{name: "by name, from root", spec: "nobody", euid: 0, wantCred: true},
		{name: "by uid, from root", spec: nobody.Uid, euid: 0, wantCred: true},
		{name: "the agent's own user", spec: "nobody", euid: uid, egid: gid},
		{name: "another user, not from root", spec: "nobody", euid: uid + 1, egid: gid, wantErr: "needs an agent running as root"},
		{name: "root", spec: "root", euid: 0, wantErr: "is root", wantIsRoot: true},
		{name: "root by uid", spec: "0", euid: 0, wantErr: "is root", wantIsRoot: true},
		{name: "root, allowed", spec: "root", euid: 0, allowRoot: true},
		{name: "unknown", spec: "no-such-user-for-tether", euid: 0, wantErr: "no-such-user-for-tether"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := lookupRunAs(tt.spec, tt.euid, tt.egid, tt.allowRoot)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				if errors.Is(err, ErrRootGameServers) != tt.wantIsRoot {
					t.Fatalf("error %v is ErrRootGameServers: %v, want %v", err, !tt.wantIsRoot, tt.wantIsRoot)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.spec == "" {
				if r != nil {
					t.Fatalf("run as %+v for no user", r)
				}
				return
			}
			if (r.cred != nil) != tt.wantCred {
				t.Fatalf("credential %+v, want one: %v", r.cred, tt.wantCred)
			}
			if r.cred != nil && (int(r.cred.Uid) != uid || int(r.cred.Gid) != gid || r.cred.Groups == nil || len(r.cred.Groups) != 0) {
				t.Fatalf("credential %+v, want uid %d, gid %d and an empty (not nil) group list", r.cred, uid, gid)
			}
		})
	}
}

func TestCheckRunAs(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		euid int
		ok   bool
	}{
		{name: "root, no user", euid: 0},
		{name: "root, a user", opts: Options{RunAs: "nobody"}, euid: 0, ok: true},
		{name: "root, allowed for development", opts: Options{AllowRootGameServers: true}, euid: 0, ok: true},
		{name: "not root", euid: 1000, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkRunAs(tt.opts, tt.euid)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrRootGameServers)) {
				t.Fatalf("checkRunAs = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestCheckAllowedCommands(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{name: "no directories"},
		{name: "only empty names", opts: Options{AllowedCommands: []string{"", ""}}},
		{name: "a directory", opts: Options{AllowedCommands: []string{"", "/opt/games"}}, ok: true},
		{name: "any command, said so", opts: Options{AllowAnyCommand: true}, ok: true},
		{name: "directories, and any command", opts: Options{AllowedCommands: []string{"/opt/games"}, AllowAnyCommand: true}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkAllowedCommands(tt.opts)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrAnyCommand)) {
				t.Fatalf("checkAllowedCommands = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestNewAllowedCommands(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dirs    []string
		want    []string
		wantErr string
	}{
		{name: "none", dirs: nil, want: nil},
		{name: "a directory", dirs: []string{dir}, want: []string{dir}},
		{name: "a link to one, resolved", dirs: []string{link, ""}, want: []string{dir}},
		{name: "missing", dirs: []string{filepath.Join(dir, "missing")}, wantErr: "no such file"},
		{name: "a program, alone", dirs: []string{file}, want: []string{file}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := newAllowedCommands(tt.dirs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			real := make([]string, len(tt.want))
			for i, w := range tt.want {
				if real[i], err = filepath.EvalSymlinks(w); err != nil {
					t.Fatal(err)
				}
			}
			if strings.Join(got, ",") != strings.Join(real, ",") {
				t.Fatalf("dirs %v, want %v", got, real)
			}
		})
	}
}

// TestAllowedCommandsResolveAProgramAlone: a program named in
// AllowedCommands is allowed by itself, not its neighbours.
func TestAllowedCommandsResolveAProgramAlone(t *testing.T) {
	dir := t.TempDir()
	games := filepath.Join(dir, "games")
	if err := os.Mkdir(games, 0o755); err != nil {
		t.Fatal(err)
	}
	alone, neighbour, server := filepath.Join(dir, "alone"), filepath.Join(dir, "neighbour"), filepath.Join(games, "server")
	for _, p := range []string{alone, neighbour, server} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(t.TempDir(), "link-to-alone")
	if err := os.Symlink(alone, link); err != nil {
		t.Fatal(err)
	}
	allowed, err := newAllowedCommands([]string{games, alone})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		command string
		ok      bool
	}{{server, true}, {alone, true}, {link, true}, {neighbour, false}, {alone + "/..", false}, {games + "/../neighbour", false}} {
		got, err := allowed.resolve(tt.command)
		if (err == nil) != tt.ok {
			t.Errorf("resolve(%s) = %q, %v; want allowed: %v", tt.command, got, err, tt.ok)
		}
	}
}
