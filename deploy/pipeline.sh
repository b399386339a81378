#!/usr/bin/env bash
# A whole local fleetprof pipeline on loopback: a real Kafka broker (KRaft), one collector and
# one aggregator, with their state under one directory.
#
#   deploy/pipeline.sh start    # prints the environment to use (collector socket, API server)
#   deploy/pipeline.sh env      # prints that environment again: eval "$(deploy/pipeline.sh env)"
#   deploy/pipeline.sh status   # Kafka, collector and aggregator, and the environment line
#   deploy/pipeline.sh stop     # stops all three and removes the state directory
#
# Environment: FLEETPROF_BUILD (build dir, default ./build), FLEETPROF_STATE (default
# /tmp/fleetprof-local), KAFKA_PORT (default 19092), AGG_PORT (default 9402),
# COLLECTOR_METRICS (default 127.0.0.1:9465), AGG_FINE_WIDTH (fine time buckets, default 10s:
# the diff's replicates; a short demo wants shorter ones), AGG_EXTRA (more aggregator flags,
# e.g. "--report-interval 2s --api-token T").
#
# `start` records its state directory and ports (STATE/pipeline.env, and the state directory in
# REGISTRY below), so `stop`, `status` and `env` find a pipeline started with another
# FLEETPROF_STATE (quickstart.sh's /tmp/fleetprof-quickstart) when FLEETPROF_STATE is not set
# and exactly one pipeline runs. `stop` checks that every process it stopped is gone and fails,
# naming them, when one is not.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FLEETPROF_BUILD:-$ROOT/build}"
STATE="${FLEETPROF_STATE:-/tmp/fleetprof-local}"
export KAFKA_PORT="${KAFKA_PORT:-19092}"
AGG_PORT="${AGG_PORT:-9402}"
COLLECTOR_METRICS="${COLLECTOR_METRICS:-127.0.0.1:9465}"
REGISTRY="${TMPDIR:-/tmp}/fleetprof-pipelines-$(id -u)"   # state dirs of started pipelines

die() { echo "pipeline: error: $*" >&2; exit 1; }
say() { echo "pipeline: $*" >&2; }

# alive NAME: the pid in STATE/NAME.pid runs our fleetprof-NAME (a reused pid is not ours).
alive() {
  local pid
  [ -f "$STATE/$1.pid" ] && pid=$(cat "$STATE/$1.pid") && [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null && tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -1 |
    grep -q "fleetprof-$1\$"
}

# The pipelines recorded by start whose state directory still exists, one per line.
recorded() {
  [ -f "$REGISTRY" ] || return 0
  local d
  while IFS= read -r d; do [ -f "$d/pipeline.env" ] && echo "$d"; done <"$REGISTRY" | sort -u
}

# Without FLEETPROF_STATE, and nothing started in the default directory: the one recorded
# pipeline, if there is exactly one (quickstart.sh's, say). Sets STATE; loads pipeline.env.
find_state() {
  if [ -z "${FLEETPROF_STATE:-}" ] && [ ! -f "$STATE/pipeline.env" ]; then
    local found n
    found=$(recorded)
    n=$(printf '%s' "$found" | grep -c . || true)
    if [ "$n" = 1 ]; then
      STATE=$found
    elif [ "$n" -gt 1 ]; then
      die "several pipelines are running; choose one with FLEETPROF_STATE=DIR: $(echo $found)"
    fi
  fi
  if [ -f "$STATE/pipeline.env" ]; then
    # shellcheck disable=SC1091
    . "$STATE/pipeline.env"
  fi
}

env_line() {
  echo "export FLEETPROF_COLLECTOR=$STATE/collector.sock FLEETPROF_SERVER=http://127.0.0.1:$AGG_PORT"
}

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
  printf 'KAFKA_PORT=%q\nAGG_PORT=%q\nCOLLECTOR_METRICS=%q\n' "$KAFKA_PORT" "$AGG_PORT" \
    "$COLLECTOR_METRICS" >"$STATE/pipeline.env"
  { grep -vxF "$STATE" "$REGISTRY" 2>/dev/null || true; echo "$STATE"; } >"$REGISTRY.new" &&
    mv "$REGISTRY.new" "$REGISTRY"
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
  env_line
}

stop() {
  find_state
  [ -f "$STATE/pipeline.env" ] || [ -f "$STATE/collector.pid" ] || [ -f "$STATE/aggregator.pid" ] ||
    die "no pipeline started in $STATE, nothing stopped (started with another FLEETPROF_STATE? $(recorded | tr '\n' ' '))"
  local left=""
  for p in collector aggregator; do
    if alive "$p"; then
      local pid
      pid=$(cat "$STATE/$p.pid")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do alive "$p" || break; sleep 0.1; done
      alive "$p" && kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do alive "$p" || break; sleep 0.1; done
      if alive "$p"; then left="$left $p(pid $pid)"; continue; fi
      say "$p (pid $pid) stopped"
    fi
    rm -f "$STATE/$p.pid"
  done
  "$ROOT/deploy/kafka/stop.sh" >/dev/null 2>&1 || left="$left kafka(port $KAFKA_PORT)"
  [ -z "$left" ] || die "could not stop:$left (state kept in $STATE)"
  say "Kafka on port $KAFKA_PORT stopped"
  rm -rf "$STATE"
  if [ -f "$REGISTRY" ]; then
    { grep -vxF "$STATE" "$REGISTRY" || true; } >"$REGISTRY.new" && mv "$REGISTRY.new" "$REGISTRY"
  fi
  say "stopped"
}

status() {
  find_state
  local kpid
  kpid=$(. "$ROOT/deploy/kafka/common.sh" && kafka_running_pid) || kpid=""
  if [ -n "$kpid" ]; then echo "kafka: running (pid $kpid, 127.0.0.1:$KAFKA_PORT)"; else echo "kafka: stopped (port $KAFKA_PORT)"; fi
  for p in collector aggregator; do
    if alive "$p"; then echo "$p: running (pid $(cat "$STATE/$p.pid"))"; else echo "$p: stopped"; fi
  done
  echo "state: $STATE"
  if alive collector && alive aggregator; then env_line; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) find_state; alive collector && alive aggregator || die "no pipeline running in $STATE"; env_line ;;
  *) echo "usage: deploy/pipeline.sh start|stop|status|env" >&2; exit 2 ;;
esac
