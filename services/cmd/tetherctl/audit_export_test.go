package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestAuditExport(t *testing.T) {
	s := newStack(t)
	storedAt := func(seq string) time.Time {
		t.Helper()
		n := mustUint(t, seq)
		m, err := s.store.Stream().GetMsg(s.ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		return m.Time
	}
	var seqs []string
	for _, id := range []string{"a", "b", "a", "c", "a"} {
		seqs = append(seqs, s.appendEvents(events.FleetName(id), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{}}))
	}
	from, to := storedAt(seqs[1]).Format(time.RFC3339Nano), storedAt(seqs[4]).Format(time.RFC3339Nano)

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"range", []string{"--from", from, "--to", to}, seqs[1:4]},
		{"to now", []string{"--from", from}, seqs[1:]},
		{"duration ago", []string{"--from", "1h"}, seqs},
		{"fleet", []string{"--from", "1h", "--fleet", "a"}, []string{seqs[0], seqs[2], seqs[4]}},
		{"nothing", []string{"--from", "2h", "--to", "1h"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// -o is ignored: export always writes JSON lines.
			out := s.ok(append([]string{"-o", "yaml", "audit", "export"}, tc.args...)...)
			var got []string
			for _, l := range jsonLines(t, out) {
				if l.Type != "FleetCreated" {
					t.Fatalf("line %+v", l)
				}
				got = append(got, l.Sequence)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("exported %v, want %v", got, tc.want)
			}
		})
	}
	for _, args := range [][]string{{}, {"--from", "yesterday"}, {"--from", "1h", "--to", "2h"}} {
		if r := s.run(append([]string{"audit", "export"}, args...)...); r.code != 1 || !strings.HasPrefix(r.stderr, "error: --") {
			t.Errorf("export %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	var n uint64
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("%q is not a sequence", s)
		}
		n = n*10 + uint64(r-'0')
	}
	return n
}
