// Package events is Tether's domain root: the event envelope, the naming of
// resources and stream subjects, and the pure aggregate logic (Decide and
// Apply) of the four aggregates: fleets, hosts, game servers, and game
// sessions with their player sessions (Aggregates lists them).
//
// Nothing here does I/O. The event store lives in events/natsjs, the views in
// projections/postgres; both speak in the types of this package.
package events
