#!/usr/bin/env bash
# The whole fleetprof test suite, exactly as CI runs it (.ci/run calls this):
#   1. installs missing Debian packages (deploy/install-deps.sh) and the Kafka broker's jars
#      (deploy/kafka/fetch.sh, cached in ~/.cache/fleetprof after the first run), and fetches
#      async-profiler (tests/java/async-profiler.sh, same cache) while the build runs;
#   2. builds with -Werror and runs every ctest test but those labelled `long` (acceptance runs
#      of several minutes each, run by hand with `ctest -L long`; their figures are in
#      bench/RESULTS.md), four at a time (tests start their own real Kafka brokers and mostly
#      wait), except those that measure CPU, rates or noise (label `serial`, step 5);
#   3. rebuilds with ASan+UBSan and with TSan (compiled at nice 19 while step 2 runs, on the
#      CPU its tests leave idle) and runs the tests again in the same way (except those
#      labelled `slow`, which exercise the same code for longer, and `nosan`, which cannot run
#      under a sanitizer for a reason stated where they are registered);
#   4. builds the libFuzzer targets with clang (at nice 19 too) and fuzzes each decoder for
#      FUZZ_SECONDS (40): chunk decoder, collector socket frames, spool recovery, API
#      parameters, two at a time (~1.5 min in all);
#   5. once every build has ended, runs the tests labelled `serial` of the three builds, one
#      at a time with nothing else running (RUN_SERIAL, tests/CMakeLists.txt).
# Ends with one line "tests: N passed, N failed"; exits non-zero if anything failed.
# Options (environment): SKIP_SANITIZERS=1, SKIP_FUZZ=1, FUZZ_SECONDS=N, CTEST_ARGS="...".
set -uo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)

deploy/install-deps.sh || exit 1
deploy/kafka/fetch.sh >/dev/null || exit 1
# async-profiler for test-agent-java's comparison (Maven Central, cached like Kafka's jars):
# fetched while the build runs, not by the test, which runs alone with the machine idle during
# the download (29 s in a fresh run). The test still fetches it itself, and says why it cannot,
# when this failed; it waits on the script's lock if this is still under way.
tests/java/async-profiler.sh >/dev/null 2>&1 &

passed=0
failed=0
failures=()

build() { # build DIR [cmake args...]; $TARGETS (if set) limits what ninja builds
  local dir=$1; shift
  cmake -S "$ROOT" -B "$ROOT/$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFLEETPROF_WERROR=ON "$@" >"$ROOT/$dir.cmake.log" 2>&1 || {
    cat "$ROOT/$dir.cmake.log"; return 1; }
  # shellcheck disable=SC2086
  ninja -C "$ROOT/$dir" ${TARGETS:-} >"$ROOT/$dir.build.log" 2>&1 || {
    grep -E "error|FAILED" "$ROOT/$dir.build.log" | head -40; return 1; }
}

run_ctest() { # run_ctest DIR PHASE [ctest args...]; PHASE (overlap, serial) names its logs
  local dir=$1 phase=$2; shift 2
  echo "=== ctest in $dir $*"
  local log="$ROOT/$dir.$phase.ctest.log" tmp="$ROOT/$dir/Testing/Temporary"
  rm -f "$tmp/LastTestsFailed.log"
  # -j4: tests that wait overlap (two of them kept a core busy in all, four 1.6 cores: bench/
  # RESULTS.md, "CI wall time, four at a time"); those that measure CPU run alone (RUN_SERIAL)
  (cd "$ROOT/$dir" && ctest -j4 --output-on-failure --timeout 1200 ${CTEST_ARGS:-} "$@") | tee "$log"
  cp "$tmp/LastTest.log" "$tmp/LastTest.$phase.log" 2>/dev/null
  [ ! -e "$tmp/LastTestsFailed.log" ] || mv "$tmp/LastTestsFailed.log" "$tmp/LastTestsFailed.$phase.log"
  local p f
  p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log")
  f=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Not Run|Timeout)' "$log")
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$f" -eq 0 ] || failures+=("$dir: $f failed")
}

step() { # step NAME CMD...: a build step that counts as one failure when it fails
  if ! "${@:2}"; then failed=$((failed + 1)); failures+=("$1"); return 1; fi
}

fuzzers="fuzz-chunk-decode fuzz-collector-frames fuzz-spool-recovery fuzz-api-params"

# The other trees compile in the background at the lowest priority while the tests that
# overlap run: those mostly wait and leave CPU idle, and at nice 19 a compiler gets ~1.5 % of a
# core from a busy nice-0 test. Every build has ended before the tests that run alone begin
# (step 5). Each build's output waits in DIR.bg.out and its status in DIR.bg.rc until
# `prebuilt DIR`, which waits for it, reports them.
later_builds() {
  if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
    build build-asan -DFLEETPROF_SANITIZE=address >"$ROOT/build-asan.bg.out" 2>&1
    echo $? >"$ROOT/build-asan.bg.rc"
    build build-tsan -DFLEETPROF_SANITIZE=thread >"$ROOT/build-tsan.bg.out" 2>&1
    echo $? >"$ROOT/build-tsan.bg.rc"
  fi
  if [ "${SKIP_FUZZ:-0}" != 1 ]; then
    CC=clang CXX=clang++ TARGETS="$fuzzers fuzz-seeds" build build-fuzz -DFLEETPROF_FUZZ=ON \
      >"$ROOT/build-fuzz.bg.out" 2>&1
    echo $? >"$ROOT/build-fuzz.bg.rc"
  fi
}
prebuilt() { # prebuilt DIR: waits for the background build of DIR; its errors, if any, and status
  while [ ! -s "$ROOT/$1.bg.rc" ] && kill -0 "$later_pid" 2>/dev/null; do sleep 1; done
  cat "$ROOT/$1.bg.out"
  [ "$(cat "$ROOT/$1.bg.rc" 2>/dev/null)" = 0 ]
}
rm -f "$ROOT"/build-*.bg.rc "$ROOT"/build-*.bg.out

plain_ok=0
step "build" build build && plain_ok=1
nice -n 19 bash -c "$(declare -f build later_builds); ROOT='$ROOT' fuzzers='$fuzzers' \
  SKIP_SANITIZERS='${SKIP_SANITIZERS:-0}' SKIP_FUZZ='${SKIP_FUZZ:-0}' later_builds" &
later_pid=$!
# Steps 2-4: the tests that may overlap others, each build's once it is built.
serial='^serial$' # the label of the tests that run alone (tests/CMakeLists.txt)
[ "$plain_ok" = 1 ] && run_ctest build overlap -LE "long|$serial"

asan_ok=0
tsan_ok=0
if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
  if step "build-asan" prebuilt build-asan; then
    asan_ok=1
    run_ctest build-asan overlap -LE "slow|nosan|$serial"
  fi
  if step "build-tsan" prebuilt build-tsan; then
    tsan_ok=1
    run_ctest build-tsan overlap -LE "slow|nosan|notsan|$serial"
  fi
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  secs=${FUZZ_SECONDS:-40}
  if step "build-fuzz" prebuilt build-fuzz; then
    corpus="$ROOT/build-fuzz/corpus"
    mkdir -p "$corpus"
    "$ROOT/build-fuzz/tests/fuzz/fuzz-seeds" "$corpus"
    # two at a time (one core each), each printing when done
    fuzz_one() {
      local name=$1 target="$ROOT/build-fuzz/tests/fuzz/$1"
      (cd "$ROOT/build-fuzz" && "$target" -max_total_time="$secs" -rss_limit_mb=2048 \
         -max_len=262144 -print_final_stats=1 "$corpus/$name" >"$ROOT/build-fuzz/$name.log" 2>&1)
      local rc=$?
      echo "=== $name for ${secs}s"; tail -15 "$ROOT/build-fuzz/$name.log"
      return $rc
    }
    set -- $fuzzers
    while [ $# -gt 0 ]; do
      pids=(); names=()
      for name in "$1" "${2:-}"; do
        [ -n "$name" ] || continue
        fuzz_one "$name" & pids+=($!); names+=("$name")
      done
      shift $(( $# >= 2 ? 2 : 1 ))
      for i in "${!pids[@]}"; do
        if wait "${pids[$i]}"; then
          passed=$((passed + 1))
        else
          failed=$((failed + 1)); failures+=("${names[$i]} found a crash (see build-fuzz/crash-*)")
        fi
      done
    done
  fi
fi

# Step 5: the tests that measure CPU, rates or noise, one at a time, nothing else running.
wait "$later_pid"
[ "$plain_ok" = 1 ] && run_ctest build serial -L "$serial" -LE long
[ "$asan_ok" = 1 ] && run_ctest build-asan serial -L "$serial" -LE 'slow|nosan'
[ "$tsan_ok" = 1 ] && run_ctest build-tsan serial -L "$serial" -LE 'slow|nosan|notsan'

# The end of the log is what a reader sees first: each failed test's last lines again, per
# build (ctest keeps every test's output in Testing/Temporary/LastTest.log, which run_ctest
# copies to LastTest.PHASE.log before the build's next ctest replaces it).
failed_tails() { # failed_tails DIR
  local tmp="$ROOT/$1/Testing/Temporary" t phase
  for phase in overlap serial; do
    [ -s "$tmp/LastTestsFailed.$phase.log" ] || continue
    while IFS=: read -r _ t; do
      echo "=== $1: $t, last 40 lines"
      awk -v t="$t" '$0 ~ "^[0-9]+/[0-9]+ Testing: " t "$" {on = 1; next}
                     on && index($0, "\"" t "\" end time:") == 1 {exit}
                     on' "$tmp/LastTest.$phase.log" | tail -40
    done <"$tmp/LastTestsFailed.$phase.log"
  done
}
for d in build build-asan build-tsan; do
  case " ${failures[*]} " in *" $d: "*) failed_tails "$d" ;; esac
done
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
