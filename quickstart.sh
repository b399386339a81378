#!/usr/bin/env bash
# fleetprof quick start: installs what is missing, builds, and runs the whole local pipeline on
# a demo service, then prints what the profiler found.
#
#   real Kafka broker (KRaft) + fleetprof-collector + fleetprof-aggregator on loopback
#   deploy/demo/demo-service v1, then v2 (v2 adds ~10% CPU in apply_discount_rules), each under
#   `fleetprof run` (the agent is preloaded: no code change)
#   -> fleetprof services / top / diff v1 v2 / spans
#
# Options (environment): DEMO_SECONDS (per version, default 40), DEMO_PROCS (processes per
# version, default 2), KEEP=1 (leave the pipeline running; stop it with deploy/pipeline.sh stop).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
DEMO_SECONDS=${DEMO_SECONDS:-40}
DEMO_PROCS=${DEMO_PROCS:-2}

deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build

export FLEETPROF_BUILD="$ROOT/build" FLEETPROF_STATE=${FLEETPROF_STATE:-/tmp/fleetprof-quickstart}
export AGG_FINE_WIDTH=${AGG_FINE_WIDTH:-5s} # 5-s buckets: each version gets 8 replicates in 40 s
eval "$(deploy/pipeline.sh start)"   # sets FLEETPROF_COLLECTOR and FLEETPROF_SERVER
[ "${KEEP:-0}" = 1 ] || trap 'deploy/pipeline.sh stop' EXIT
FP="$ROOT/build/cli/fleetprof"

run_version() {
  local v=$1 pids=()
  echo "== demo-service $v: $DEMO_PROCS processes for ${DEMO_SECONDS}s under the agent"
  for i in $(seq 1 "$DEMO_PROCS"); do
    "$FP" run --service demo --version "$v" --collector "$FLEETPROF_COLLECTOR" --interval 5 -- \
      "$ROOT/build/deploy/demo/demo-service" --version "$v" --seconds "$DEMO_SECONDS" --seed "$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
}
run_version v1
run_version v2

echo "== waiting for the aggregator to store every chunk the collector delivered"
metric() { curl -fsS "$1" | awk -v m="$2" '$1 == m { print $2 }'; }
for _ in $(seq 1 120); do
  delivered=$(metric "http://${COLLECTOR_METRICS:-127.0.0.1:9465}/metrics" fleetprof_collector_chunks_delivered_total)
  stored=$(metric "$FLEETPROF_SERVER/metrics" fleetprof_aggregator_chunks_total)
  [ -n "$delivered" ] && [ "${stored:-0}" -ge "$delivered" ] && break
  sleep 0.5
done
echo "   collector delivered ${delivered:-?} chunks, aggregator stored ${stored:-?}"

echo; echo "== fleetprof services"; "$FP" services
echo; echo "== fleetprof versions demo"; "$FP" versions demo
echo; echo "== fleetprof top --service demo --version v2 --limit 12"
"$FP" top --service demo --version v2 --limit 12
echo; echo "== fleetprof diff --service demo --base v1 --test v2  (what changed with this deploy?)"
"$FP" diff --service demo --base v1 --test v2 || true
echo; echo "== fleetprof spans --service demo --limit 5  (the costliest requests)"
"$FP" spans --service demo --limit 5 || true
