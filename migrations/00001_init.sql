-- Views folded from the TETHER_EVENTS stream by the projector
-- (docs/architecture.md, "Views (PostgreSQL)").
-- Every view row stores the aggregate's folded state as a protobuf snapshot
-- (tether.events.v1.*State) next to the columns that SQL queries use, and the
-- stream sequence of the last event applied to it: an upsert only lands when
-- it carries a newer sequence, so a redelivered batch changes nothing.

-- +goose Up
CREATE TABLE projector_checkpoints (
    partition   text PRIMARY KEY,
    sequence    bigint NOT NULL,
    update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE events (
    sequence       bigint PRIMARY KEY,
    id             text NOT NULL,
    type           text NOT NULL,
    aggregate      text NOT NULL,
    occur_time     timestamptz NOT NULL,
    producer       text NOT NULL,
    request_id     text NOT NULL,
    correlation_id text NOT NULL,
    causation_id   text NOT NULL,
    envelope       bytea NOT NULL
);
CREATE INDEX events_aggregate_idx ON events (aggregate, sequence);
CREATE INDEX events_request_idx ON events (request_id) WHERE request_id <> '';

CREATE TABLE fleets (
    name          text PRIMARY KEY,
    replicas      integer NOT NULL,
    scheduling    text NOT NULL,
    labels        jsonb NOT NULL,
    deleted       boolean NOT NULL,
    create_time   timestamptz NOT NULL,
    update_time   timestamptz NOT NULL,
    snapshot      bytea NOT NULL,
    last_sequence bigint NOT NULL
);

CREATE TABLE hosts (
    name                text PRIMARY KEY,
    status              text NOT NULL,
    capacity            integer NOT NULL,
    address             text NOT NULL,
    labels              jsonb NOT NULL,
    last_heartbeat_time timestamptz,
    update_time         timestamptz NOT NULL,
    snapshot            bytea NOT NULL,
    last_sequence       bigint NOT NULL
);

CREATE TABLE game_servers (
    name           text PRIMARY KEY,
    fleet          text NOT NULL,
    host           text NOT NULL,
    state          text NOT NULL,
    connection     text NOT NULL,
    health         text NOT NULL,
    missed_periods integer NOT NULL,
    reason         text NOT NULL,
    pid            integer NOT NULL,
    address        text NOT NULL,
    game_session   text NOT NULL,
    labels         jsonb NOT NULL,
    create_time    timestamptz NOT NULL,
    update_time    timestamptz NOT NULL,
    snapshot       bytea NOT NULL,
    last_sequence  bigint NOT NULL
) WITH (fillfactor = 70); -- room for HOT updates: most events change no indexed column
CREATE INDEX game_servers_fleet_state_idx ON game_servers (fleet, state);
CREATE INDEX game_servers_host_idx ON game_servers (host, state);

-- Events the projector could not apply (undecodable, unknown type, or an
-- invariant violation), kept with the error; the projector carries on.
CREATE TABLE dead_letters (
    sequence    bigint PRIMARY KEY,
    subject     text NOT NULL,
    type        text NOT NULL,
    error       text NOT NULL,
    data        bytea NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE dead_letters;
DROP TABLE game_servers;
DROP TABLE hosts;
DROP TABLE fleets;
DROP TABLE events;
DROP TABLE projector_checkpoints;
