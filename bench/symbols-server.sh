#!/usr/bin/env bash
# Runs bench-symbolizer (issue 15): chunks of tests/symwork.stripped and of Debian's python3
# with every frame unnamed (FLEETPROF_DEBUG_DIRS points nowhere), a local debuginfod on port
# 19833 serving their debug files (symwork.debug, libc's and python3's from libc6-dbg and
# python3.11-dbg). Usage: bench/symbols-server.sh [BUILD_DIR]
# BENCH_WRAP=CMD (e.g. valgrind, perf record) runs the benchmark under CMD; BENCH_BIN=PATH runs
# another build of bench-symbolizer (a TSan build) on the same chunks.
set -euo pipefail
B="$(cd "${1:-build}" && pwd)"
S="$(cd "$(dirname "$0")/.." && pwd)"
T="$(mktemp -d /tmp/fp-symbench.XXXXXX)"
trap '"$S/deploy/debuginfod/stop.sh" 19833 >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
bid() { readelf -n "$1" | awk '/Build ID/ {print $3}'; }
mkdir -p "$T/served" "$T/chunks"
cp "$B/tests/symwork.debug" "$T/served/"
for f in /lib/x86_64-linux-gnu/libc.so.6 /usr/bin/python3.11; do
  id="$(bid "$f")"
  cp "/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" "$T/served/$(basename "$f").debug"
done
A="FLEETPROF_DEBUG_DIRS=/nonexistent FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=500ms"
# shellcheck disable=SC2086
env $A FLEETPROF_OUTPUT="$T/chunks" LD_PRELOAD="$B/agent/libfleetprof.so" "$B/tests/symwork.stripped" 3 >/dev/null
# shellcheck disable=SC2086
env $A FLEETPROF_OUTPUT="$T/chunks" LD_PRELOAD="$B/agent/libfleetprof.so" /usr/bin/python3 -c '
import json, re, math
s = 0
for i in range(1500000): s += math.sin(i) * len(str(i))
print(len(re.findall(r"\d+", " ".join(json.dumps({"a": i}) for i in range(100000)))))' >/dev/null
url="$("$S/deploy/debuginfod/start.sh" "$T/served" 19833)"
${BENCH_WRAP:-} "${BENCH_BIN:-$B/bench/bench-symbolizer}" "$T/chunks" "$url" http://127.0.0.1:19834 "$T/cache"
