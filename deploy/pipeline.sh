#!/usr/bin/env bash
# A whole local fleetprof pipeline on loopback: a real Kafka broker (KRaft), one collector and
# one aggregator, with their state under one directory.
#
#   deploy/pipeline.sh start    # prints the environment to use (collector socket, API server)
#   deploy/pipeline.sh status
#   deploy/pipeline.sh stop     # stops all three and removes the state directory
#
# Environment: FLEETPROF_BUILD (build dir, default ./build), FLEETPROF_STATE (default
# /tmp/fleetprof-local), KAFKA_PORT (default 19092), AGG_PORT (default 9402),
# COLLECTOR_METRICS (default 127.0.0.1:9465), AGG_FINE_WIDTH (fine time buckets, default 10s:
# the diff's replicates; a short demo wants shorter ones), AGG_EXTRA (more aggregator flags,
# e.g. "--report-interval 2s --api-token T").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FLEETPROF_BUILD:-$ROOT/build}"
STATE="${FLEETPROF_STATE:-/tmp/fleetprof-local}"
export KAFKA_PORT="${KAFKA_PORT:-19092}"
AGG_PORT="${AGG_PORT:-9402}"
COLLECTOR_METRICS="${COLLECTOR_METRICS:-127.0.0.1:9465}"

die() { echo "pipeline: error: $*" >&2; exit 1; }
say() { echo "pipeline: $*" >&2; }

alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

wait_http() { # wait_http URL SECONDS
  local deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

start() {
  for b in collector/fleetprof-collector aggregator/fleetprof-aggregator cli/fleetprof; do
    [ -x "$BUILD/$b" ] || die "$BUILD/$b is missing: build first (cmake -S . -B build -G Ninja && ninja -C build)"
  done
  mkdir -p "$STATE/spool" "$STATE/store"
  local bootstrap
  bootstrap=$("$ROOT/deploy/kafka/start.sh" | tail -1) || die "Kafka did not start"
  say "Kafka at $bootstrap"
  if ! alive collector; then
    "$BUILD/collector/fleetprof-collector" --socket "$STATE/collector.sock" --socket-mode 438 \
      --spool-dir "$STATE/spool" --brokers "$bootstrap" --http-listen "$COLLECTOR_METRICS" \
      >"$STATE/collector.log" 2>&1 &
    echo $! >"$STATE/collector.pid"
  fi
  if ! alive aggregator; then
    "$BUILD/aggregator/fleetprof-aggregator" --brokers "$bootstrap" --store-dir "$STATE/store" \
      --http-addr 127.0.0.1 --http-port "$AGG_PORT" --batch-interval 500ms \
      --fine-width "${AGG_FINE_WIDTH:-10s}" ${AGG_EXTRA:-} \
      >"$STATE/aggregator.log" 2>&1 &
    echo $! >"$STATE/aggregator.pid"
  fi
  wait_http "http://$COLLECTOR_METRICS/healthz" 30 || { tail -20 "$STATE/collector.log" >&2; die "collector not healthy (log: $STATE/collector.log)"; }
  wait_http "http://127.0.0.1:$AGG_PORT/healthz" 60 || { tail -20 "$STATE/aggregator.log" >&2; die "aggregator not healthy (log: $STATE/aggregator.log)"; }
  say "collector socket $STATE/collector.sock, metrics http://$COLLECTOR_METRICS/metrics"
  say "aggregator API and web UI http://127.0.0.1:$AGG_PORT/, logs in $STATE"
  echo "export FLEETPROF_COLLECTOR=$STATE/collector.sock FLEETPROF_SERVER=http://127.0.0.1:$AGG_PORT"
}

stop() {
  for p in collector aggregator; do
    if alive "$p"; then
      kill -TERM "$(cat "$STATE/$p.pid")" 2>/dev/null || true
      for _ in $(seq 1 150); do alive "$p" || break; sleep 0.1; done
      alive "$p" && kill -KILL "$(cat "$STATE/$p.pid")" 2>/dev/null || true
    fi
    rm -f "$STATE/$p.pid"
  done
  "$ROOT/deploy/kafka/stop.sh" >/dev/null || true
  rm -rf "$STATE"
  say "stopped"
}

status() {
  for p in collector aggregator; do
    if alive "$p"; then echo "$p: running (pid $(cat "$STATE/$p.pid"))"; else echo "$p: stopped"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: deploy/pipeline.sh start|stop|status" >&2; exit 2 ;;
esac
