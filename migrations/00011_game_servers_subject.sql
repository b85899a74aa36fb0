-- Each game server's event subject: a server placed on a host whose agent
-- writes host subjects has its events on tether.ev.gs.<fleet>.<id>.<host>,
-- which only that host's credentials may publish on. Empty for rows
-- written before this column: their servers' subject is
-- tether.ev.gs.<fleet>.<id>.

-- +goose Up
ALTER TABLE game_servers ADD COLUMN subject text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE game_servers DROP COLUMN subject;
