-- The projector runs as an active/standby pair with a lease. Each tenure
-- has an epoch (the lease key's revision when it was taken; epochs only
-- grow). The active projector writes its epoch with every checkpoint and
-- refuses to commit a batch once the row holds a newer epoch: a projector
-- that lost its lease without knowing it (a long pause) cannot write over
-- its successor's work. 0 is a projector without a lease (tether dev,
-- tests, a rebuild's scratch copy).

-- +goose Up
ALTER TABLE projector_checkpoints ADD COLUMN fence bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE projector_checkpoints DROP COLUMN fence;
