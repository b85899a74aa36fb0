// Package events is Tether's domain root: the event envelope, the naming of
// resources and stream subjects, and the pure aggregate logic (Decide and
// Apply) of fleets, hosts and game servers.
//
// Nothing here does I/O. The event store lives in events/natsjs, the views in
// projections/postgres; both speak in the types of this package.
package events
