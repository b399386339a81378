#!/usr/bin/env bash
# deploy/pipeline.sh never runs or removes what another user planted (review finding 5): a
# registry or state directory not owned by us, or writable by others, is refused; pipeline.env
# is read as KEY=value data, never sourced. Nothing here starts a service (each case is refused
# before that), but stop's paths are the ones under test, so it runs under the pipeline label.
#
#   test-pipeline-trust.sh SRC      (ctest: test-pipeline-trust; needs root to chown to nobody)
set -euo pipefail
SRC=$1
P="$SRC/deploy/pipeline.sh"
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "FAIL: needs root (plants files owned by nobody)"; exit 1; }
[ ! -e /tmp/fleetprof-local/pipeline.env ] ||
  fail "a pipeline runs in /tmp/fleetprof-local (stop it first): this test needs the default free"

tmp=$(mktemp -d /tmp/fp-trust-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
export FLEETPROF_REGISTRY_DIR=$tmp/reg
unset FLEETPROF_STATE
mkdir -m 700 "$tmp/reg"

# a hostile state: pipeline.env that runs code when sourced, a pid file naming our own shell
plant() { # plant DIR
  mkdir -p "$1"
  printf 'KAFKA_PORT=1$(touch %s/pwned)\nAGG_PORT=2\nCOLLECTOR_METRICS=127.0.0.1:3\ntouch %s/pwned\n' \
    "$tmp" "$tmp" >"$1/pipeline.env"
  echo $$ >"$1/collector.pid"
}
run() { # run CASE ARGS...: the script must fail, run nothing, remove nothing
  local c=$1; shift
  if "$@" >"$tmp/$c.out" 2>&1; then cat "$tmp/$c.out"; fail "$c: '$*' succeeded"; fi
  [ ! -e "$tmp/pwned" ] || fail "$c: the planted pipeline.env was executed"
  echo "$c: $(tail -1 "$tmp/$c.out")"
}

# 1. the registry lists a state directory owned by nobody
plant "$tmp/evil"; chown -R nobody "$tmp/evil"
echo "$tmp/evil" >"$tmp/reg/pipelines"
for cmd in env stop; do run "nobody-state-$cmd" "$P" "$cmd"; done
grep -q "ignoring $tmp/evil" "$tmp/nobody-state-stop.out" || fail "the foreign state is not named"
grep -q 'nothing stopped' "$tmp/nobody-state-stop.out" || fail "stop did not say it stopped nothing"
[ -f "$tmp/evil/pipeline.env" ] || fail "stop removed a state directory owned by nobody"

# 2. a registry owned by nobody (listing a state of ours) is refused outright
plant "$tmp/mine"; echo "$tmp/mine" >"$tmp/reg/pipelines"; chown nobody "$tmp/reg/pipelines"
run nobody-registry "$P" stop
grep -q 'refusing registry' "$tmp/nobody-registry.out" || fail "no refusal of the registry"
[ -d "$tmp/mine" ] || fail "stop removed a state listed by a foreign registry"
rm -f "$tmp/reg/pipelines"

# 3. a world-writable state directory, given explicitly
plant "$tmp/ww"; chmod 777 "$tmp/ww"
for cmd in env status stop; do run "world-writable-$cmd" env FLEETPROF_STATE="$tmp/ww" "$P" "$cmd"; done
grep -q 'refusing state directory' "$tmp/world-writable-stop.out" || fail "no refusal of the state dir"
[ -d "$tmp/ww" ] || fail "stop removed a world-writable state directory"

# 4. our own state directory, but pipeline.env holds code: parsed, refused, not run
plant "$tmp/own"
for cmd in env status stop; do run "code-in-env-$cmd" env FLEETPROF_STATE="$tmp/own" "$P" "$cmd"; done
grep -q 'is not a port' "$tmp/code-in-env-stop.out" || fail "pipeline.env's value not rejected"

# 5. a state directory that is a symlink to one of ours
ln -s "$tmp/own" "$tmp/link"
run symlink-state env FLEETPROF_STATE="$tmp/link" "$P" stop
[ -d "$tmp/own" ] || fail "stop followed a symlinked state directory"

# 6. a registry directory writable by others is refused at start, before anything runs
chmod 777 "$tmp/reg"
for b in collector/fleetprof-collector aggregator/fleetprof-aggregator cli/fleetprof; do
  mkdir -p "$tmp/build/${b%/*}"; printf '#!/bin/sh\ntouch %s/pwned\n' "$tmp" >"$tmp/build/$b"
  chmod +x "$tmp/build/$b"
done
run open-registry env FLEETPROF_STATE="$tmp/new" FLEETPROF_BUILD="$tmp/build" "$P" start
grep -q 'refusing registry directory' "$tmp/open-registry.out" || fail "no refusal of the registry dir"
chmod 700 "$tmp/reg"
echo "PASS"
