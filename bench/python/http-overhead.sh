#!/bin/bash
# Agent overhead on a Python HTTP server (issue 34): Debian's python3 running server.py, bare,
# under the agent with Python frames off (FLEETPROF_PYTHON=0) and on (default), interleaved
# rounds in one invocation; the server's CPU per request (utime+stime from /proc, client
# excluded) and the client's requests/s.
# Usage: bench/python/http-overhead.sh BUILD_DIR [ROUNDS=5] [REQUESTS_PER_CONN=1500] [CONNS=4]
set -eu
build=$(cd "$1" && pwd); rounds=${2:-5}; reqs=${3:-1500}; conns=${4:-4}
here=$(cd "$(dirname "$0")" && pwd)
tick=$(getconf CLK_TCK)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() { # mode -> "cpu_us_per_req req_per_s"
    local mode=$1 env=()
    case $mode in
    bare) env=() ;;
    off) env=(LD_PRELOAD="$build/agent/libfleetprof.so" FLEETPROF_OUTPUT="$out" FLEETPROF_COLLECTOR=none FLEETPROF_PYTHON=0) ;;
    on) env=(LD_PRELOAD="$build/agent/libfleetprof.so" FLEETPROF_OUTPUT="$out" FLEETPROF_COLLECTOR=none) ;;
    esac
    coproc SRV { exec env "${env[@]}" /usr/bin/python3 "$here/server.py"; }
    local pid=$SRV_PID port
    read -r port <&"${SRV[0]}"
    /usr/bin/python3 "$here/client.py" "$port" 50 1 >/dev/null # warm-up
    local s0 t0 s1 t1 n
    s0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
    n=$(/usr/bin/python3 "$here/client.py" "$port" "$reqs" "$conns")
    s1=$(awk '{print $14+$15}' /proc/$pid/stat); t1=$(date +%s.%N)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -f "$out"/*.fpc
    awk -v a="$s0" -v b="$s1" -v n="$n" -v hz="$tick" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.1f %.0f\n", (b - a) / hz * 1e6 / n, n / (t1 - t0) }'
}
declare -A cpu rps
for m in bare off on; do cpu[$m]=""; rps[$m]=""; done
for r in $(seq "$rounds"); do
    for m in bare off on; do
        read -r c q < <(one "$m")
        cpu[$m]+="$c "; rps[$m]+="$q "
        echo "round $r $m: ${c} us CPU/request, ${q} requests/s"
    done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for m in bare off on; do
    echo "median $m: $(echo ${cpu[$m]} | med) us CPU/request, $(echo ${rps[$m]} | med) requests/s"
done
