-- A fleet's template or health change makes a new revision, and each game
-- server records the revision it runs: the fleet's status counts its live
-- servers per revision during a rollout.

-- +goose Up
ALTER TABLE game_servers ADD COLUMN revision bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE game_servers DROP COLUMN revision;
