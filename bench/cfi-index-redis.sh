#!/bin/bash
# Issue 14, session 11: the handler's CFI lookups in Debian redis-server under redis-benchmark,
# two agents alternating (e.g. before/after a change), their share of redis-server's samples in
# `perf record -F 15000` (ag_cfi_find / ag_cfi_find_idx, and ag_unwind, which reads the row).
#
#   bench/cfi-index-redis.sh AGENT_BEFORE AGENT_AFTER [PAIRS]
#
# redis-server on core 0 with the agent (FLEETPROF_COLLECTOR=none), redis-benchmark on core 1
# (-n 2000000 -c 20 -t set,get,lpush,incr), perf record -p for 8 s once the load runs.
set -u
A=$1 B=$2 PAIRS=${3:-7}
D=$(mktemp -d /tmp/cfi-index-redis.XXXXXX)
run() { # run AGENT PORT TAG
    local out=$D/$3
    mkdir -p "$out"
    FLEETPROF_COLLECTOR=none FLEETPROF_OUTPUT=$out LD_PRELOAD=$1 taskset -c 0 \
        /usr/bin/redis-server --port "$2" --save "" --appendonly no >"$out/redis.log" 2>&1 &
    local rpid=$!
    sleep 1.5
    taskset -c 1 redis-benchmark -p "$2" -n 2000000 -c 20 -t set,get,lpush,incr -q \
        >"$out/bench.log" 2>&1 &
    local bpid=$!
    sleep 1
    perf record -q -F 15000 -p $rpid -o "$out/perf.data" -- sleep 8 2>/dev/null
    kill $bpid 2>/dev/null; wait $bpid 2>/dev/null
    kill $rpid; wait $rpid 2>/dev/null
    perf report -i "$out/perf.data" --comm redis-server --no-children --sort sym -n --stdio \
        --percent-limit 0 2>/dev/null |
        awk -v t="$3" '/^ +[0-9.]+% +[0-9]+ /{n+=$2} /\] ag_cfi_find/{f+=$2} /\] ag_unwind$/{u+=$2}
            END{printf "%s %d %d %d\n", t, n, f, u}' >>"$D/summary"
}
for i in $(seq "$PAIRS"); do
    run "$A" 19993 "before$i"
    run "$B" 19994 "after$i"
done
awk '{k=$1; sub(/[0-9]+$/,"",k)
      n[k]+=$2; f[k]+=$3; u[k]+=$4; printf "%s: %d samples, find %.3f%%, unwind %.3f%%\n", $1, $2,
      100*$3/$2, 100*$4/$2}
     END{for (k in n) printf "%s in all: find %.3f%%, unwind %.3f%%, both %.3f%% (%d samples)\n",
      k, 100*f[k]/n[k], 100*u[k]/n[k], 100*(f[k]+u[k])/n[k], n[k]}' "$D/summary"
echo "data: $D"
