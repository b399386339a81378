#!/usr/bin/env bash
# fleetprof quick start: installs what is missing, builds, and runs the whole local pipeline on
# a demo service, then prints what the profiler found and the address of the web UI.
#
#   real Kafka broker (KRaft) + fleetprof-collector + fleetprof-aggregator on loopback
#   deploy/demo/demo-service v1, then v2 (v2 adds ~10% CPU in apply_discount_rules), each under
#   `fleetprof run` (the agent is preloaded: no code change)
#   -> fleetprof services / top / diff v1 v2 / spans
#
# Options (environment): DEMO_SECONDS (per version, default 40), DEMO_PROCS (processes per
# version, default 2), KEEP=1 (leave the pipeline running, and with it the web UI whose address
# is printed at the end, with the FLEETPROF_COLLECTOR export that sends your own program's
# profile to it; stop it with deploy/pipeline.sh stop, which finds it in its state directory),
# FLEETPROF_BUILD=DIR (a build you made already: nothing is installed or built).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
DEMO_SECONDS=${DEMO_SECONDS:-40}
DEMO_PROCS=${DEMO_PROCS:-2}

if [ -n "${FLEETPROF_BUILD:-}" ]; then
  [ -x "$FLEETPROF_BUILD/cli/fleetprof" ] ||
    { echo "quickstart: FLEETPROF_BUILD=$FLEETPROF_BUILD has no cli/fleetprof (build it, or unset FLEETPROF_BUILD)" >&2; exit 1; }
else
  deploy/install-deps.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build
  FLEETPROF_BUILD="$ROOT/build"
fi

export FLEETPROF_BUILD FLEETPROF_STATE=${FLEETPROF_STATE:-/tmp/fleetprof-quickstart}
export AGG_FINE_WIDTH=${AGG_FINE_WIDTH:-5s} # 5-s buckets: each version gets 8 replicates in 40 s
eval "$(deploy/pipeline.sh start)"   # sets FLEETPROF_COLLECTOR and FLEETPROF_SERVER
[ "${KEEP:-0}" = 1 ] || trap 'deploy/pipeline.sh stop' EXIT
FP="$FLEETPROF_BUILD/cli/fleetprof"

SECONDS_PER_VERSION=$DEMO_SECONDS PROCS=$DEMO_PROCS deploy/demo/feed.sh v1 v2 || true

echo; echo "== fleetprof services"; "$FP" services
echo; echo "== fleetprof versions demo"; "$FP" versions demo
echo; echo "== fleetprof top --service demo --version v2 --limit 12"
"$FP" top --service demo --version v2 --limit 12
echo; echo "== fleetprof diff --service demo --base v1 --test v2  (what changed with this deploy?)"
"$FP" diff --service demo --base v1 --test v2 || true
echo; echo "== fleetprof spans --service demo --limit 5  (the costliest requests)"
"$FP" spans --service demo --limit 5 || true

echo
echo "== the web UI: $FLEETPROF_SERVER/"
echo "   what changed with this deploy: $FLEETPROF_SERVER/#/diff?service=demo&base=v1&test=v2"
echo "   why was this request slow:     $FLEETPROF_SERVER/#/spans?service=demo"
if [ "${KEEP:-0}" = 1 ]; then
  echo "   the pipeline keeps running (KEEP=1). To profile your own program with it (README.md,"
  echo "   \"Profile your own program\"), set in your shell:"
  echo "     export FLEETPROF_COLLECTOR=$FLEETPROF_COLLECTOR FLEETPROF_SERVER=$FLEETPROF_SERVER"
  echo "     export PATH=\"$FLEETPROF_BUILD/cli:\$PATH\""
  echo "   then: fleetprof run --service NAME -- PROGRAM ARGS; stop it with: deploy/pipeline.sh stop"
else
  echo "   (the pipeline stops now; run KEEP=1 ./quickstart.sh to keep it and the UI up)"
fi
