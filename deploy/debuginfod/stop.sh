#!/usr/bin/env bash
# Stops the debuginfod that start.sh started on PORT ($DEBUGINFOD_PORT or 19830) and removes
# its state directory. Usage: stop.sh [PORT]
set -euo pipefail
PORT="${1:-${DEBUGINFOD_PORT:-19830}}"
STATE="${DEBUGINFOD_STATE:-/tmp/fleetprof-debuginfod-$PORT}"
if [ -f "$STATE/pid" ]; then
  pid="$(cat "$STATE/pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -rf "$STATE"
