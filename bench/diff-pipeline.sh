#!/usr/bin/env bash
# The diff's sensitivity through the real pipeline (issue 30): per cell, TRIALS pairs of
# deploys of bench/diff-service (open loop, ~1 ms of CPU per request at RATE requests/s, PROCS
# processes per version for SECONDS, built -O2 without frame pointers), profiled with
# `fleetprof run` through a local pipeline (deploy/pipeline.sh), then `fleetprof diff`.
# Reports per cell: detection rate of the planted function, diffs with another finding, and
# the samples per side and minimum detectable effect the diff stated.
# Uses the fixed pipeline ports: run it under the services lock:
#   flock /tmp/fp-services.lock bench/diff-pipeline.sh
# Environment: FLEETPROF_BUILD (default ./build), TRIALS (4), SECONDS_RUN (40), RATE (300),
# PROCS (processes per version, 2), CELLS (default "new:0.02 new:0.01 null:0"), OUT (directory
# for each diff's JSON, default /tmp/fp-diff-pipeline-out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FLEETPROF_BUILD:-$ROOT/build}"
TRIALS="${TRIALS:-4}" SECONDS_RUN="${SECONDS_RUN:-40}" RATE="${RATE:-300}" PROCS="${PROCS:-2}"
CELLS="${CELLS:-new:0.02 new:0.01 null:0}"
export FLEETPROF_STATE="${FLEETPROF_STATE:-/tmp/fp-diff-pipeline-$$}"
SVC="$BUILD/bench/diff-service"
OUT="${OUT:-/tmp/fp-diff-pipeline-out}"
mkdir -p "$OUT"
[ -x "$SVC" ] || { echo "diff-pipeline: build bench/diff-service first" >&2; exit 1; }
env_line=$("$ROOT/deploy/pipeline.sh" start)
eval "$env_line"
trap '"$ROOT/deploy/pipeline.sh" stop >/dev/null 2>&1 || true' EXIT
CLI="$BUILD/cli/fleetprof"
run_side() { # service version new-share seed
  local args=(--seconds "$SECONDS_RUN" --rate "$RATE")
  [ "$3" != 0 ] && args+=(--new-share "$3")
  for p in $(seq 1 "$PROCS"); do
    "$CLI" run --service "$1" --version "$2" -- "$SVC" "${args[@]}" --seed "$(($4 * 10 + p))" \
      >/dev/null &
  done
}
for cell in $CELLS; do
  kind=${cell%%:*} share=${cell#*:}
  found=0 other=0 sb=0 st=0 mde=0
  for t in $(seq 1 "$TRIALS"); do
    s="dp-$kind-${share/./}-$t-$$"
    run_side "$s" v1 0 "$t"
    run_side "$s" v2 "$([ "$kind" = new ] && echo "$share" || echo 0)" "$((t + 100))"
    wait
    sleep 3 # the last chunks reach the store (batch interval 500 ms)
    j=$("$CLI" diff --service "$s" --base v1 --test v2 --json --limit 0)
    echo "$j" >"$OUT/$s.json"
    line=$(jq -r '[(.entries[] | select(.name=="new_fn") | .class) // "absent",
                    ([.entries[] | select((.class=="regression" or .class=="improvement")
                       and .name!="new_fn")] | length),
                    .base_samples, .test_samples, .min_detectable_effect.new_function_share,
                    ([.entries[] | select(.name=="new_fn") | .base_samples, .test_samples]
                       | map(tostring) | join(" vs "))] | @tsv' <<<"$j")
    read -r cls oth b tt m nf <<<"$line"
    disp=$(jq -r '"replicates \(.base_replicates)/\(.test_replicates), alpha \(.dispersion), between processes \(.dispersion_between_processes_data) (df \(.dispersion_between_processes_df))"' <<<"$j")
    printf '%s %s trial %d: new_fn %s (%s samples), other findings %s, samples %s / %s, mde new %.2f%%, %s\n' \
      "$kind" "$share" "$t" "$cls" "${nf:-0}" "$oth" "$b" "$tt" "$(echo "$m * 100" | bc -l)" "$disp"
    [ "$cls" = regression ] && found=$((found + 1))
    [ "$oth" -gt 0 ] && other=$((other + 1))
    sb=$((sb + b)) st=$((st + tt))
    mde=$(echo "$mde + $m" | bc -l)
  done
  printf 'CELL %s %s: found %d/%d, diffs with another finding %d/%d, samples per side %d / %d, mde new %.2f%%\n' \
    "$kind" "$share" "$found" "$TRIALS" "$other" "$TRIALS" "$((sb / TRIALS))" "$((st / TRIALS))" \
    "$(echo "$mde / $TRIALS * 100" | bc -l)"
done
