package events_test

import (
	"slices"
	"testing"

	"github.com/tetherhq/tether/events"
)

func TestCompareHosts(t *testing.T) {
	hosts := []events.HostLoad{{"hosts/c", 1}, {"hosts/a", 3}, {"hosts/b", 1}, {"hosts/d", 0}}
	order := func(distributed bool) []string {
		hs := slices.Clone(hosts)
		slices.SortFunc(hs, func(a, b events.HostLoad) int { return events.CompareHosts(distributed, a, b) })
		var out []string
		for _, h := range hs {
			out = append(out, h.Name)
		}
		return out
	}
	if got, want := order(false), []string{"hosts/a", "hosts/b", "hosts/c", "hosts/d"}; !slices.Equal(got, want) {
		t.Errorf("packed: %v, want %v", got, want)
	}
	if got, want := order(true), []string{"hosts/d", "hosts/b", "hosts/c", "hosts/a"}; !slices.Equal(got, want) {
		t.Errorf("distributed: %v, want %v", got, want)
	}
}
