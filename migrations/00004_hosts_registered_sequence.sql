-- A host's agent may restart (kill -9, upgrade, reboot). The new agent
-- supervises none of the processes its predecessor started, so a live game
-- server whose last event is older than its host's last registration is
-- nobody's: the allocator skips it and the controller terminates it
-- (AGENT_RESTARTED). The column is the stream sequence of the host's last
-- HostRegistered.

-- +goose Up
ALTER TABLE hosts ADD COLUMN registered_sequence bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE hosts DROP COLUMN registered_sequence;
