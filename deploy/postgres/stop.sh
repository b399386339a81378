#!/usr/bin/env bash
# Stops the cluster that start.sh runs in DIR.
#
#   stop.sh DIR             clean shutdown (pg_ctl -m fast: sessions ended, checkpoint), data kept
#   stop.sh DIR --kill      SIGKILL the postmaster and its backends (a crash; the next start
#                           recovers from the WAL), data kept
#   stop.sh DIR --remove    clean shutdown, then delete DIR (only a DIR that start.sh made)
#
# Env: PG_STOP_TIMEOUT (30 s, then SIGKILL), PG_BINDIR, PG_OS_USER. Exits 0 if not running.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage="usage: stop.sh DIR [--kill|--remove]"
case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") die "missing DIR ($usage)" ;;
esac
mode="${2:-}"
case "$mode" in ""|--kill|--remove) ;; *) die "unknown argument '$mode' ($usage)" ;; esac
[ $# -le 2 ] || die "too many arguments ($usage)"
PG_STOP_TIMEOUT="${PG_STOP_TIMEOUT:-30}"
[[ "$PG_STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "PG_STOP_TIMEOUT='$PG_STOP_TIMEOUT' is not a number"
[ -d "$1" ] || { say "no directory $1 (nothing to stop)"; exit 0; }
dir="$(cd "$1" && pwd)"
[ -f "$dir/.fleetprof-postgres" ] || die "'$dir' was not made by deploy/postgres/start.sh"

exec 9>>"$dir/.lock"
flock -w 60 9 || die "timed out waiting for another start.sh/stop.sh on $dir"

# every process of the cluster: the postmaster and its children (backends, walwriter, ...)
# (and waits until they are gone: the next postmaster refuses to start while the old pid lives)
kill_all() {
  local p="$1" kids k
  kids="$(pgrep -P "$p" || true)"
  # shellcheck disable=SC2086  # one pid per word
  kill -KILL "$p" $kids 2>/dev/null || true
  for k in "$p" $kids; do
    for _ in $(seq 200); do kill -0 "$k" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$k" 2>/dev/null && die "pid $k survived SIGKILL"
  done
  return 0
}

if pid="$(pg_running_pid "$dir")"; then
  if [ "$mode" = --kill ]; then
    kill_all "$pid"
    say "killed pid $pid"
  else
    as_pg "$(pg_bindir)/pg_ctl" -D "$dir/data" -m fast -W stop >/dev/null 2>&1 9>&- || true
    deadline=$((SECONDS + PG_STOP_TIMEOUT))
    while pg_alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if pg_alive "$pid"; then
      say "pid $pid did not stop in ${PG_STOP_TIMEOUT}s; sending SIGKILL"
      kill_all "$pid"
    fi
    say "stopped pid $pid"
  fi
else
  say "the cluster in $dir was not running"
fi
if [ "$mode" = --remove ]; then
  exec 9>&-
  rm -rf "$dir"
fi
