#!/bin/sh
# No incident under steady load, nor under a uniform load increase that keeps requests fast:
# incident_svc (tests/programs) serves steadily for STEADY_S seconds, then the pause between
# its requests shrinks linearly over RAMP_S seconds until the request rate has tripled, then
# 10 s at that rate; test-agent-incident's steady_bench case reads its chunks back and checks
# that no incident was captured and no trigger suppressed, and prints the counts (incidents,
# suppressed triggers, request rates, requests of 100 ms or more, the longest). The agent
# settings are the spike test's, the ones that catch a 5 s spike within a second
# (tests/test-agent-incident.c g_trig_env: 100 ms slow, ratio 0.5, CPU 0.05 of the cores,
# 10 s window, 6 s after, 12 s cooldown, 400 CPU samples/s).
#
#   bench/incident-steady.sh BUILD_DIR [STEADY_S [RAMP_S]]   (default 600 s steady, 120 s ramp)
set -eu
BUILD=$(cd "$1" && pwd)
export FP_STEADY=${2:-600} FP_RAMP=${3:-120}
export TR_TIMEOUT=$((FP_STEADY + FP_RAMP + 400))
export FLEETPROF_SRC=$(cd "$(dirname "$0")/.." && pwd) FLEETPROF_BUILD="$BUILD"
exec "$BUILD/tests/test-agent-incident" steady_bench
