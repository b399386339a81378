#!/bin/sh
# redis-server's CPU per request with and without the agent (issue 14's benchmark; target at
# most 1% more), measured paired: two Debian redis-servers run side by side for the whole
# benchmark, one bare, one with the agent preloaded (default settings unless AGENT_ENV; no
# collector, chunks to a temporary directory), both pinned to core SERVER_CPU, redis-benchmark
# pinned to core LOAD_CPU. After a warm-up burst each (the agent's start and first table build
# are left out: a one-time cost, printed apart), PAIRS pairs of bursts: a burst sends REQUESTS
# requests of each of set,get,lpush,incr (-c 20, no pipelining) to one server; the two bursts
# of a pair run at the same time (two redis-benchmarks), so the co-tenants' load and the
# machine's state hit both servers alike (which starts first alternates; SERIAL=1: one after the other, A/B then B/A). Per pair, each server's CPU (utime+stime of every thread, the agent's included:
# /proc/PID/task/*/schedstat in ns; /proc/PID/stat's 10 ms ticks are printed beside it) over the
# whole pair (so the agent's idle-time background work is counted) divided by the requests it
# served (INFO's total_commands_processed); the pair's ratio agent/bare. Prints every ratio, the
# geometric mean and its 95% confidence interval (t on the log ratios), and the control runs'
# figure when CONTROL=1 (a second bare server in the agent's place: what the method reads when
# there is no difference). Then both idle for IDLE seconds (default 10): the agent's fixed
# cost per second, which a lightly loaded server divides by few requests.
#
#   bench/redis-cpu.sh BUILD_DIR [PAIRS [REQUESTS]]   (default 16 pairs, 25000 requests per test)
#   AGENT_ENV="FLEETPROF_IO=0 ..."   settings for the agent's server (ablation)
#   CONTROL=1                        both servers bare (A/A control)
#   B_AGENT=/path/libfleetprof.so    server B runs under this agent (e.g. a build before a change,
#                                    same settings as A's) instead of bare: A/B is then after/before
#   B_AGENT_ENV="..."                with B_AGENT: B's settings instead of A's (A/B of two settings)
#   PORT_A=16381 PORT_B=16382        the servers' ports (two benchmarks at once on one host)
set -eu
BUILD=$(cd "$1" && pwd)
PAIRS=${2:-16}
REQS=${3:-25000}
AGENT=$BUILD/agent/libfleetprof.so
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PA=${PORT_A:-16381}
PB=${PORT_B:-16382}
TMP=$(mktemp -d)
APID=
BPID=
cleanup() {
    [ -z "$APID" ] || kill -TERM "$APID" 2> /dev/null || true
    [ -z "$BPID" ] || kill -TERM "$BPID" 2> /dev/null || true
    wait 2> /dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

REDIS="/usr/bin/redis-server --save '' --appendonly no"
if [ "${CONTROL:-0}" = 1 ]; then
    sh -c "exec taskset -c $SERVER_CPU $REDIS --port $PA" > "$TMP/a.log" 2>&1 &
else
    sh -c "exec env FLEETPROF_COLLECTOR=none FLEETPROF_OUTPUT=$TMP ${AGENT_ENV:-} LD_PRELOAD=$AGENT \
        taskset -c $SERVER_CPU $REDIS --port $PA" > "$TMP/a.log" 2>&1 &
fi
APID=$!
if [ -n "${B_AGENT:-}" ]; then
    mkdir -p "$TMP/b"
    sh -c "exec env FLEETPROF_COLLECTOR=none FLEETPROF_OUTPUT=$TMP/b ${B_AGENT_ENV-${AGENT_ENV:-}} LD_PRELOAD=$B_AGENT \
        taskset -c $SERVER_CPU $REDIS --port $PB" > "$TMP/b.log" 2>&1 &
else
    sh -c "exec taskset -c $SERVER_CPU $REDIS --port $PB" > "$TMP/b.log" 2>&1 &
fi
BPID=$!
for p in $PA $PB; do
    i=0
    until redis-cli -p $p ping > /dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "redis on $p did not start" >&2; exit 1; }
        sleep 0.05
    done
done

cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'; }
# the agent's background thread alone (0 without the agent)
bg_ns() {
    for t in /proc/"$1"/task/*; do
        [ "$(cat "$t"/comm)" = fleetprof ] && awk '{print $1}' "$t"/schedstat && return
    done
    echo 0
}
ticks() { awk '{print $14 + $15}' /proc/"$1"/stat; }
cmds() { redis-cli -p "$1" info stats | tr -d '\r' | awk -F: '$1 == "total_commands_processed" {print $2}'; }
burst() { taskset -c $LOAD_CPU redis-benchmark -p "$1" -n "$REQS" -c 20 -q -t set,get,lpush,incr > /dev/null; }

burst $PA
burst $PB
echo "after start and one warm-up burst: server A ($([ "${CONTROL:-0}" = 1 ] && echo bare || echo agent)) $(cpu_ns $APID) ns, B (${B_AGENT:-bare}) $(cpu_ns $BPID) ns"
r=0
: > "$TMP/ratios"
while [ $r -lt "$PAIRS" ]; do
    a0=$(cpu_ns $APID); b0=$(cpu_ns $BPID); ta0=$(ticks $APID); tb0=$(ticks $BPID); g0=$(bg_ns $APID)
    ca0=$(cmds $PA); cb0=$(cmds $PB)
    if [ "${SERIAL:-0}" = 1 ]; then
        if [ $((r % 2)) = 0 ]; then burst $PA; burst $PB; else burst $PB; burst $PA; fi
    else
        if [ $((r % 2)) = 0 ]; then burst $PA & w=$!; burst $PB; else burst $PB & w=$!; burst $PA; fi
        wait $w
    fi
    a1=$(cpu_ns $APID); b1=$(cpu_ns $BPID); ta1=$(ticks $APID); tb1=$(ticks $BPID); g1=$(bg_ns $APID)
    ca1=$(cmds $PA); cb1=$(cmds $PB)
    echo "$a0 $a1 $ca0 $ca1 $b0 $b1 $cb0 $cb1 $ta0 $ta1 $tb0 $tb1 $g0 $g1" | awk -v r=$r '{
        pa = ($2 - $1) / ($4 - $3); pb = ($6 - $5) / ($8 - $7); pg = ($14 - $13) / ($4 - $3)
        printf "pair %2d: A %.0f ns/request (%d; its background thread %.0f), B %.0f ns/request (%d), ratio %.4f, without the background thread %.4f (stat ticks A %d, B %d)\n",
               r, pa, $4 - $3, pg, pb, $8 - $7, pa / pb, (pa - pg) / pb, $10 - $9, $12 - $11 }'
    echo "$a0 $a1 $ca0 $ca1 $b0 $b1 $cb0 $cb1 $g0 $g1" |
        awk '{ pa = ($2 - $1) / ($4 - $3); pb = ($6 - $5) / ($8 - $7); pg = ($10 - $9) / ($4 - $3)
               print pa / pb, (pa - pg) / pb }' >> "$TMP/ratios"
    r=$((r + 1))
done
awk -v reqs="$REQS" '
    BEGIN { split("12.71 4.30 3.18 2.78 2.57 2.45 2.36 2.31 2.26 2.23 2.20 2.18 2.16 2.14 2.13 2.12 2.11 2.10 2.09 2.09 2.08 2.07 2.07 2.06 2.06 2.06 2.05 2.05 2.05 2.04", t, " ") }
    { l[NR] = log($1); s += l[NR]; k[NR] = log($2); sk += k[NR] }
    END { n = NR; m = s / n; mk = sk / n
          for (i = 1; i <= n; i++) { v += (l[i] - m) ^ 2; vk += (k[i] - mk) ^ 2 }
          se = sqrt(v / (n - 1) / n); sek = sqrt(vk / (n - 1) / n)
          q = n - 1 <= 30 ? t[n - 1] : 1.96
          printf "A/B CPU per request (%d requests x 4 tests a burst): geometric mean %+.2f%%, 95%% CI %+.2f%%..%+.2f%% over %d pairs\n",
                 reqs, 100 * (exp(m) - 1), 100 * (exp(m - q * se) - 1), 100 * (exp(m + q * se) - 1), n
          printf "  without A'"'"'s background thread: %+.2f%%, 95%% CI %+.2f%%..%+.2f%%\n",
                 100 * (exp(mk) - 1), 100 * (exp(mk - q * sek) - 1), 100 * (exp(mk + q * sek) - 1) }' "$TMP/ratios"
# The agent's fixed cost: both servers idle for IDLE seconds (their own timers run: redis'
# serverCron at 10 Hz; the agent's background ticks and wall samples of the blocked thread).
IDLE=${IDLE:-10}
a0=$(cpu_ns $APID); b0=$(cpu_ns $BPID); g0=$(bg_ns $APID); h0=$(bg_ns $BPID)
sleep "$IDLE"
a1=$(cpu_ns $APID); b1=$(cpu_ns $BPID); g1=$(bg_ns $APID); h1=$(bg_ns $BPID)
echo "$a0 $a1 $b0 $b1 $g0 $g1 $h0 $h1" | awk -v s="$IDLE" '{
    printf "idle %d s: A %.3f ms/s (its background thread %.3f ms/s), B %.3f ms/s (%.3f)\n",
           s, ($2 - $1) / s / 1e6, ($6 - $5) / s / 1e6, ($4 - $3) / s / 1e6, ($8 - $7) / s / 1e6 }'
