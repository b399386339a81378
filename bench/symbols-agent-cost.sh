#!/usr/bin/env bash
# The agent's symbolization cost (issue 15), measured in its background thread: Debian's
# python3 (11 MB compressed debug file from python3.11-dbg, libc6-dbg) under the agent with
# FLEETPROF_LOG_LEVEL=debug, which logs per chunk the objects opened, the time spent opening
# them and the lookups (one per new location per chunk) with their total time. Prints the
# opening cost, the cost per new location (lookups minus opening), and the process's max RSS,
# with source lines off (default) and on (FLEETPROF_LINES=1), and without the agent.
# Usage: bench/symbols-agent-cost.sh [BUILD_DIR]
set -euo pipefail
B="$(cd "${1:-build}" && pwd)"
PY='import json, re, math
s = 0
for i in range(1500000): s += math.sin(i) * len(str(i))
d = [json.dumps({"a": i, "b": [i] * 5}) for i in range(100000)]
print(len(re.findall(r"\d+", " ".join(d))))'
one() { # label, env...
  local label="$1"; shift
  local log; log="$(mktemp)"
  /usr/bin/time -f "maxrss_kb %M" env "$@" /usr/bin/python3 -c "$PY" >/dev/null 2>"$log"
  python3 - "$label" "$log" <<'P'
import re, sys
lab, path = sys.argv[1], sys.argv[2]
txt = open(path).read()
rss = int(re.search(r"maxrss_kb (\d+)", txt).group(1))
m = re.findall(r"symbols: (\d+) objects opened \((\d+) function symbols\) in (\d+) ns; (\d+) lookups in (\d+) ns", txt)
if not m:
    print("%-22s max RSS %6.1f MB" % (lab, rss / 1024.0)); sys.exit(0)
o, syms, load, n, tot = map(int, m[-1])
print("%-22s max RSS %6.1f MB; %d objects, %d symbols opened in %.1f ms; %d new locations, %.2f us each"
      % (lab, rss / 1024.0, o, syms, load / 1e6, n, (tot - load) / 1e3 / max(n, 1)))
P
  rm -f "$log"
}
A="FLEETPROF_LOG_LEVEL=debug FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=1s LD_PRELOAD=$B/agent/libfleetprof.so"
one "no agent" FLEETPROF_ENABLED=0
# shellcheck disable=SC2086
one "agent, symbols" $A
# shellcheck disable=SC2086
one "agent, symbols+lines" $A FLEETPROF_LINES=1
