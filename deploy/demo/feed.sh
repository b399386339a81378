#!/usr/bin/env bash
# Feeds a running pipeline (deploy/pipeline.sh start) with the demo service: each VERSION runs
# PROCS processes of deploy/demo/demo-service under `fleetprof run` for SECONDS, then waits
# until the aggregator has stored every chunk the collector delivered.
#
#   deploy/demo/feed.sh v1 v2          # one version after the other (a deploy)
#   PARALLEL=1 deploy/demo/feed.sh v1 v2   # side by side (a canary), v2 started 1 s later
#
# Environment: FLEETPROF_BUILD (./build), FLEETPROF_COLLECTOR and FLEETPROF_SERVER (from
# pipeline.sh start), COLLECTOR_METRICS (127.0.0.1:9465), SECONDS_PER_VERSION (40), PROCS (2),
# INTERVAL (chunk interval, 5 s), RATE (requests/s per process, the demo's default),
# PARALLEL (0), CPU_HZ (FLEETPROF_CPU_HZ for the demo, 1000: a process at ~0.2 cores then
# takes the agent's 100 samples/s, so a 40-s version holds the ~2,000 samples a deploy report
# waits for; at the agent's default of 100 samples per CPU-second it would take ~20/s). A
# version is "v1" or "v2" (the demo's code), optionally as LABEL=CODE.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${FLEETPROF_BUILD:-$ROOT/build}"
SECS=${SECONDS_PER_VERSION:-40}
PROCS=${PROCS:-2}
FP="$BUILD/cli/fleetprof"
: "${FLEETPROF_COLLECTOR:?run deploy/pipeline.sh start first (it prints FLEETPROF_COLLECTOR)}"
: "${FLEETPROF_SERVER:?run deploy/pipeline.sh start first (it prints FLEETPROF_SERVER)}"

pids=()
start_version() { # LABEL CODE
  echo "feed: demo-service $1 ($2): $PROCS processes for ${SECS}s under the agent" >&2
  for i in $(seq 1 "$PROCS"); do
    FLEETPROF_CPU_HZ="${CPU_HZ:-1000}" "$FP" run --service demo --version "$1" --collector "$FLEETPROF_COLLECTOR" --interval "${INTERVAL:-5}" -- \
      "$BUILD/deploy/demo/demo-service" --version "$2" --seconds "$SECS" --seed "$i$((${#pids[@]} + 1))" \
      ${RATE:+--rate "$RATE"} --quiet >/dev/null &
    pids+=($!)
  done
}
for v in "$@"; do
  label=${v%%=*}; code=${v#*=}
  start_version "$label" "$code"
  if [ "${PARALLEL:-0}" = 1 ]; then sleep 1; else wait "${pids[@]}"; pids=(); fi
done
[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"

metric() { curl -fsS "$1" | awk -v m="$2" '$1 == m { print $2 }'; }
delivered="" stored=""
for _ in $(seq 1 240); do
  delivered=$(metric "http://${COLLECTOR_METRICS:-127.0.0.1:9465}/metrics" fleetprof_collector_chunks_delivered_total || true)
  stored=$(metric "$FLEETPROF_SERVER/metrics" fleetprof_aggregator_chunks_total || true)
  [ -n "$delivered" ] && [ "${stored:-0}" -ge "$delivered" ] && break
  sleep 0.5
done
echo "feed: collector delivered ${delivered:-?} chunks, aggregator stored ${stored:-?}" >&2
[ -n "$delivered" ] && [ "${stored:-0}" -ge "$delivered" ]
