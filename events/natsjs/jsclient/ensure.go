package jsclient

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotSetUp is the error of a service that finds a stream or bucket
// missing: `tether migrate` creates them, services never do.
var ErrNotSetUp = errors.New("not set up: run `tether migrate` (with the same --nats-url) first")

// NotSetUp returns an error wrapping ErrNotSetUp that names what is missing.
func NotSetUp(what string) error {
	return fmt.Errorf("%s does not exist: %w", what, ErrNotSetUp)
}

// EnsureKeyValue creates the key-value bucket want describes or, if it
// exists, updates it only where its description, TTL, history or replicas
// differ; a bucket already as wanted is not written to (see EnsureStream).
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) error {
	want.Replicas = max(want.Replicas, 1)
	if kv, err := js.KeyValue(ctx, want.Bucket); err == nil {
		st, err := kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", want.Bucket, err)
		}
		bs, ok := st.(*jetstream.KeyValueBucketStatus)
		if ok && st.TTL() == want.TTL && st.History() == int64(max(want.History, 1)) &&
			bs.StreamInfo().Config.Replicas == want.Replicas && bs.StreamInfo().Config.Description == want.Description {
			return nil
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("bucket %s: %w", want.Bucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, want); err != nil {
		return fmt.Errorf("bucket %s: %w", want.Bucket, err)
	}
	return nil
}

// EnsureStream creates the stream want describes or, if it exists,
// updates it only where a field Tether manages differs: its description,
// subjects, retention, storage, replicas, duplicate window, age and
// consumer limits, and whether deletes, purges and direct gets are allowed.
// The other fields are the operator's (compression, byte limits, placement
// and the like) and are kept.
//
// DenyDelete and DenyPurge only go one way: nats-server refuses an update
// that allows what a stream denied ("can not cancel deny purge"). A
// stream that denies what want allows keeps denying it (it reads as
// wanted there, and an update keeps it), and EnsureStream does not fail:
// only recreating the stream lifts it (see natsjs.Setup for the events stream).
//
// A stream that is already as wanted is not written to. Rewriting a
// stream's configuration on every process start cost the NATS server a
// configuration write per starting process, and nats-server (2.15) reads
// a stream's configuration without its lock while it creates a consumer, so
// an update racing another process's consumer creation is a data race in
// the server.
func EnsureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	stream, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		created, cerr := js.CreateStream(ctx, want)
		if !errors.Is(cerr, jetstream.ErrStreamNameAlreadyInUse) {
			return created, cerr
		}
		// Another process created it meanwhile, otherwise than wanted.
		stream, err = js.Stream(ctx, want.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	have := stream.CachedInfo().Config
	if managedEqual(have, want) {
		return stream, nil
	}
	return js.UpdateStream(ctx, withManaged(have, want))
}

// managedEqual reports whether the fields Tether manages agree.
func managedEqual(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description &&
		slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention &&
		have.Storage == want.Storage &&
		max(have.Replicas, 1) == max(want.Replicas, 1) &&
		(want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		have.MaxAge == want.MaxAge &&
		(want.MaxConsumers == 0 && have.MaxConsumers == -1 || have.MaxConsumers == want.MaxConsumers) &&
		oneWay(have.DenyDelete, want.DenyDelete) &&
		oneWay(have.DenyPurge, want.DenyPurge) &&
		have.AllowDirect == want.AllowDirect
}

// withManaged returns have with the fields Tether manages taken from want.
func withManaged(have, want jetstream.StreamConfig) jetstream.StreamConfig {
	have.Description = want.Description
	have.Subjects = want.Subjects
	have.Retention = want.Retention
	have.Storage = want.Storage
	have.Replicas = want.Replicas
	if want.Duplicates != 0 {
		have.Duplicates = want.Duplicates
	}
	have.MaxAge = want.MaxAge
	have.MaxConsumers = want.MaxConsumers
	have.DenyDelete = have.DenyDelete || want.DenyDelete
	have.DenyPurge = have.DenyPurge || want.DenyPurge
	have.AllowDirect = want.AllowDirect
	return have
}

// oneWay reports whether a deny flag is as wanted, or cannot be: a stream
// that denies keeps denying (nats-server refuses to lift it).
func oneWay(have, want bool) bool { return have == want || have }
