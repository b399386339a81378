#!/usr/bin/env bash
# Share of CPU weight on unnamed frames under the agent (issue 15), for Debian's gzip, python3
# and redis-server: each runs a CPU-bound load under libfleetprof.so (chunk files), `fleetprof
# fold` names the frames, and a frame is unnamed when it is "module+0xADDR" or "0xADDR".
# Two figures per program: the weight whose leaf frame is unnamed, and the weight of stacks
# with any unnamed frame. Usage: bench/symbols-unnamed.sh [BUILD_DIR] (default ./build)
set -euo pipefail
B="$(cd "${1:-build}" && pwd)"
T="$(mktemp -d /tmp/fp-unnamed.XXXXXX)"
trap 'rm -rf "$T"; [ -n "${RPID:-}" ] && kill "$RPID" 2>/dev/null || true' EXIT
AGENT="FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=1s FLEETPROF_CPU_RATE=400 FLEETPROF_CPU_HZ=400"
share() { # folded file -> "leaf% any%"
  python3 - "$1" <<'PY'
import re, sys
un = re.compile(r'(\+0x[0-9a-f]+|^0x[0-9a-f]+|^\[unknown\])$')
tot = leaf = anyw = 0
top = {}
for l in open(sys.argv[1]):
    st, v = l.rsplit(' ', 1); v = int(v); fr = st.split(';')
    tot += v
    if un.search(fr[-1]): leaf += v; top[fr[-1]] = top.get(fr[-1], 0) + v
    if any(un.search(f) for f in fr): anyw += v
print("%.2f%% %.2f%% of %.2fs" % (100.0 * leaf / tot, 100.0 * anyw / tot, tot / 1e9), end='')
t = sorted(top.items(), key=lambda x: -x[1])[:3]
print("  top unnamed leaves: " + ", ".join("%s %.1f%%" % (k, 100.0 * v / tot) for k, v in t))
PY
}
run() { # name, command...
  local name="$1"; shift
  mkdir -p "$T/$name"
  env $AGENT FLEETPROF_OUTPUT="$T/$name" LD_PRELOAD="$B/agent/libfleetprof.so" "$@" >/dev/null
}
head -c 40000000 /dev/urandom | base64 > "$T/text"
run gzip /usr/bin/gzip -6 -c "$T/text"
run python3 /usr/bin/python3 -c '
import json, re, math
s = 0
for i in range(2000000): s += math.sin(i) * len(str(i))
d = [json.dumps({"a": i, "b": [i] * 5}) for i in range(200000)]
print(len(re.findall(r"\d+", " ".join(d))))'
mkdir -p "$T/redis"
env $AGENT FLEETPROF_OUTPUT="$T/redis" LD_PRELOAD="$B/agent/libfleetprof.so" \
  /usr/bin/redis-server --port 19839 --save '' --appendonly no >/dev/null &
RPID=$!
for _ in $(seq 50); do redis-cli -p 19839 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p 19839 -n 200000 -q -t set,get,lpush,lpop,incr >/dev/null
redis-cli -p 19839 shutdown nosave >/dev/null 2>&1 || true
wait "$RPID" || true
RPID=
for p in gzip python3 redis; do
  "$B/cli/fleetprof" fold "$T/$p" > "$T/$p.folded"
  printf '%-8s leaf unnamed / stacks with an unnamed frame: %s\n' "$p" "$(share "$T/$p.folded")"
done
