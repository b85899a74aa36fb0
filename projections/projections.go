// Package projections folds the event stream into views that the API,
// dashboards and operators read (docs/architecture.md, "Views
// (PostgreSQL)"). It holds the domain side:
// the views' row and query types (views.go), which the controller and the
// API program against. The PostgreSQL views and the projector that
// maintains them live in projections/postgres.
package projections

import "errors"

// ErrNotFound is returned when a view has no row for a resource.
var ErrNotFound = errors.New("projections: not found")

// Partition names the checkpoint row of a projector instance. Until the
// stream is partitioned (designed, not built: each partition would have a
// checkpoint row of its own and one active consumer) there is one.
const Partition = "all"
