-- The controller keeps the live game servers in memory and reads only the
-- rows changed since its last pass (docs/scaling.md): at
-- 100,000 servers, reading and decoding every live row each second took
-- the controller 2.5 s a pass.

-- +goose Up
CREATE INDEX game_servers_sequence_idx ON game_servers (last_sequence);

-- +goose Down
DROP INDEX game_servers_sequence_idx;
