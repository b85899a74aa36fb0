-- A host's agent reports how many game ports it hands out (the size of its
-- port range). A template asking for more ports than every known host has
-- can never start: the API refuses it when the fleet is created.

-- +goose Up
ALTER TABLE hosts ADD COLUMN game_ports integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE hosts DROP COLUMN game_ports;
