package events

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// UnverifiedWriter is Envelope.Writer for an event read by a store that
// verifies signatures, when the event has no valid signature of a key the
// store knows.
const UnverifiedWriter = "unverified"

// ErrUnauthorizedWriter marks an event its writer may not write: a host
// agent's event on another host's game server, host or game session, or
// on a fleet; or an event without a valid signature where signatures are
// verified. The folds refuse it, so it changes no state and no view (the
// projector dead-letters it).
var ErrUnauthorizedWriter = errors.New("events: unauthorized writer")

// HostWriter returns the host resource name ("hosts/h1") of a host agent's
// writer principal, and ok=false for any other writer.
func HostWriter(writer string) (host string, ok bool) {
	if strings.HasPrefix(writer, hostsCollection+"/") {
		return writer, true
	}
	return "", false
}

// agentHostEvents are the host events a host agent writes on its own
// host: its registration, and a drain when it stops with --drain-on-stop.
// The others are the control plane's verdicts and an operator's.
var agentHostEvents = []string{"HostRegistered", "HostDrainRequested"}

// checkStored refuses, before anything else is asked of it, what stands
// for an undecodable message (Envelope.Undecodable) and an event whose
// writer may not write it (checkWriter): both are Skipped, whatever the
// state, so a fold goes on past them rather than fail on a transition.
func checkStored(e Envelope, host string) error {
	if e.Undecodable != nil {
		return e.Undecodable
	}
	return checkWriter(e, host)
}

// checkWriter says whether e's writer may write to an aggregate whose host
// agent is host ("" when the aggregate has none, such as a fleet, or does
// not know it yet). Unverified events (Writer "") pass: the store that read
// them checks no signatures. Control-plane writers pass; a host agent
// passes only on its own host's aggregates.
func checkWriter(e Envelope, host string) error {
	switch e.Writer {
	case "":
		return nil
	case UnverifiedWriter:
		return fmt.Errorf("%w: %s %s on %s has no valid signature of a known key", ErrUnauthorizedWriter, e.Type, e.ID, e.Aggregate)
	}
	h, isHost := HostWriter(e.Writer)
	if isHost && h == host && e.Aggregate == host && !slices.Contains(agentHostEvents, e.Type) {
		return fmt.Errorf("%w: host agent %s may not write %s on its host: only %s", ErrUnauthorizedWriter, h, e.Type, strings.Join(agentHostEvents, ", "))
	}
	if !isHost || h == host {
		return nil
	}
	if host == "" {
		return fmt.Errorf("%w: host agent %s may not write %s on %s", ErrUnauthorizedWriter, h, e.Type, e.Aggregate)
	}
	return fmt.Errorf("%w: host agent %s may not write %s on %s, which belongs to %s", ErrUnauthorizedWriter, h, e.Type, e.Aggregate, host)
}
