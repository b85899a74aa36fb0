#!/bin/sh
# A game server that speaks only Agones' REST SDK, with curl: what a server
# built for Agones does, and it runs under a Tether agent unchanged. The
# agent gives every process AGONES_SDK_HTTP_PORT (docs/agones.md).
#
#   1. watches its own GameServer (GET /watch/gameserver, one JSON line a
#      change) and prints each change to its log;
#   2. says it is ready (POST /ready) and sets a label (PUT /metadata/label);
#   3. takes a room on its counter "rooms", when its fleet declares one;
#   4. pings its health (POST /health) every 2 seconds until it is told to
#      stop (SIGTERM), then exits 0.
#
# Run it in a fleet: template.command /bin/sh, template.args [this file].
set -eu

sdk="http://localhost:${AGONES_SDK_HTTP_PORT:?no Agones SDK: run this under a Tether agent}"

call() { # METHOD PATH BODY: one SDK call; its answer goes to the log, a line
	answer=$(curl -sS --fail-with-body -X "$1" -H 'Content-Type: application/json' -d "$3" "$sdk$2") || {
		printf '%s %s failed: %s\n' "$1" "$2" "$answer"
		return 1
	}
	printf '%s %s: %s\n' "$1" "$2" "$answer"
}

curl -sS -N "$sdk/watch/gameserver" | while read -r line; do
	echo "watch: $line"
done &
watcher=$!
trap 'kill "$watcher" 2>/dev/null; exit 0' TERM INT

call POST /ready '{}'
call PUT /metadata/label '{"key": "mode", "value": "ctf"}'
call PATCH /v1beta1/counters/rooms '{"countDiff": "1"}' || echo "no counter rooms in this fleet"

while :; do
	call POST /health '{}' >/dev/null || echo "health ping failed"
	sleep 2 &
	wait $! || true
done
