// Package heapstat measures a test process's heap for memory bounds.
package heapstat

import "runtime"

// Live returns the bytes of the heap's live objects: after two
// collections, the second freeing what sync.Pools kept through the first.
func Live() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
