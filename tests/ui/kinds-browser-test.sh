#!/usr/bin/env bash
# Flame-graph frames coloured by their kind of code, in a real browser (ctest: test-ui-kinds;
# labels ui, browser, nosan: fixed port 19846, run under /tmp/fp-services.lock like every
# browser test). test-agent-node store runs tests/node/mixed.js under the agent with
# --perf-basic-prof and loads its chunks into a SQLite store; the aggregator serves that store
# (no Kafka: the consumer finds no broker, the API reads the store) and
# tests/ui/kinds-browser-test.mjs checks the colours of a JavaScript and a native frame and
# the legend in headless chromium.
set -euo pipefail
SRC="${FLEETPROF_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
export FLEETPROF_SRC="$SRC" FLEETPROF_BUILD="${FLEETPROF_BUILD:-$SRC/build}"
PORT=19846
command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null || { echo "chromium is missing: run deploy/install-deps.sh"; exit 1; }
if [ ! -f "$SRC/ui/node_modules/puppeteer-core/package.json" ]; then
  (cd "$SRC/ui" && timeout 300 npm ci --no-audit --no-fund --loglevel=error)
fi
out=$("$FLEETPROF_BUILD/tests/test-agent-node" store)
echo "$out" | grep -v '^ts='
store=$(echo "$out" | sed -n 's/^# store kept: //p')
[ -d "$store" ] || { echo "no store kept"; exit 1; }
"$FLEETPROF_BUILD/aggregator/fleetprof-aggregator" --brokers 127.0.0.1:1 --store-dir "$store" \
  --http-port $PORT > "$store/aggregator.log" 2>&1 &
agg=$!
trap 'kill $agg 2>/dev/null || true; wait $agg 2>/dev/null || true; rm -rf "$store"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  curl -s "http://127.0.0.1:$PORT/api/v1/services" >/dev/null 2>&1 && break; sleep 0.2; done
node "$SRC/tests/ui/kinds-browser-test.mjs" "http://127.0.0.1:$PORT"
