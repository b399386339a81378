#!/usr/bin/env bash
# Over-dispersion of the agent's CPU sample counts, without the store: PROCS processes of
# bench/diff-service under the agent (FLEETPROF_OUTPUT: one file per chunk) for SECONDS, each
# chunk's leaf counts from `fleetprof fold --count`, then bench/chunk-dispersion.py: Pearson's
# X^2 / df of each function's count around its process's share (1 = Poisson sampling), with
# chunks merged 1, 4, 16, 48 at a time, and between the processes' totals.
# usage: bench/chunk-dispersion.sh [VAR=value...] [-- diff-service args]
#   e.g. bench/chunk-dispersion.sh FLEETPROF_CPU_HZ=97
# Environment: FLEETPROF_BUILD (default ./build), PROCS (4), SECONDS_RUN (90), RATE (300),
# OUT (default /tmp/fp-chunk-dispersion).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FLEETPROF_BUILD:-$ROOT/build}"
PROCS="${PROCS:-4}" SECONDS_RUN="${SECONDS_RUN:-90}" RATE="${RATE:-300}"
OUT="${OUT:-/tmp/fp-chunk-dispersion}"
envs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
[ $# -gt 0 ] && shift
rm -rf "$OUT" && mkdir -p "$OUT/chunks"
for p in $(seq 1 "$PROCS"); do
  env LD_PRELOAD="$BUILD/agent/libfleetprof.so" FLEETPROF_OUTPUT="$OUT/chunks" \
    FLEETPROF_SERVICE=disp "${envs[@]}" "$BUILD/bench/diff-service" --seconds "$SECONDS_RUN" \
    --rate "$RATE" --seed "$p" "$@" >"$OUT/p$p.log" &
done
wait
for f in "$OUT"/chunks/*.fpc; do
  "$BUILD/cli/fleetprof" fold --count "$f" |
    awk -v f="$(basename "$f")" '{n = split($1, a, ";"); c[a[n]] += $2}
      END {for (k in c) printf "%s %s %d\n", f, k, c[k]}'
done >"$OUT/counts"
python3 "$ROOT/bench/chunk-dispersion.py" "$OUT/counts"
