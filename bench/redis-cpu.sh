#!/bin/sh
# redis-server's CPU per request with and without the agent (issue 14's benchmark; target at
# most 1% more): ROUNDS rounds, each running Debian's redis-server bare and with the agent
# preloaded at default settings (no collector, chunks to a temporary directory), the order
# swapped every round, under the same redis-benchmark load. The server's CPU (all its threads,
# the agent's included: /proc/PID/task/*/schedstat, ns, just before it is stopped) per
# request; prints each round's ratio and the median and quartiles of the ratios.
#
#   bench/redis-cpu.sh BUILD_DIR [ROUNDS [REQUESTS]]   (default 11 rounds, 200000 requests)
#   AGENT_ENV="FLEETPROF_IO=0 ..." adds settings to the agent runs (ablation)
set -eu
BUILD=$(cd "$1" && pwd)
ROUNDS=${2:-11}
REQS=${3:-200000}
AGENT=$BUILD/agent/libfleetprof.so
PORT=16380
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# one run: prints the server's CPU in clock ticks
run() { # with_agent(0|1)
    if [ "$1" = 1 ]; then
        env FLEETPROF_COLLECTOR=none FLEETPROF_OUTPUT="$TMP" ${AGENT_ENV:-} LD_PRELOAD="$AGENT" \
            /usr/bin/redis-server --port $PORT --save '' --appendonly no > "$TMP/log" 2>&1 &
    else
        /usr/bin/redis-server --port $PORT --save '' --appendonly no > "$TMP/log" 2>&1 &
    fi
    pid=$!
    i=0
    until redis-cli -p $PORT ping > /dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "redis did not start" >&2; exit 1; }
        sleep 0.05
    done
    redis-benchmark -p $PORT -n "$REQS" -c 20 -q -t set,get,lpush,incr > /dev/null
    # CPU time of every thread (ns; the agent's included): first field of each schedstat
    cpu=$(cat /proc/$pid/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}')
    kill -TERM $pid
    wait $pid || true
    rm -f "$TMP"/*.fpc
    echo "$cpu"
}

ratios=""
r=0
while [ $r -lt "$ROUNDS" ]; do
    if [ $((r % 2)) = 0 ]; then
        b=$(run 0)
        a=$(run 1)
    else
        a=$(run 1)
        b=$(run 0)
    fi
    ratio=$(echo "$a $b" | awk '{printf "%.4f", $1 / $2}')
    echo "round $r: base $b ns, agent $a ns, ratio $ratio"
    ratios="$ratios $ratio"
    r=$((r + 1))
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n | awk -v reqs="$REQS" '
    { v[NR] = $1 }
    END { n = NR; m = v[int((n + 1) / 2)]; q1 = v[int((n + 3) / 4)]; q3 = v[int((3 * n + 1) / 4)];
          printf "agent/base CPU per request (%d requests x 4 tests): median %+.2f%%, quartiles %+.2f%%..%+.2f%%, min %+.2f%%, max %+.2f%% over %d rounds\n",
                 reqs, 100 * (m - 1), 100 * (q1 - 1), 100 * (q3 - 1), 100 * (v[1] - 1), 100 * (v[n] - 1), n }'
