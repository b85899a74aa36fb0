package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Status is the views' position in the stream.
type Status struct {
	// Checkpoint is the last sequence the views applied.
	Checkpoint uint64
	// CheckpointTime is when it last advanced (zero if never).
	CheckpointTime time.Time
	// StreamLastSequence is the stream's last sequence.
	StreamLastSequence uint64
	// Lag is StreamLastSequence - Checkpoint: events not yet applied.
	Lag uint64
	// DeadLetters counts the events the projector could not apply.
	DeadLetters int64
}

// ReadStatus reads the views' status from the database and the stream, so
// it is right whichever process runs the projector. It uses Pool,
// JetStream, Stream and Partition of opts.
func ReadStatus(ctx context.Context, opts ReplayOptions) (Status, error) {
	opts.setDefaults("")
	var st Status
	var cp int64
	err := opts.Pool.QueryRow(ctx, `SELECT sequence, update_time FROM projector_checkpoints WHERE partition = $1`,
		opts.Partition).Scan(&cp, &st.CheckpointTime)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Status{}, fmt.Errorf("projections: status: checkpoint: %w", err)
	}
	st.Checkpoint = uint64(cp)
	if st.StreamLastSequence, err = streamLast(ctx, opts.JetStream, opts.Stream); err != nil {
		return Status{}, err
	}
	if st.StreamLastSequence > st.Checkpoint {
		st.Lag = st.StreamLastSequence - st.Checkpoint
	}
	if st.DeadLetters, err = (&Views{pool: opts.Pool}).DeadLetterCount(ctx); err != nil {
		return Status{}, err
	}
	return st, nil
}
