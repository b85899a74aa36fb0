-- The archive catalog, for reads of the archive (docs/architecture.md,
-- "The archive"): when the stream stored each archived stretch's first and
-- last events, so that an export of a time range finds the archived events
-- in it without reading every segment, and what the archiver's last pass
-- did, for `tetherctl archive status`.
--
-- Stretches recorded STORED before this migration have no times: readers
-- take them as possibly in any range, and read their segment to know.

-- +goose Up
ALTER TABLE archived_aggregates
    ADD COLUMN first_time timestamptz,  -- from STORED on: when the stream stored its first event
    ADD COLUMN last_time  timestamptz;  -- from STORED on: when the stream stored its last event
-- Exports read the stretches in the order of their first events.
CREATE INDEX archived_aggregates_first_idx ON archived_aggregates (first_sequence, subject COLLATE "C");

-- The archiver's last pass (one row, written at the end of every pass that
-- ran): when it ended by the archiver's clock, the retention it applied, and
-- its error ('' when it succeeded).
CREATE TABLE archive_last_pass (
    id                smallint PRIMARY KEY CHECK (id = 1),
    pass_time         timestamptz NOT NULL,
    retention_seconds bigint NOT NULL,
    error             text NOT NULL
);

-- +goose Down
DROP TABLE archive_last_pass;
DROP INDEX archived_aggregates_first_idx;
ALTER TABLE archived_aggregates DROP COLUMN last_time, DROP COLUMN first_time;
