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
#
# Trust: the state directory and the registry are used only when they are ours (owned by this
# uid, not a symlink, not group- or world-writable): /tmp names are predictable, and another
# user could create them first. pipeline.env is never run as shell: its three KEY=value lines
# are read and checked (ports, host:port). The registry lives in $XDG_RUNTIME_DIR, else
# ~/.cache/fleetprof, never in /tmp.
set -euo pipefail
umask 022  # the state and registry must not be group- or world-writable: ours() refuses them
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FLEETPROF_BUILD:-$ROOT/build}"
STATE="${FLEETPROF_STATE:-/tmp/fleetprof-local}"
export KAFKA_PORT="${KAFKA_PORT:-19092}"
AGG_PORT="${AGG_PORT:-9402}"
COLLECTOR_METRICS="${COLLECTOR_METRICS:-127.0.0.1:9465}"
# state dirs of started pipelines (FLEETPROF_REGISTRY_DIR: tests' own)
REGDIR="${FLEETPROF_REGISTRY_DIR:-${XDG_RUNTIME_DIR:-${HOME:-/nonexistent}/.cache}/fleetprof}"
REGISTRY="$REGDIR/pipelines"

die() { echo "pipeline: error: $*" >&2; exit 1; }
say() { echo "pipeline: $*" >&2; }

# alive NAME: the pid in STATE/NAME.pid runs our fleetprof-NAME (a reused pid is not ours).
alive() {
  local pid
  [ -f "$STATE/$1.pid" ] && pid=$(cat "$STATE/$1.pid") && [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null && tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -1 |
    grep -q "fleetprof-$1\$"
}

# ours PATH: PATH is owned by this uid, is not a symlink and is not group- or world-writable.
ours() {
  [ -e "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] || return 1
  local mode
  mode=$(stat -c %a "$1") || return 1
  (( (8#$mode & 8#022) == 0 ))
}

# ours_or_die PATH WHAT: refuse to use a PATH someone else could have planted or can change.
ours_or_die() {
  [ -e "$1" ] || [ -L "$1" ] || return 0
  ours "$1" || die "refusing $2 $1: not a directory/file of uid $(id -u) that only it can write" \
    "($(stat -c '%U %A' "$1" 2>/dev/null)); remove it or choose another path"
}

# load_env: reads STATE/pipeline.env (written by start) as data: KAFKA_PORT, AGG_PORT (ports),
# COLLECTOR_METRICS (host:port); any other line or value is an error, nothing is executed.
load_env() {
  local f="$STATE/pipeline.env" k v
  [ -f "$f" ] || return 0
  ours_or_die "$STATE" "state directory"
  ours_or_die "$f" "state file"
  while IFS='=' read -r k v; do
    case "$k" in
      KAFKA_PORT|AGG_PORT) [[ "$v" =~ ^[0-9]{1,5}$ ]] || die "$f: $k=$v is not a port" ;;
      COLLECTOR_METRICS) [[ "$v" =~ ^[0-9A-Za-z.:-]+:[0-9]{1,5}$ ]] || die "$f: $k=$v is not host:port" ;;
      *) die "$f: unexpected line '$k=$v' (want KAFKA_PORT, AGG_PORT, COLLECTOR_METRICS)" ;;
    esac
    printf -v "$k" '%s' "$v"
  done <"$f"
  export KAFKA_PORT
}

# The pipelines recorded by start whose state directory still exists and is ours, one per line.
recorded() {
  [ -f "$REGISTRY" ] || return 0
  ours_or_die "$REGDIR" "registry directory"
  ours_or_die "$REGISTRY" "registry"
  local d
  while IFS= read -r d; do
    [ -e "$d/pipeline.env" ] || continue
    if [[ "$d" == /* ]] && ours "$d"; then echo "$d"; else say "ignoring $d (in $REGISTRY): not ours"; fi
  done <"$REGISTRY" | sort -u
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
  ours_or_die "$STATE" "state directory"
  load_env
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
  [[ "$KAFKA_PORT" =~ ^[0-9]{1,5}$ && "$AGG_PORT" =~ ^[0-9]{1,5}$ ]] ||
    die "KAFKA_PORT=$KAFKA_PORT and AGG_PORT=$AGG_PORT must be port numbers"
  [[ "$COLLECTOR_METRICS" =~ ^[0-9A-Za-z.:-]+:[0-9]{1,5}$ ]] ||
    die "COLLECTOR_METRICS=$COLLECTOR_METRICS is not host:port"
  mkdir -p "$(dirname "$STATE")"
  mkdir -m 755 "$STATE" 2>/dev/null || true  # exists already: checked to be ours below
  ours_or_die "$STATE" "state directory"
  [ -d "$STATE" ] || die "cannot create the state directory $STATE"
  mkdir -p "$STATE/spool" "$STATE/store"
  printf 'KAFKA_PORT=%s\nAGG_PORT=%s\nCOLLECTOR_METRICS=%s\n' "$KAFKA_PORT" "$AGG_PORT" \
    "$COLLECTOR_METRICS" >"$STATE/pipeline.env"
  mkdir -p -m 700 "$REGDIR"
  ours_or_die "$REGDIR" "registry directory"
  ours_or_die "$REGISTRY" "registry"
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
  if [ -f "$REGISTRY" ] && ours "$REGISTRY"; then
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
