-- Each game server's room for the players its game tracks (Agones' player
-- tracking): its player capacity less the players connected, for
-- allocation selectors by players. NULL for rows written before this
-- column, until their server next changes: a query takes NULL as a maybe,
-- and the allocator checks the server's state itself.

-- +goose Up
ALTER TABLE game_servers ADD COLUMN players_available bigint;

-- +goose Down
ALTER TABLE game_servers DROP COLUMN players_available;
