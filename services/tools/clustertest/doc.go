// Package clustertest proves Tether's highly available topology on a
// network of Linux network namespaces (testkit/netns), with the real
// binaries: a three-node NATS JetStream cluster (bin/nats-server) with R3
// streams, PostgreSQL, two API replicas, two projectors, two controllers
// and agent hosts running the example game server. Its scenarios kill and
// cut components and measure what a user would see: takeover times, the
// longest allocation outage, projection lag; then audit that nothing was
// lost, applied twice or allocated twice.
//
// It needs root. `make cluster-test` runs it (TETHER_CLUSTER_TEST=require:
// a machine that cannot run it fails); elsewhere it is skipped with the
// reason. TETHER_CLUSTER_NATS_DEBUG=1 starts the NATS nodes with -D, so
// their logs (kept on a failure) show raft elections and votes;
// TETHER_CLUSTER_KEEP_LOGS=1 keeps the logs of a run that passed too.
package clustertest
