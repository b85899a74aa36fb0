package events

import (
	"cmp"
	"strings"
)

// HostLoad is a host as placement ranks it: its name, and how many game
// servers load it (for scheduling, the slots in use; for allocation, the
// servers ALLOCATED there).
type HostLoad struct {
	Name string
	Load int
}

// CompareHosts orders two hosts by preference, the preferred first
// (negative when a comes before b). PACKED (distributed false) prefers the
// more loaded host, which keeps the others empty, so they can be drained or
// scaled in; DISTRIBUTED prefers the less loaded, which spreads matches
// over hosts. Ties go by name, so the order is total and stable.
//
// The controller's scheduling and the allocator's candidate ranking both
// use it, so a fleet's placement and its allocations agree.
func CompareHosts(distributed bool, a, b HostLoad) int {
	if c := cmp.Compare(a.Load, b.Load); c != 0 {
		if distributed {
			return c
		}
		return -c
	}
	return strings.Compare(a.Name, b.Name)
}
