package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/testkit/pgtest"
)

// catalogRow writes one archived stretch into the catalog, as the
// archiver records it.
func catalogRow(t *testing.T, ctx context.Context, pool *pgxpool.Pool, segment, state, name string, first, last int64, firstTime, lastTime *time.Time) {
	t.Helper()
	if _, err := pool.Exec(ctx, `INSERT INTO archive_segments (name, state, aggregates, events, bytes, sha256, create_time, update_time)
VALUES ($1, $2, 0, 0, 0, '\x00', now(), now()) ON CONFLICT (name) DO NOTHING`, segment, state); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE archive_segments SET aggregates = aggregates + 1, events = events + $2 WHERE name = $1`, segment, last-first+1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO archived_aggregates (aggregate, last_sequence, subject, kind, first_sequence, events, end_time, segment, first_time, last_time)
VALUES ($1::text, $2::bigint, 'tether.ev.fleet.' || split_part($1::text, '/', 2), 'fleet', $3::bigint, $2::bigint - $3::bigint + 1,
  coalesce($5::timestamptz, now()), $4, $6::timestamptz, $5::timestamptz)`,
		name, last, first, segment, lastTime, firstTime); err != nil {
		t.Fatal(err)
	}
}

// TestArchivedStretchesInARange: the stretches of a range come in the
// order of their first sequences, a page at a time without a gap or a
// repeat; only those of stored segments, whose sequences and stored times
// meet the range (a stretch without times may meet any); and a subject's
// history lists its stretches oldest first.
func TestArchivedStretchesInARange(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	v := postgres.NewViews(pool)
	t0 := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	at := func(sec int) *time.Time { x := t0.Add(time.Duration(sec) * time.Second); return &x }

	// Fleet i's events are at sequences 10i+1 to 10i+5, stored at those
	// seconds after t0.
	for i := range 12 {
		first, last := int64(10*i+1), int64(10*i+5)
		catalogRow(t, ctx, pool, fmt.Sprintf("seg-%d", i%3), "DONE", fmt.Sprintf("fleets/f%02d", i), first, last, at(int(first)), at(int(last)))
	}
	catalogRow(t, ctx, pool, "seg-intent", "INTENT", "fleets/x-intent", 200, 210, nil, nil) // not stored: left out
	catalogRow(t, ctx, pool, "seg-old", "DONE", "fleets/x-untimed", 300, 310, nil, nil)     // recorded before 00010: no times
	catalogRow(t, ctx, pool, "seg-0", "DONE", "fleets/f00", 400, 405, at(400), at(405))     // f00 came back and was archived again

	collect := func(r postgres.ArchiveRange) []string {
		t.Helper()
		var out []string
		for {
			page, err := v.ArchivedStretches(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range page {
				if i > 0 && st.FirstSequence < page[i-1].FirstSequence {
					t.Fatalf("page out of order: %+v", page)
				}
				out = append(out, fmt.Sprintf("%s@%d", st.Aggregate, st.FirstSequence))
			}
			if len(page) < r.Limit {
				return out
			}
			r.AfterFirst, r.AfterSubject = page[len(page)-1].FirstSequence, page[len(page)-1].Subject
		}
	}
	all := collect(postgres.ArchiveRange{Limit: 5})
	if len(all) != 14 || all[0] != "fleets/f00@1" || all[12] != "fleets/x-untimed@300" || all[13] != "fleets/f00@400" {
		t.Fatalf("every stored stretch: %v", all)
	}
	for name, tc := range map[string]struct {
		r    postgres.ArchiveRange
		want []string
	}{
		"sequences": {postgres.ArchiveRange{After: 33, Until: 52, Limit: 2}, []string{"fleets/f03@31", "fleets/f04@41", "fleets/f05@51"}},
		"times": {postgres.ArchiveRange{Start: *at(45), End: *at(61), Limit: 2},
			[]string{"fleets/f04@41", "fleets/f05@51", "fleets/x-untimed@300"}},
		"an end excludes a stretch stored from it on": {postgres.ArchiveRange{Start: *at(100), End: *at(111), Limit: 10},
			[]string{"fleets/f10@101", "fleets/x-untimed@300"}},
	} {
		if got := collect(tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}

	h, err := v.ArchivedHistory(ctx, "fleets/f00", 0)
	if err != nil || len(h) != 2 || h[0].LastSequence != 5 || h[1].LastSequence != 405 || h[1].Segment != "seg-0" ||
		!h[0].FirstTime.Equal(*at(1)) || !h[0].LastTime.Equal(*at(5)) {
		t.Fatalf("history of f00: %+v, %v", h, err)
	}
	if h, err := v.ArchivedHistory(ctx, "fleets/f00", 6); err != nil || len(h) != 1 || h[0].FirstSequence != 400 {
		t.Fatalf("history of f00 from 6: %+v, %v", h, err)
	}
	if h, err := v.ArchivedHistory(ctx, "fleets/x-intent", 0); err != nil || len(h) != 0 {
		t.Fatalf("history of an aggregate whose segment is INTENT: %+v, %v", h, err)
	}
	if h, err := v.ArchivedHistory(ctx, "fleets/x-untimed", 0); err != nil || len(h) != 1 || !h[0].FirstTime.IsZero() {
		t.Fatalf("history of an untimed stretch: %+v, %v", h, err)
	}

	st, err := v.ArchiveStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Segments["DONE"] != 4 || st.Segments["INTENT"] != 1 || st.Aggregates != 14 || len(st.Unfinished) != 1 ||
		st.Unfinished[0].Name != "seg-intent" || !st.LastPass.IsZero() {
		t.Fatalf("status: %+v", st)
	}
}
