package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// seedServers appends three READY game servers and returns the last sequence.
func (s *stack) seedServers() string {
	var last string
	for i, id := range []string{"a", "b", "c"} {
		last = s.appendEvents(events.GameServerName("arena", "gs-"+id), &eventsv1.GameServerScheduled{Host: "hosts/h1"},
			&eventsv1.ProcessStarted{Pid: int32(100 + i), Attempt: 1}, &eventsv1.GameServerReady{})
	}
	return last
}

// The projection commands against a real stack: status, check with no
// differences, and a rebuild that swaps in views that answer the same.
func TestProjectionStatusCheckRebuild(t *testing.T) {
	s := newStack(t)
	last := s.seedServers()
	listed := s.ok("gameservers", "list", "--fleet", "arena", "--min-sequence", last)

	lines := strings.Split(strings.TrimSpace(s.ok("status")), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "CHECKPOINT STREAM LAG DEAD LETTERS UPDATED" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), last+" "+last+" 0 0 ") {
		t.Fatalf("status, want checkpoint = stream = %s, lag 0, no dead letters:\n%s", last, strings.Join(lines, "\n"))
	}
	if r := s.run("projections", "check"); r.code != 0 {
		t.Fatalf("check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.run("projections", "rebuild"); r.code != 0 {
		t.Fatalf("rebuild: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	} else if r.stderr != "" {
		// Not a terminal (a file, a pipe, a CI log): no progress bar.
		t.Fatalf("rebuild drew on stderr, which is no terminal: %q", r.stderr)
	}
	if got := s.ok("gameservers", "list", "--fleet", "arena"); withoutAge(got) != withoutAge(listed) {
		t.Fatalf("views after the rebuild:\n%s\nbefore:\n%s", got, listed)
	}
	if r := s.run("projections", "check"); r.code != 0 {
		t.Fatalf("check after the rebuild: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A malformed event is dead-lettered and listed; retrying it while nothing
// fixes it is refused; a rebuild stops at it with a clear error and leaves
// the views as they were.
func TestProjectionDeadLetter(t *testing.T) {
	s := newStack(t)
	s.seedServers()
	msg := &nats.Msg{Subject: events.MustSubject("fleets/arena/gameServers/gs-a"), Data: []byte(`{"not":"protobuf"}`), Header: nats.Header{}}
	msg.Header.Set(natsjs.HeaderType, "GameServerReady")
	ack, err := s.js.PublishMsg(s.ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	bad := strconv.FormatUint(ack.Sequence, 10)
	wait.For(t, 10*time.Second, "the malformed event dead-lettered", func() bool {
		return strings.Contains(s.ok("projections", "deadletters"), bad)
	})
	listed := s.ok("gameservers", "list", "--fleet", "arena")
	if r := s.run("projections", "deadletters", "retry", bad); r.code == 0 || !strings.HasPrefix(r.stderr, "error: ") {
		t.Fatalf("retry with nothing fixed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := s.run("projections", "rebuild")
	if r.code == 0 || !strings.Contains(r.stderr, bad) {
		t.Fatalf("rebuild over a poison event: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := s.ok("gameservers", "list", "--fleet", "arena"); withoutAge(got) != withoutAge(listed) {
		t.Fatalf("views after the stopped rebuild:\n%s\nbefore:\n%s", got, listed)
	}
}

// withoutAge is a table with its AGE column taken out: the time since a
// server was made moves on between two listings. The column is found by
// its header (it is not the last since COUNTERS came after it); every
// cell of these tables is one word.
func withoutAge(table string) string {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	age := slices.Index(strings.Fields(lines[0]), "AGE")
	var out []string
	for _, line := range lines {
		f := strings.Fields(line)
		if age >= 0 && age < len(f) {
			f = slices.Delete(f, age, age+1)
		}
		out = append(out, strings.Join(f, " "))
	}
	return strings.Join(out, "\n")
}
