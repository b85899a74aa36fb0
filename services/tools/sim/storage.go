package sim

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/events"
)

// The storage report: what the run keeps, sampled every StorageEvery of
// the steady phase (and once more after the retention phase), to show
// whether the stream and the views grow with the matches played or stay
// bounded by the retention window (issue 18).

// StorageSample is one reading of what the run stores. Sizes are bytes.
type StorageSample struct {
	// Seconds is the time since the steady phase began.
	Seconds float64 `json:"seconds"`
	// Phase is "steady", or "rest" for the reading after the retention
	// phase (nothing played since the steady phase ended).
	Phase string `json:"phase"`
	// Matches counts the matches allocated since the steady phase began,
	// and MatchesPerSecond their rate since the previous sample.
	Matches          int64   `json:"matches"`
	MatchesPerSecond float64 `json:"matches_per_second"`

	// The events stream (TETHER_EVENTS): its messages, their bytes, its
	// subjects (one per aggregate with events left in it), its last
	// sequence (every event ever appended), and the size of its files on
	// disk.
	StreamMessages     uint64 `json:"stream_messages"`
	StreamBytes        uint64 `json:"stream_bytes"`
	StreamSubjects     uint64 `json:"stream_subjects"`
	StreamLastSequence uint64 `json:"stream_last_sequence"`
	StreamDiskBytes    int64  `json:"stream_disk_bytes"`

	// Rows of the views and the projector's events table.
	GameServers     int64 `json:"game_servers"`
	LiveGameServers int64 `json:"live_game_servers"` // not TERMINATED
	GameSessions    int64 `json:"game_sessions"`
	Fleets          int64 `json:"fleets"`
	Hosts           int64 `json:"hosts"`
	EventRows       int64 `json:"event_rows"`
	DeadLetters     int64 `json:"dead_letters"`

	// DatabaseBytes is pg_database_size; TableBytes each table's
	// pg_total_relation_size (indexes and TOAST included).
	DatabaseBytes int64            `json:"database_bytes"`
	TableBytes    map[string]int64 `json:"table_bytes"`

	// The archive, as its catalog records it: segments done, the
	// aggregates and events they hold, and their bytes.
	ArchiveSegments   int64 `json:"archive_segments"`
	ArchiveAggregates int64 `json:"archive_aggregates"`
	ArchiveEvents     int64 `json:"archive_events"`
	ArchiveBytes      int64 `json:"archive_bytes"`
}

// sampleStorage reads the storage every StorageEvery until ctx ends,
// printing each reading; the readings are appended to into. The first is
// taken at once.
func (w *world) sampleStorage(ctx context.Context, began time.Time, into *[]StorageSample) {
	t := time.NewTicker(w.opts.StorageEvery)
	defer t.Stop()
	for {
		w.addStorageSample(ctx, began, "steady", into)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// addStorageSample takes one reading and appends it, printing it; a
// failed reading is printed and skipped.
func (w *world) addStorageSample(ctx context.Context, began time.Time, phase string, into *[]StorageSample) {
	s, err := w.storage(ctx)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(w.opts.Progress, "  storage: could not read it: %v\n", err)
		}
		return
	}
	s.Seconds, s.Phase = time.Since(began).Seconds(), phase
	if n := len(*into); n > 0 {
		prev := (*into)[n-1]
		if dt := s.Seconds - prev.Seconds; dt > 0 {
			s.MatchesPerSecond = float64(s.Matches-prev.Matches) / dt
		}
	}
	*into = append(*into, s)
	fmt.Fprintf(w.opts.Progress, "  storage at %.0f s: %.1f matches/s; stream %d messages, %s, %d subjects; rows: %d game servers, %d game sessions, %d events; database %s; archive %d segments, %s\n",
		s.Seconds, s.MatchesPerSecond, s.StreamMessages, mib(int64(s.StreamBytes)), s.StreamSubjects,
		s.GameServers, s.GameSessions, s.EventRows, mib(s.DatabaseBytes), s.ArchiveSegments, mib(s.ArchiveBytes))
}

// storage reads what the run stores now. The readings are not one
// snapshot: the stream, each count and the sizes are read one after the
// other while the run goes on.
func (w *world) storage(ctx context.Context) (StorageSample, error) {
	var s StorageSample
	s.Matches = w.mm.allocated.Load()
	stream, err := w.stack.JetStream.Stream(ctx, events.StreamName)
	if err != nil {
		return s, fmt.Errorf("stream %s: %w", events.StreamName, err)
	}
	info, err := stream.Info(ctx) // no subjects filter: the subject count only
	if err != nil {
		return s, fmt.Errorf("stream %s: %w", events.StreamName, err)
	}
	s.StreamMessages, s.StreamBytes, s.StreamSubjects, s.StreamLastSequence = info.State.Msgs, info.State.Bytes, info.State.NumSubjects, info.State.LastSeq
	s.StreamDiskBytes = streamDiskBytes(filepath.Join(w.opts.DataDir, "nats"), events.StreamName)
	pool := w.stack.Pool
	err = pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM game_servers),
  (SELECT count(*) FROM game_servers WHERE state <> 'TERMINATED'),
  (SELECT count(*) FROM game_sessions),
  (SELECT count(*) FROM fleets),
  (SELECT count(*) FROM hosts),
  (SELECT count(*) FROM events),
  (SELECT count(*) FROM dead_letters),
  pg_database_size(current_database()),
  (SELECT count(*) FROM archive_segments WHERE state = 'DONE'),
  (SELECT coalesce(sum(aggregates), 0) FROM archive_segments WHERE state = 'DONE'),
  (SELECT coalesce(sum(events), 0) FROM archive_segments WHERE state = 'DONE'),
  (SELECT coalesce(sum(bytes), 0) FROM archive_segments WHERE state = 'DONE')`).Scan(
		&s.GameServers, &s.LiveGameServers, &s.GameSessions, &s.Fleets, &s.Hosts, &s.EventRows, &s.DeadLetters,
		&s.DatabaseBytes, &s.ArchiveSegments, &s.ArchiveAggregates, &s.ArchiveEvents, &s.ArchiveBytes)
	if err != nil {
		return s, fmt.Errorf("count rows: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'`)
	if err != nil {
		return s, fmt.Errorf("table sizes: %w", err)
	}
	defer rows.Close()
	s.TableBytes = map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return s, fmt.Errorf("table sizes: %w", err)
		}
		s.TableBytes[name] = n
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("table sizes: %w", err)
	}
	return s, nil
}

// streamDiskBytes sums the sizes of a JetStream stream's files under the
// store directory (…/jetstream/<account>/streams/<stream>/…); 0 when the
// store is not there (an external NATS server).
func streamDiskBytes(storeDir, stream string) int64 {
	var total int64
	marker := string(filepath.Separator) + filepath.Join("streams", stream) + string(filepath.Separator)
	// A file removed while the walk runs (a block the server compacted)
	// is skipped: the reading is approximate by a block at most.
	_ = filepath.WalkDir(storeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, marker) {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			total += fi.Size()
		}
		return nil
	})
	return total
}

// printStorage writes the storage samples as a table, one row a sample,
// and the largest tables at the last one.
func printStorage(out io.Writer, samples []StorageSample) {
	if len(samples) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "time\tmatches/s\tstream msgs\tstream MiB\tsubjects\tstream disk MiB\tgame_servers\tgame_sessions\tevents rows\tdatabase MiB\tarchive segs\tarchive aggs\tarchive MiB\t")
	for _, s := range samples {
		at := fmt.Sprintf("%.0f s", s.Seconds)
		if s.Phase != "steady" {
			at += " (" + s.Phase + ")"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%.1f\t%d\t%.1f\t%d\t%d\t%d\t%.1f\t%d\t%d\t%.2f\t\n",
			at, s.MatchesPerSecond, s.StreamMessages, mibf(int64(s.StreamBytes)), s.StreamSubjects, mibf(s.StreamDiskBytes),
			s.GameServers, s.GameSessions, s.EventRows, mibf(s.DatabaseBytes), s.ArchiveSegments, s.ArchiveAggregates, mibf(s.ArchiveBytes))
	}
	tw.Flush()
	last := samples[len(samples)-1]
	names := make([]string, 0, len(last.TableBytes))
	for n := range last.TableBytes {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := last.TableBytes[b] - last.TableBytes[a]; c != 0 {
			if c > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, n := range names[:min(len(names), 6)] {
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", n, mibf(last.TableBytes[n])))
	}
	fmt.Fprintf(out, "largest tables at %.0f s: %s\n", last.Seconds, strings.Join(parts, ", "))
}

// mibf is bytes in MiB.
func mibf(b int64) float64 { return float64(b) / (1 << 20) }
