// Package jsclient is Tether's client side of NATS JetStream, below the
// event store and every other NATS adapter: calls that ride out a stream's
// election and a cut-off server instead of failing on them, and the setup
// of streams and buckets.
//
//   - Waiting out an election: PublishWaiting, StreamInfo and LeaderGet
//     retry, for up to a wait (DefaultUnavailableWait), a call nothing
//     could answer for now (no stream leader, no answer, no connection),
//     and give up with an error wrapping events.ErrUnavailable; Unavailable
//     tells such an error from a refusal. LeaderGet reads a message from a
//     stream's leader, never from a replica that may be behind.
//   - A cut-off server: Quorate judges from a stream's info whether its
//     leader hears from a majority of its peers, and a Reconnector moves a
//     connection through which JetStream stopped answering to another
//     server of the cluster. FailoverPull makes a long-running consumer
//     notice a lost node within two heartbeats.
//   - Setup: EnsureStream and EnsureKeyValue create a stream or bucket, or
//     update only what Tether manages of it (`tether migrate`); a service
//     that finds one missing fails with ErrNotSetUp (NotSetUp).
//
// Why it sits here, in the event store's folder, and not in services/nats
// beside the adapters that use it (commands, hostbeat, lease, replicas,
// natsauth, the agent): the event store (events/natsjs) is built on it (its
// appends are PublishWaiting, its reads of the leader LeaderGetWaiting,
// Setup is EnsureStream), and events/ must not import services/. Below the
// store, both may import it. It knows nothing of events but
// events.ErrUnavailable, which its errors wrap so that callers test one
// error whichever call gave up, and the name of the events stream, which
// Reconnector.Watch probes. What is about events stays in natsjs: the
// store, the signing of events, and ReadThrough, the rule that ends a
// bounded read of the events stream, which the store's Watch applies.
package jsclient
