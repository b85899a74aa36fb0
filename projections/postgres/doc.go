// Package postgres keeps Tether's views in PostgreSQL: the Projector folds the
// event stream into tables in batches, one transaction per batch with its
// checkpoint (an exactly-once effect), and Views reads them for the API.
package postgres
