#!/bin/sh
# Incident detection latency (issue 32's acceptance): incident_svc (tests/programs) runs
# steadily and, every GAP seconds, for 5 s, spins in spike_spin with its requests slowing;
# test-agent-incident's spikes_bench case reads its chunks back and checks that each spike
# became exactly one overload incident within 2 s with >= 3 s captured before it, then prints
# the trigger latencies' min, median, p95 (nearest rank) and max; then it loads the chunks
# into a SQLite store and checks each incident's diff (spike_spin first, a significant
# regression, nothing else flagged; FP_TEST_VERBOSE=1 prints them). The agent settings are the
# test's (tests/test-agent-incident.c g_trig_env: 100 ms slow, ratio 0.5, CPU 0.05 of the
# cores, 10 s window, 6 s after, 12 s cooldown, 400 CPU samples/s).
#
#   bench/incident-spikes.sh BUILD_DIR [SPIKES [GAP_S]]   (default 10 spikes, 60 s apart)
set -eu
BUILD=$(cd "$1" && pwd)
export FP_SPIKES=${2:-10} FP_GAP=${3:-60}
export TR_TIMEOUT=$((FP_SPIKES * FP_GAP + 120))
export FLEETPROF_SRC=$(cd "$(dirname "$0")/.." && pwd) FLEETPROF_BUILD="$BUILD"
exec "$BUILD/tests/test-agent-incident" spikes_bench
