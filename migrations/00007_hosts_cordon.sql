-- Hosts can be cordoned (no new game servers) and drained (their game
-- servers without a match moved elsewhere). Allocation reads both: a
-- draining host's READY servers are never allocated, a cordoned host's only
-- when no other host has one.

-- +goose Up
ALTER TABLE hosts ADD COLUMN cordoned boolean NOT NULL DEFAULT false;
ALTER TABLE hosts ADD COLUMN draining boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE hosts DROP COLUMN draining;
ALTER TABLE hosts DROP COLUMN cordoned;
