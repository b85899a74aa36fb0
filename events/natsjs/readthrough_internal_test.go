package natsjs

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A bounded read whose consumer counts nothing pending has read through
// its bound only if the stream's leader agrees: the consumer's replica may
// be behind and not yet hold the last events (a watch of history that
// ended there, followed by a live watch from the bound, skipped them).
// Each case gives the count a replica reports after the read has seen up
// to a sequence; the leader's store is the real one.
func TestABoundedReadAsksTheLeaderBeforeItEndsOnAReplicasCount(t *testing.T) {
	ctx, s := newTestStore(t)
	a := events.MustSubject(events.GameServerName("arena", "gs-a"))
	b := events.MustSubject(events.GameServerName("arena", "gs-b"))
	seqs := map[string][]uint64{}
	for i := range 3 {
		for _, subj := range []string{a, b} {
			name, _ := events.NameFromSubject(subj)
			seq, err := s.Append(ctx, subj, events.AnySequence, events.New(name, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: int32(i)}))
			if err != nil {
				t.Fatal(err)
			}
			seqs[subj] = append(seqs[subj], seq)
		}
	}
	// a holds 1, 3, 5 and b 2, 4, 6.
	for _, tc := range []struct {
		name    string
		seen    uint64
		pending uint64
		until   uint64
		on      []string
		asks    int // leader reads wanted
		want    bool
	}{
		{"the read reached its bound", seqs[a][1], 0, seqs[a][1], []string{a}, 0, true},
		{"the replica counts events still pending", seqs[a][0], 1, seqs[a][2], []string{a}, 0, false},
		{"a replica behind counts none, the leader holds more up to the bound", seqs[a][0], 0, seqs[a][2], []string{a}, 1, false},
		{"none pending, and the leader's next one is past the bound", seqs[a][0], 0, seqs[a][1] - 1, []string{a}, 1, true},
		{"none pending on the subject; other subjects' events do not count", seqs[a][2], 0, seqs[b][2], []string{a}, 1, true},
		{"several subjects: the second has more up to the bound", seqs[a][2], 0, seqs[b][2], []string{a, b}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asks := 0
			counting := func(ctx context.Context, r jsclient.MsgRequest) (jsclient.LeaderMessage, bool, error) {
				asks++
				return s.leaderGet(ctx, r)
			}
			got, err := readThrough(ctx, tc.seen, tc.pending, tc.until, tc.on, counting)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || asks != tc.asks {
				t.Errorf("read through: %v after %d leader reads; want %v after %d", got, asks, tc.want, tc.asks)
			}
			// The exported form, for a reader with a consumer of its own,
			// answers the same from the leader.
			exported, err := ReadThrough(ctx, s.js.Conn(), events.StreamName, tc.seen, tc.pending, tc.until, tc.on)
			if err != nil || exported != tc.want {
				t.Errorf("ReadThrough: %v, %v; want %v", exported, err, tc.want)
			}
		})
	}
}
