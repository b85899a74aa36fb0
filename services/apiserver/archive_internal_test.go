package apiserver

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"testing"

	"github.com/tetherhq/tether/events"
)

// An archive range keeps the subjects its NATS subject filters match.
func TestArchiveRangeKeepsTheSubjectsItsFiltersMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"tether.ev.fleet.arena", "tether.ev.fleet.arena", true},
		{"tether.ev.fleet.arena", "tether.ev.fleet.arenas", false},
		{"tether.ev.gs.arena.*", "tether.ev.gs.arena.gs-1", true},
		{"tether.ev.gs.arena.*", "tether.ev.gs.other.gs-1", false},
		{"tether.ev.gs.arena.*", "tether.ev.gs.arena", false},
		{"tether.ev.gsess.*", "tether.ev.gsess.gsess-1", true},
		{"tether.ev.>", "tether.ev.gs.arena.gs-1", true},
		{"tether.ev.>", "tether.ev", false},
		{"tether.ev.ps.*.*", "tether.ev.gsess.gsess-1", false},
	} {
		if got := (archiveRange{subjects: []string{tc.pattern}}).keeps(tc.subject); got != tc.want {
			t.Errorf("filter %q keeps %q: %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

// items yields events at seqs from segment; a negative sequence is an
// undecodable event there, and 0 a fatal error.
func items(segment string, seqs ...int) iter.Seq2[sourced, error] {
	return func(yield func(sourced, error) bool) {
		for _, n := range seqs {
			var e sourced
			var err error
			switch {
			case n == 0:
				err = errors.New("broken")
			case n < 0:
				e.Sequence, err = uint64(-n), fmt.Errorf("%w: bad bytes", events.ErrUndecodable)
			default:
				e.Sequence = uint64(n)
			}
			e.segment = segment
			if !yield(e, err) {
				return
			}
		}
	}
}

// drain lists what an iterator yields: "seq/segment", "!seq" for an
// undecodable event, "error" for another error.
func drain(evs iter.Seq2[sourced, error]) []string {
	var out []string
	for e, err := range evs {
		switch {
		case errors.Is(err, events.ErrUndecodable):
			out = append(out, fmt.Sprintf("!%d", e.Sequence))
		case err != nil:
			out = append(out, "error")
			return out
		default:
			out = append(out, fmt.Sprintf("%d/%s", e.Sequence, e.segment))
		}
	}
	return out
}

// The stream's and the archive's events merge by sequence; an event in
// both comes once, the stream's; an undecodable event keeps its place;
// another error ends the merge.
func TestMerge(t *testing.T) {
	for name, tc := range map[string]struct {
		stream, archived iter.Seq2[sourced, error]
		want             []string
	}{
		"interleaved":    {items("", 2, 5, 9), items("seg", 1, 3, 4, 10), []string{"1/seg", "2/", "3/seg", "4/seg", "5/", "9/", "10/seg"}},
		"stream only":    {items("", 1, 2), items("seg"), []string{"1/", "2/"}},
		"archive only":   {items(""), items("seg", 7, 8), []string{"7/seg", "8/seg"}},
		"in both":        {items("", 3, 4, 6), items("seg", 1, 3, 4, 5), []string{"1/seg", "3/", "4/", "5/seg", "6/"}},
		"undecodable":    {items("", 2, -4), items("seg", -3, 5), []string{"2/", "!3", "!4", "5/seg"}},
		"stream error":   {items("", 2, 0, 9), items("seg", 1, 3), []string{"1/seg", "2/", "error"}},
		"archive error":  {items("", 5), items("seg", 1, 0), []string{"1/seg", "error"}},
		"concat goes on": {concat(items("", 1, 2), items("", 3)), items("seg"), []string{"1/", "2/", "3/"}},
	} {
		if got := drain(merge(tc.stream, tc.archived)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if got := drain(concat(items("", 1, 0), items("", 3))); !slices.Equal(got, []string{"1/", "error"}) {
		t.Errorf("concat after an error: %v", got)
	}
}

// mergeHistories: the archive's stretches then the stream's events, in
// sequence order, an event in both once (the stream's).
func TestMergeHistories(t *testing.T) {
	stream := []events.Envelope{{Sequence: 7}, {Sequence: 9}, {Sequence: 12}}
	archived := []sourced{{events.Envelope{Sequence: 1}, "a"}, {events.Envelope{Sequence: 4}, "a"}, {events.Envelope{Sequence: 9}, "b"}}
	var got []string
	for _, e := range mergeHistories(stream, archived) {
		got = append(got, fmt.Sprintf("%d/%s", e.Sequence, e.segment))
	}
	if want := []string{"1/a", "4/a", "7/", "9/", "12/"}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// life: a history with archived stretches ending at 5 and 20 has three
// lives; each event's is from the first event after the previous end.
func TestLives(t *testing.T) {
	h := history{ends: []uint64{5, 20}}
	evs := []events.Envelope{{Sequence: 1}, {Sequence: 5}, {Sequence: 8}, {Sequence: 20}, {Sequence: 30}, {Sequence: 31}}
	for i, want := range [][]uint64{{1}, {1, 5}, {8}, {8, 20}, {30}, {30, 31}} {
		var got []uint64
		for _, e := range h.life(evs, i) {
			got = append(got, e.Sequence)
		}
		if !slices.Equal(got, want) {
			t.Errorf("life of event %d: %v, want %v", evs[i].Sequence, got, want)
		}
	}
}
