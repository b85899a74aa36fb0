-- The archive catalog (docs/architecture.md, "The archive"): the segments
-- the archiver (services/archiver) wrote, and the ended aggregates each
-- holds, so that a read can find which segment holds an aggregate's
-- history once its events have left the stream.
--
-- Unlike the views, these rows are not derived from the stream: they say
-- what left it. They can be derived from the segments themselves (each
-- indexes its aggregates), so a lost catalog can be rebuilt from the
-- segment store. A rebuild of the views leaves them alone.
--
-- A segment moves INTENT → STORED → PURGED → DONE, one transaction each,
-- and the archiver resumes a segment from its state after a crash:
--   INTENT  its aggregates are chosen (subject and last sequence); nothing
--           is written yet. The segment is written (again) from the stream.
--   STORED  the segment is durably in the store and verified: sha256,
--           bytes, events; each aggregate's first sequence and event count.
--   PURGED  every aggregate's events, up to its last sequence, are purged
--           from the stream.
--   DONE    the aggregates' rows are gone from the live views and the
--           events table (in the transaction that sets DONE).

-- +goose Up
CREATE TABLE archive_segments (
    name        text PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('INTENT', 'STORED', 'PURGED', 'DONE')),
    aggregates  integer NOT NULL,
    events      bigint,      -- from STORED on
    bytes       bigint,      -- from STORED on
    sha256      bytea,       -- from STORED on: the segment's sum, its last 32 bytes
    create_time timestamptz NOT NULL,
    update_time timestamptz NOT NULL
);
CREATE INDEX archive_segments_unfinished_idx ON archive_segments (create_time) WHERE state <> 'DONE';

-- One aggregate's history, up to last_sequence, in one segment. A name
-- may come back (a fleet created again after its deleted namesake was
-- archived), so an aggregate may have several rows, one per archived
-- stretch of its subject; no history is recorded twice.
CREATE TABLE archived_aggregates (
    aggregate      text NOT NULL,   -- resource name, fleets/arena
    last_sequence  bigint NOT NULL, -- stream sequence of its last archived event
    subject        text NOT NULL,   -- stream subject, tether.ev.fleet.arena
    kind           text NOT NULL,   -- aggregate kind, the subject's token: fleet, gs, gsess
    first_sequence bigint,          -- from STORED on
    events         bigint,          -- from STORED on
    end_time       timestamptz NOT NULL, -- its view row's update_time: when it ended
    segment        text NOT NULL REFERENCES archive_segments (name),
    PRIMARY KEY (aggregate, last_sequence)
);
CREATE INDEX archived_aggregates_segment_idx ON archived_aggregates (segment);
CREATE INDEX archived_aggregates_subject_idx ON archived_aggregates (subject);

-- The archiver's choice of ended aggregates. Terminated game servers by
-- the time they ended (game_servers' updates are not HOT anyway: every
-- one changes the indexed last_sequence); a deleted fleet waits until no
-- game session names it.
CREATE INDEX game_servers_terminated_idx ON game_servers (update_time) WHERE state = 'TERMINATED';
CREATE INDEX game_sessions_fleet_idx ON game_sessions (fleet);

-- +goose Down
DROP INDEX game_sessions_fleet_idx;
DROP INDEX game_servers_terminated_idx;
DROP TABLE archived_aggregates;
DROP TABLE archive_segments;
