#!/usr/bin/env bash
# The README's "Profile your own program" section, run as written (issue 35): its ```sh blocks
# between the `readme-test: begin` and `readme-test: end` markers, in one bash -e, from a
# scratch root whose deploy/ and build/ are links to the source tree and the build under test.
# Then deploy/pipeline.sh stop on a pipeline started with another FLEETPROF_STATE (as
# quickstart.sh does) and FLEETPROF_STATE unset: it must find it and leave no process.
#
#   test-readme.sh SRC BUILD     (ctest: test-readme, labels kafka;pipeline: fixed ports 19710-19715)
set -euo pipefail
SRC=$1 BUILD=$2
fail() { echo "FAIL: $*"; exit 1; }

tmp=$(mktemp -d /tmp/fp-readme-XXXXXX)
export FLEETPROF_REGISTRY_DIR=$tmp/registry  # pipeline.sh's registry of started pipelines: this test's own
# runs PID: the process exists and is not a zombie (an orphan's exit may wait to be reaped)
runs() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]; }
pids_of() { cat "$1"/{collector,aggregator}.pid 2>/dev/null; cat "/tmp/fleetprof-kafka-$2/pid" 2>/dev/null; }
cleanup() {
  for s in "$tmp/local:19710" "$tmp/qs:19713"; do
    FLEETPROF_STATE=${s%:*} KAFKA_PORT=${s#*:} "$SRC/deploy/pipeline.sh" stop >/dev/null 2>&1 || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/root"
ln -s "$SRC/deploy" "$tmp/root/deploy"
ln -s "$BUILD" "$tmp/root/build"

# --- the README's blocks, verbatim
awk '/<!-- readme-test: begin/{on=1} /<!-- readme-test: end/{on=0}
     on && /^```sh$/{code=1; next} code && /^```$/{code=0; next} code' "$SRC/README.md" >"$tmp/readme.sh"
grep -q 'deploy/pipeline.sh start' "$tmp/readme.sh" || fail "no readme-test blocks in README.md"
grep -q 'deploy/pipeline.sh stop' "$tmp/readme.sh" || fail "the README's section does not stop the pipeline"
echo "--- running, from a root whose deploy/ and build/ are the tree under test:"
cat "$tmp/readme.sh"
# Ports away from the defaults a developer's own pipeline uses; the state in the scratch dir.
export FLEETPROF_STATE=$tmp/local KAFKA_PORT=19710 AGG_PORT=19711 COLLECTOR_METRICS=127.0.0.1:19712
# record the pids before the README's stop, to check it stopped them
(cd "$tmp/root" && sed 's|^deploy/pipeline.sh stop|pids_before=$(cat $FLEETPROF_STATE/*.pid /tmp/fleetprof-kafka-$KAFKA_PORT/pid); &|' \
   "$tmp/readme.sh" >"$tmp/readme-run.sh" && echo 'echo "pids: $pids_before"' >>"$tmp/readme-run.sh" &&
   bash -e "$tmp/readme-run.sh") >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; fail "the README's commands failed"; }
cat "$tmp/out.txt"
grep -q 'heavy_work' "$tmp/out.txt" || fail "top does not name heavy_work"
grep -q 'light_work' "$tmp/out.txt" || fail "no light_work in the output"
! grep -q 'cannot reach' "$tmp/out.txt" || fail "the agent could not reach the collector"
for p in $(sed -n 's/^pids: //p' "$tmp/out.txt"); do
  ! runs "$p" || fail "pid $p ($(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-80)) still runs after the README's stop"
done
[ -n "$(sed -n 's/^pids: //p' "$tmp/out.txt")" ] || fail "no pids recorded before stop"
! curl -fsS -o /dev/null "http://127.0.0.1:19711/healthz" 2>/dev/null || fail "the aggregator still answers"

# --- stop without FLEETPROF_STATE finds the pipeline started with another state dir
unset FLEETPROF_STATE
[ ! -f /tmp/fleetprof-local/pipeline.env ] ||
  fail "a pipeline runs in /tmp/fleetprof-local (stop it first): this case needs the default free"
export KAFKA_PORT=19713 AGG_PORT=19714 COLLECTOR_METRICS=127.0.0.1:19715
FLEETPROF_STATE=$tmp/qs "$SRC/deploy/pipeline.sh" start >/dev/null 2>"$tmp/start.err" ||
  { cat "$tmp/start.err"; fail "pipeline.sh start"; }
FLEETPROF_STATE=$tmp/qs "$SRC/deploy/pipeline.sh" status | tee "$tmp/status.txt"
grep -q '^kafka: running' "$tmp/status.txt" || fail "status does not show Kafka running"
grep -q "^export FLEETPROF_COLLECTOR=$tmp/qs/collector.sock " "$tmp/status.txt" ||
  fail "status does not print the environment line"
before=$(pids_of "$tmp/qs" 19713)
[ "$(echo "$before" | wc -w)" = 3 ] || fail "want 3 pids (collector, aggregator, kafka), got: $before"
unset KAFKA_PORT AGG_PORT COLLECTOR_METRICS  # as a user who just types the command
"$SRC/deploy/pipeline.sh" stop 2>&1 | tee "$tmp/stop.txt"
for p in $before; do
  ! runs "$p" || fail "pid $p still runs after pipeline.sh stop"
done
! curl -fsS -o /dev/null "http://127.0.0.1:19714/healthz" 2>/dev/null || fail "the aggregator still answers"
[ ! -e "$tmp/qs" ] || fail "the state directory $tmp/qs is left"
# nothing left to stop: says so and fails
if "$SRC/deploy/pipeline.sh" stop 2>"$tmp/stop2.txt"; then fail "a second stop succeeded"; fi
grep -q 'nothing stopped' "$tmp/stop2.txt" || fail "a second stop says: $(cat "$tmp/stop2.txt")"
echo "PASS"
