#!/usr/bin/env bash
# Stops the broker started by start.sh for the same KAFKA_STATE / KAFKA_PORT: SIGTERM (clean
# shutdown), then SIGKILL after $KAFKA_STOP_TIMEOUT s (30). Removes its temp data dir and state,
# unless KAFKA_KEEP_DATA=1: then data dir, ports and state stay for `start.sh --restart`.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (usage: [KAFKA_KEEP_DATA=1] stop.sh)" ;;
esac
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
[[ "$KAFKA_STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "KAFKA_STOP_TIMEOUT='$KAFKA_STOP_TIMEOUT' is not a number"

if [ ! -d "$KAFKA_STATE" ]; then
  say "no broker state in $KAFKA_STATE (nothing to stop)"
  exit 0
fi
exec 9>"$KAFKA_STATE.lock"
flock -w 120 9 || die "timed out waiting for another start.sh/stop.sh on $KAFKA_STATE"

dir="$(cat "$KAFKA_STATE/dir" 2>/dev/null || true)"
if pid="$(kafka_running_pid)"; then
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  while kafka_running_pid >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  if kafka_running_pid >/dev/null; then
    say "broker pid $pid ignored SIGTERM for ${KAFKA_STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kafka_running_pid >/dev/null || break; sleep 0.1; done
    kafka_running_pid >/dev/null && die "broker pid $pid survived SIGKILL"
  fi
  say "stopped broker pid $pid after ${SECONDS}s"
else
  say "broker from $KAFKA_STATE was not running"
fi
rm -f "$KAFKA_STATE/pid"

if [ "${KAFKA_KEEP_DATA:-0}" = 1 ]; then
  say "kept data dir $dir (start.sh --restart resumes it)"
  exit 0
fi
if [ -n "$dir" ] && [ -f "$dir/.fleetprof-kafka" ]; then
  rm -rf "$dir"
elif [ -n "$dir" ] && [ -e "$dir" ]; then
  say "not removing $dir: it lacks the .fleetprof-kafka marker"
fi
clear_state
