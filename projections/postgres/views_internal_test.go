package postgres

import (
	"slices"
	"testing"

	"github.com/tetherhq/tether/events"
)

// Every registered aggregate kind has a view, and every view is rebuilt
// and checked: a kind added to events.Aggregates without a view here fails.
func TestEveryAggregateHasAView(t *testing.T) {
	kinds := events.Aggregates()
	if len(views) != len(kinds) {
		t.Errorf("%d views for %d aggregate kinds", len(views), len(kinds))
	}
	var checked []string
	for _, c := range checkTables {
		checked = append(checked, c.table)
	}
	for _, a := range kinds {
		v, ok := views[a.Kind]
		if !ok {
			t.Errorf("aggregate kind %q has no view", a.Kind)
			continue
		}
		if !slices.Contains(viewTables, v.tableName()) || !slices.Contains(checked, v.tableName()) {
			t.Errorf("view %s of %q: rebuilt %v, checked %v", v.tableName(), a.Kind,
				slices.Contains(viewTables, v.tableName()), slices.Contains(checked, v.tableName()))
		}
	}
	if viewTables[0] != "projector_checkpoints" {
		t.Errorf("a rebuild must lock the checkpoint first: %v", viewTables)
	}
}
