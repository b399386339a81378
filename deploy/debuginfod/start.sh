#!/usr/bin/env bash
# Starts Debian's debuginfod on loopback, serving the ELF/DWARF files under DIR, and waits until
# its first scan is done. Usage: start.sh DIR [PORT]   (PORT: $DEBUGINFOD_PORT or 19830)
# State (pid, database, log) in $DEBUGINFOD_STATE (default /tmp/fleetprof-debuginfod-PORT);
# prints the URL to put in DEBUGINFOD_URLS / --debuginfod-urls. stop.sh stops it.
set -euo pipefail
die() { echo "debuginfod/start.sh: $*" >&2; exit 1; }
case "${1:-}" in -h|--help|"") sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ]; exit $? ;; esac
DIR="$(cd "$1" && pwd)" || die "no directory '$1'"
PORT="${2:-${DEBUGINFOD_PORT:-19830}}"
[[ "$PORT" =~ ^[0-9]+$ ]] || die "port '$PORT' is not a number"
STATE="${DEBUGINFOD_STATE:-/tmp/fleetprof-debuginfod-$PORT}"
command -v debuginfod >/dev/null || die "debuginfod is not installed (deploy/install-deps.sh installs it)"
mkdir -p "$STATE"
if [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
  die "already running (pid $(cat "$STATE/pid")); stop.sh first"
fi
rm -f "$STATE/db" "$STATE/db-wal" "$STATE/db-shm"
# -F: scan DIR for ELF/DWARF files; -t 0: scan once; loopback only (no other listeners).
setsid debuginfod -F -t 0 -g 0 -d "$STATE/db" -p "$PORT" "$DIR" >"$STATE/log" 2>&1 </dev/null &
echo $! >"$STATE/pid"
url="http://127.0.0.1:$PORT"
nfiles="$(find "$DIR" -type f | wc -l)"
deadline=$((SECONDS + ${DEBUGINFOD_START_TIMEOUT:-30}))
while :; do
  kill -0 "$(cat "$STATE/pid")" 2>/dev/null || die "debuginfod exited; see $STATE/log"
  m="$(curl -s --max-time 2 "$url/metrics" || true)"
  # the first scan is done when every file of DIR was scanned and no scan work is pending
  scanned="$(echo "$m" | awk '/^scanned_files_total/ {s += $2} END {print s + 0}')"
  if [ "$scanned" -ge "$nfiles" ] &&
     ! echo "$m" | grep -Eq '^thread_work_pending\{role="scan"\} [1-9]'; then
    break
  fi
  [ "$SECONDS" -lt "$deadline" ] || die "not ready after ${DEBUGINFOD_START_TIMEOUT:-30}s; see $STATE/log"
  sleep 0.2
done
echo "$url"
