#!/usr/bin/env bash
# Flame-graph frames coloured by their kind of code, in a real browser (ctest: test-ui-kinds;
# labels ui, browser, nosan: fixed port 19846, run under /tmp/fp-services.lock like every
# browser test). test-agent-node store runs tests/node/mixed.js under the agent with
# --perf-basic-prof and loads its chunks into a SQLite store; the aggregator serves that store
# (no Kafka: the consumer finds no broker, the API reads the store) and
# tests/ui/kinds-browser-test.mjs checks the colours of a JavaScript and a native frame and
# the legend in headless chromium.
set -euo pipefail
PORT=19846
. "$(dirname "$0")/serve-store.sh"
serve_store $PORT test-agent-node store
node "$SRC/tests/ui/kinds-browser-test.mjs" "http://127.0.0.1:$PORT"
