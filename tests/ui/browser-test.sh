#!/usr/bin/env bash
# The web UI in a real browser against a real pipeline (ctest: test-ui-browser; labels ui,
# browser, pipeline, slow, nosan: it preloads the agent into the uninstrumented demo service,
# and a sanitizer build adds nothing to a JavaScript test).
#
#   deploy/pipeline.sh start (Kafka 19840, aggregator 19841, collector metrics 19842; 2-s
#   buckets, reports every 2 s) -> deploy/demo/feed.sh: demo-service v1 and v2 side by side, 3
#   processes each for 30 s, every request in its own span -> tests/ui/browser-test.mjs in
#   headless chromium (and tests/programs/insight_work lock, service "insight", for the
#   Insights section); a second aggregator with --api-token (port 19843) on a copy of the
#   stores for the login page. Screenshots: $FLEETPROF_BUILD/ui-screenshots/.
# Needs chromium (deploy/install-deps.sh) and ui/node_modules (npm ci, run here when missing).
set -euo pipefail
SRC="${FLEETPROF_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
export FLEETPROF_BUILD="${FLEETPROF_BUILD:-$SRC/build}"
cd "$SRC"
export KAFKA_PORT=19840 AGG_PORT=19841 COLLECTOR_METRICS=127.0.0.1:19842 AGG_FINE_WIDTH=2s
export AGG_EXTRA="--report-interval 2s --report-min-samples 1000"
export FLEETPROF_STATE
FLEETPROF_STATE=$(mktemp -d /tmp/fleetprof-ui-test.XXXXXX)

command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null || { echo "chromium is missing: run deploy/install-deps.sh"; exit 1; }
if [ ! -f ui/node_modules/puppeteer-core/package.json ] || [ ui/package-lock.json -nt ui/node_modules/.package-lock.json ]; then
  (cd ui && timeout 300 npm ci --no-audit --no-fund --loglevel=error)
fi

trap 'deploy/pipeline.sh stop >/dev/null 2>&1 || true' EXIT
eval "$(deploy/pipeline.sh start)"
# the agent at the pipeline test's settings: ~100 CPU samples/s per process, 2-s chunks
FLEETPROF_CPU_RATE=400 FLEETPROF_CPU_BUDGET=5 PARALLEL=1 SECONDS_PER_VERSION=30 PROCS=3 INTERVAL=2 \
  RATE=1500 deploy/demo/feed.sh v1 v2
# the per-deploy report of v2 (the reporter looks every 2 s)
for _ in $(seq 1 60); do
  curl -fsS "$FLEETPROF_SERVER/api/v1/reports?service=demo" | grep -q '"test":"v2"' && break
  sleep 1
done
# a service with a planted lock contention hotspot (log_line) for the Insights section
"$FLEETPROF_BUILD/cli/fleetprof" run --service insight --version 1 --collector "$FLEETPROF_COLLECTOR" \
  --interval 1 -- "$FLEETPROF_BUILD/tests/insight_work" lock 2 >/dev/null
for _ in $(seq 1 60); do
  curl -fsS "$FLEETPROF_SERVER/api/v1/insights?service=insight&from=0" 2>/dev/null | grep -q lock_contention && break
  sleep 1
done
# a second aggregator with --api-token on a copy of the stores (its own consumer group, so the
# first one's partitions stay where they are): the login page and the token cookie
mkdir -p "$FLEETPROF_STATE/store-token"
for f in "$FLEETPROF_STATE"/store/*.db; do sqlite3 "$f" ".backup '$FLEETPROF_STATE/store-token/$(basename "$f")'"; done
"$FLEETPROF_BUILD/aggregator/fleetprof-aggregator" --brokers "127.0.0.1:$KAFKA_PORT" \
  --store-dir "$FLEETPROF_STATE/store-token" --group fleetprof-ui-token --http-addr 127.0.0.1 \
  --http-port 19843 --api-token 'ui s3cret' >"$FLEETPROF_STATE/aggregator-token.log" 2>&1 &
tok_pid=$!
trap 'kill $tok_pid 2>/dev/null; deploy/pipeline.sh stop >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 100); do curl -fsS -o /dev/null http://127.0.0.1:19843/healthz 2>/dev/null && break; sleep 0.2; done
TOKEN_SERVER=http://127.0.0.1:19843 TOKEN='ui s3cret' \
  node tests/ui/browser-test.mjs "$FLEETPROF_SERVER" "$FLEETPROF_BUILD/ui-screenshots"
