package jsclient

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// FailoverPull are the pull options of a long-running consumer that must
// notice soon when the NATS node serving its pulls is lost: the server
// sends an idle heartbeat every heartbeat, and two missed ones make the
// client pull again (from the new consumer leader) instead of waiting out
// jetstream's default of 30 s pulls and 15 s heartbeats. Each consumer
// costs the server one heartbeat message per heartbeat while idle.
func FailoverPull(heartbeat time.Duration) []jetstream.PullConsumeOpt {
	return []jetstream.PullConsumeOpt{jetstream.PullHeartbeat(heartbeat), jetstream.PullExpiry(4 * heartbeat)}
}
