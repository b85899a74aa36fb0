package agent

import (
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// watchBacklog bounds the changes a WatchGameServer stream may be behind
// and still be sent each: past it, the oldest are skipped (the latest is
// always sent).
const watchBacklog = 32

// watchLog keeps a game server's views at its last changes while any SDK
// stream watches it, so that each watcher sends every change in order
// rather than the latest only: a watcher that took a while to send one
// view (a REST client reading slowly, a busy machine) found the server two
// changes on, and its game never saw the state between them. Its methods
// are called with the server's mutex held; it records nothing while nobody
// watches.
type watchLog struct {
	watchers int
	next     uint64              // the number of the next change
	views    []*sdkv1.GameServer // the last changes' views; views[i] is change next-len(views)+i
}

// open counts a watcher in and returns the number of the next change, the
// first it has not seen.
func (w *watchLog) open() uint64 {
	w.watchers++
	return w.next
}

// close counts a watcher out; the last one out drops the views.
func (w *watchLog) close() {
	if w.watchers--; w.watchers == 0 {
		w.views = nil
	}
}

// record numbers a change and, while anyone watches, keeps its view.
func (w *watchLog) record(view func() *sdkv1.GameServer) {
	w.next++
	if w.watchers == 0 {
		return
	}
	w.views = append(w.views, view())
	if n := len(w.views); n > watchBacklog {
		w.views = append(w.views[:0:0], w.views[n-watchBacklog:]...)
	}
}

// since returns the views of the changes from from on, oldest first (those
// still kept), and the number of the next change.
func (w *watchLog) since(from uint64) ([]*sdkv1.GameServer, uint64) {
	first := w.next - uint64(len(w.views))
	if from < first {
		from = first
	}
	if from >= w.next {
		return nil, w.next
	}
	return w.views[from-first:], w.next
}
