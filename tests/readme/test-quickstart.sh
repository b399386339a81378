#!/usr/bin/env bash
# `KEEP=1 ./quickstart.sh` (issue 35): the pipeline stays up and the script prints the lines
# that send your own program's profile to it. Runs quickstart.sh with the build under test
# (FLEETPROF_BUILD: nothing installed or built) and short demo versions, then, in a shell that
# has only what quickstart printed, runs its `export` lines verbatim, profiles a program with
# `fleetprof run`, finds it with `fleetprof services`, and runs the printed stop: no process left.
#
#   test-quickstart.sh SRC BUILD   (ctest: test-quickstart, labels kafka;pipeline: ports 19716-19718)
set -euo pipefail
SRC=$1 BUILD=$2
fail() { echo "FAIL: $*"; exit 1; }

tmp=$(mktemp -d /tmp/fp-quickstart-XXXXXX)
export FLEETPROF_REGISTRY_DIR=$tmp/registry # pipeline.sh's registry of started pipelines: this test's own
export FLEETPROF_STATE=$tmp/qs KAFKA_PORT=19716 AGG_PORT=19717 COLLECTOR_METRICS=127.0.0.1:19718
runs() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]; }
cleanup() {
  FLEETPROF_STATE=$tmp/qs KAFKA_PORT=19716 "$SRC/deploy/pipeline.sh" stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

KEEP=1 DEMO_SECONDS=6 DEMO_PROCS=1 FLEETPROF_BUILD=$BUILD "$SRC/quickstart.sh" >"$tmp/out.txt" 2>&1 ||
  { cat "$tmp/out.txt"; fail "KEEP=1 quickstart.sh failed"; }
cat "$tmp/out.txt"
grep -q 'apply_discount_rules' "$tmp/out.txt" || fail "quickstart's diff does not show the planted regression"
grep -E '^ +export FLEETPROF_COLLECTOR=' "$tmp/out.txt" | sed 's/^ *//' >"$tmp/env.sh"
grep -E '^ +export PATH=' "$tmp/out.txt" | sed 's/^ *//' >>"$tmp/env.sh"
[ "$(wc -l <"$tmp/env.sh")" = 2 ] || fail "quickstart did not print the two export lines"
grep -q 'stop it with: deploy/pipeline.sh stop' "$tmp/out.txt" || fail "quickstart does not say how to stop"
pids=$(cat "$tmp/qs"/{collector,aggregator}.pid "/tmp/fleetprof-kafka-19716/pid" 2>/dev/null | tr '\n' ' ')
[ -n "$pids" ] || fail "no pipeline pids after KEEP=1"
for p in $pids; do runs "$p" || fail "pid $p is not running after KEEP=1 quickstart.sh"; done

# a new shell: only what quickstart printed (no FLEETPROF_* of this script); the program: the
# demo's binary (not `sh -c`: dash leaves with _exit, which skips the agent's flush at exit)
cat >"$tmp/own.sh" <<'SH'
set -e
. "$1"
out=$(fleetprof run --service own-program -- "$2" --version v1 --seconds 2 2>&1)
echo "$out"
! echo "$out" | grep -q 'cannot reach' || { echo "FAIL: the agent could not reach the collector"; exit 1; }
for i in $(seq 60); do
  fleetprof services | grep -q '^own-program ' && { echo "own-program stored"; exit 0; }
  sleep 1
done
echo "FAIL: own-program not in fleetprof services after 60 s"; fleetprof services; exit 1
SH
env -u FLEETPROF_STATE -u KAFKA_PORT -u AGG_PORT -u COLLECTOR_METRICS -u FLEETPROF_COLLECTOR \
  -u FLEETPROF_SERVER -u FLEETPROF_BUILD bash "$tmp/own.sh" "$tmp/env.sh" "$BUILD/deploy/demo/demo-service" ||
  fail "the printed export lines"

# the printed stop, from the source tree, with no FLEETPROF_STATE: it finds the pipeline
(cd "$SRC" && env -u FLEETPROF_STATE -u KAFKA_PORT deploy/pipeline.sh stop) || fail "deploy/pipeline.sh stop"
for p in $pids; do
  ! runs "$p" || fail "pid $p still runs after deploy/pipeline.sh stop"
done
echo "PASS: KEEP=1 quickstart.sh's export lines send a program's profile; its stop stops all"
