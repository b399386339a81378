#!/bin/bash
# Agent overhead on a JVM (OpenJDK 17) beside async-profiler 4.1's, interleaved rounds in one
# invocation: tests/java/Work.java doing a fixed amount of work (ROUNDS_OF_WORK rounds of
# fib/sieve/strings/sort on one thread), the JVM process's CPU time (user+sys, every thread:
# profilers' own threads included) bare, under the agent (documented flags; its default rate,
# and 1 kHz with the controller off; "nohooks": default rate, allocation/lock/I/O hooks off)
# and under async-profiler (ctimer, its default 10 ms and 1 ms). Prints each round and the
# medians, and each mode's median over bare's. MODES="bare agent ..." picks modes.
# Usage: bench/java/overhead.sh BUILD_DIR [ROUNDS=5] [ROUNDS_OF_WORK=150]
set -eu
build=$(cd "$1" && pwd); rounds=${2:-5}; work=${3:-150}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../tests/java" && pwd)
jdk=/usr/lib/jvm/java-17-openjdk-amd64/bin
ap=$("$src/async-profiler.sh")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$jdk/javac" -d "$out/classes" "$src/Work.java"
agent="$build/agent/libfleetprof.so"
dns=(-XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints)
read -r -a modes <<<"${MODES:-bare agent agent1k ap ap1ms}"
one() { # mode -> "cpu_s"
    local env=(FLEETPROF_OUTPUT="$out/fpc" FLEETPROF_COLLECTOR=none) args=()
    case $1 in
    bare) env=() ;;
    agent) env+=(LD_PRELOAD="$agent"); args=(-agentpath:"$agent" "${dns[@]}") ;;
    nohooks) env+=(LD_PRELOAD="$agent" FLEETPROF_ALLOC=0 FLEETPROF_LOCK=0 FLEETPROF_IO=0)
             args=(-agentpath:"$agent" "${dns[@]}") ;;
    agent1k) env+=(LD_PRELOAD="$agent" FLEETPROF_CPU_HZ=1000 FLEETPROF_CPU_RATE=2000
                   FLEETPROF_CONTROLLER=0); args=(-agentpath:"$agent" "${dns[@]}") ;;
    ap) args=(-agentpath:"$ap=start,event=ctimer,collapsed,file=$out/ap.txt") ;;
    ap1ms) args=(-agentpath:"$ap=start,event=ctimer,interval=1000000,collapsed,file=$out/ap.txt") ;;
    esac
    mkdir -p "$out/fpc"
    /usr/bin/time -f "%U %S" -o "$out/time" env "${env[@]}" "$jdk/java" "${args[@]}" \
        -cp "$out/classes" Work "${work}i" 0 >/dev/null 2>&1
    rm -rf "$out/fpc" "$out/ap.txt"
    awk '{printf "%.3f\n", $1 + $2}' "$out/time"
}
declare -A cpu
for m in "${modes[@]}"; do cpu[$m]=""; done
for r in $(seq "$rounds"); do
    for m in "${modes[@]}"; do
        c=$(one "$m")
        cpu[$m]+="$c "
        echo "round $r $m: ${c} s CPU"
    done
done
med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
base=$(echo "${cpu[bare]}" | med)
for m in "${modes[@]}"; do
    v=$(echo "${cpu[$m]}" | med)
    awk -v m="$m" -v v="$v" -v b="$base" 'BEGIN { printf "%-8s median %.3f s CPU  %+.1f %% over bare\n", m, v, (v / b - 1) * 100 }'
done
