#!/usr/bin/env bash
# WAL soak (issue 13): the aggregator's per-partition WAL files stay under the stated bound
# (store.h AGG_WAL_LIMIT_BYTES = 16 MiB, plus at most one transaction) and the .db files grow,
# while a simulated fleet produces for SOAK_SECONDS (600) and the query API is read every 5 s
# (readers hold WAL snapshots). Not part of ctest: run it by hand.
#   bench/wal-soak.sh [BUILD_DIR]      environment: SOAK_SECONDS, SOAK_RATE (chunks/s, 20),
#                                      KAFKA_PORT (19745), HTTP_PORT (19746)
# Prints a line per sample (max WAL, sum of .db) and a summary; exits 1 if a WAL passed
# 16 MiB + 8 MiB (the bound plus the largest batch transaction measured) or the .db files
# stayed empty.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
SECS=${SOAK_SECONDS:-600}
RATE=${SOAK_RATE:-20}
export KAFKA_PORT=${KAFKA_PORT:-19745}
HTTP=${HTTP_PORT:-19746}
STORE=$(mktemp -d /tmp/fp-wal-soak.XXXXXX)
AGG=""
SIM=""
cleanup() {
  [ -n "$SIM" ] && kill "$SIM" 2>/dev/null
  [ -n "$AGG" ] && kill "$AGG" 2>/dev/null
  wait 2>/dev/null
  "$ROOT/deploy/kafka/stop.sh" >/dev/null 2>&1
  rm -rf "$STORE"
}
trap cleanup EXIT
KAFKA_PARTITIONS=4 "$ROOT/deploy/kafka/start.sh" >/dev/null || exit 1
"$BUILD/aggregator/fleetprof-aggregator" --brokers "127.0.0.1:$KAFKA_PORT" --store-dir "$STORE" \
  --http-port "$HTTP" --group "soak-$$" --retention-interval 30s >"$STORE/agg.log" 2>&1 &
AGG=$!
# intervals x processes x versions x services chunks at RATE/s: enough for SECS seconds
n=$(( (SECS * RATE) / (8 * 4 * 2) + 2 ))
"$BUILD/aggregator/fleetsim" --brokers "127.0.0.1:$KAFKA_PORT" --services 8 --versions 2 \
  --processes 4 --intervals "$n" --samples 400 --stacks 300 --rate "$RATE" \
  >"$STORE/sim.log" 2>&1 &
SIM=$!
start=$(date +%s)
walmax=0
while [ $(( $(date +%s) - start )) -lt "$SECS" ]; do
  sleep 5
  curl -s -m 10 "http://127.0.0.1:$HTTP/api/v1/services" >/dev/null
  svc=$(curl -s -m 10 "http://127.0.0.1:$HTTP/api/v1/services" | grep -o '"name":"[^"]*"' |
        head -1 | cut -d'"' -f4)
  [ -n "$svc" ] && curl -s -m 30 "http://127.0.0.1:$HTTP/api/v1/profile?service=$svc&type=cpu" >/dev/null
  w=0; d=0
  for f in "$STORE"/fleetprof.chunks-*.db; do
    [ -e "$f" ] || continue
    s=$(stat -c %s "$f"); d=$((d + s))
    [ -e "$f-wal" ] && { s=$(stat -c %s "$f-wal"); [ "$s" -gt "$w" ] && w=$s; }
  done
  [ "$w" -gt "$walmax" ] && walmax=$w
  printf '%4ds  wal max now %9d  wal max so far %9d  db total %11d  rss %s kB\n' \
    $(( $(date +%s) - start )) "$w" "$walmax" "$d" "$(awk '/VmRSS/ {print $2}' /proc/$AGG/status)"
done
chunks=$(curl -s "http://127.0.0.1:$HTTP/metrics" | awk '/^fleetprof_aggregator_chunks_total/ {print $2}')
echo "summary: ${SECS}s at ${RATE} chunks/s, ${chunks:-?} chunks stored; largest WAL $walmax bytes" \
  "(bound 16777216 + one transaction); .db total $d bytes"
kill -0 "$AGG" 2>/dev/null || { echo "FAIL: the aggregator died"; exit 1; }
[ "$walmax" -le $((16777216 + 8388608)) ] && [ "$d" -gt 1048576 ]
