-- Game sessions with their player sessions (docs/player-sessions.md), folded from the
-- game session aggregate (subject tether.ev.gsess.<id>). Player sessions
-- live in the snapshot: they are read per game session, never across them.

-- +goose Up
CREATE TABLE game_sessions (
    name           text PRIMARY KEY,
    game_server    text NOT NULL,
    fleet          text NOT NULL,
    state          text NOT NULL,
    player_count   integer NOT NULL,
    -- earliest pending reservation or reconnect deadline; the controller
    -- fires what is due
    next_deadline  timestamptz,
    create_time    timestamptz NOT NULL,
    update_time    timestamptz NOT NULL,
    snapshot       bytea NOT NULL,
    last_sequence  bigint NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX game_sessions_server_idx ON game_sessions (game_server);
CREATE INDEX game_sessions_active_idx ON game_sessions (state, create_time DESC);
CREATE INDEX game_sessions_deadline_idx ON game_sessions (next_deadline) WHERE next_deadline IS NOT NULL;

-- +goose Down
DROP TABLE game_sessions;
