-- Each game server's counters and lists (docs/counters-and-lists.md), as
-- its state holds them: counters {"rooms": {"count": 1, "capacity": 10}},
-- lists {"players": {"capacity": 100, "values": ["p1"]}}, counts and
-- capacities as JSON numbers, for queries to select servers by them. Empty
-- for rows written before these columns: their servers have none.

-- +goose Up
ALTER TABLE game_servers ADD COLUMN counters jsonb NOT NULL DEFAULT '{}';
ALTER TABLE game_servers ADD COLUMN lists jsonb NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE game_servers DROP COLUMN lists;
ALTER TABLE game_servers DROP COLUMN counters;
