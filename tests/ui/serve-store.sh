# Sourced by the browser tests that look at a store an agent test made (incidents, kinds):
#   serve_store PORT TEST CASE  runs FLEETPROF_BUILD/tests/TEST CASE, which prints
#   "# store kept: DIR", then serves DIR with the aggregator on PORT (no Kafka: the consumer
#   finds no broker, the API reads the store), removes both at exit and waits until it answers.
# It also checks chromium is there and installs puppeteer-core (ui/package-lock.json).
SRC="${FLEETPROF_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export FLEETPROF_SRC="$SRC" FLEETPROF_BUILD="${FLEETPROF_BUILD:-$SRC/build}"
command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null || { echo "chromium is missing: run deploy/install-deps.sh"; exit 1; }
if [ ! -f "$SRC/ui/node_modules/puppeteer-core/package.json" ]; then
  (cd "$SRC/ui" && timeout 300 npm ci --no-audit --no-fund --loglevel=error)
fi

serve_store() {
  local port=$1 out store
  out=$(FP_KEEP_STORE=1 "$FLEETPROF_BUILD/tests/$2" "$3")
  echo "$out" | grep -v '^ts='
  store=$(echo "$out" | sed -n 's/^# store kept: //p')
  [ -d "$store" ] || { echo "no store kept"; exit 1; }
  "$FLEETPROF_BUILD/aggregator/fleetprof-aggregator" --brokers 127.0.0.1:1 --store-dir "$store" \
    --http-port "$port" > "$store/aggregator.log" 2>&1 &
  local agg=$!
  # shellcheck disable=SC2064 # expanded now: the values of this call
  trap "kill $agg 2>/dev/null || true; wait $agg 2>/dev/null || true; rm -rf '$store'" EXIT
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    curl -s "http://127.0.0.1:$port/api/v1/services" >/dev/null 2>&1 && break; sleep 0.2; done
}
