#!/usr/bin/env bash
# The incidents UI in a real browser (ctest: test-ui-incidents; labels ui, browser, incident,
# nosan: fixed port 19845, run under /tmp/fp-services.lock like every browser test).
# test-agent-incident spikes makes incident_svc spike 3 times under the agent and loads its
# chunks into a SQLite store as the aggregator does (FP_KEEP_STORE keeps it); the aggregator
# serves that store (no Kafka: the consumer finds no broker, the API reads the store) and
# tests/ui/incidents-browser-test.mjs checks the incidents page, an incident's page and the
# service timeline's markers in headless chromium.
set -euo pipefail
PORT=19845
. "$(dirname "$0")/serve-store.sh"
serve_store $PORT test-agent-incident spikes
node "$SRC/tests/ui/incidents-browser-test.mjs" "http://127.0.0.1:$PORT"
