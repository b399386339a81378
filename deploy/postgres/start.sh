#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster in DIR on 127.0.0.1 for tests and demos, and prints its
# connection URL as the last line of stdout (progress goes to stderr, so
# URL=$(start.sh DIR) works).
#
#   start.sh DIR   DIR without a cluster: initdb one (user and database 'fleetprof', trust
#                  authentication, loopback only) and start it. DIR with a cluster that
#                  stop.sh left (stopped or killed): start it again on its data and port.
#                  Already running: print the URL.
#
# Env: PG_PORT (15432; a restart keeps the port of the first start), PG_START_TIMEOUT (30 s),
#      PG_FSYNC (on; 'off' for benchmarks that do not test crashes), PG_EXTRA_CONF (extra
#      postgresql.conf lines), PG_BINDIR, PG_OS_USER (postgres; the server's account when run
#      as root).
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

case "${1:-}" in
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") die "missing DIR (usage: start.sh DIR)" ;;
esac
[ $# -eq 1 ] || die "too many arguments (usage: start.sh DIR)"
PG_START_TIMEOUT="${PG_START_TIMEOUT:-30}"
[[ "$PG_START_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "PG_START_TIMEOUT='$PG_START_TIMEOUT' is not a positive integer"
case "${PG_FSYNC:-on}" in on|off) ;; *) die "PG_FSYNC='$PG_FSYNC' must be on or off" ;; esac

mkdir -p "$1" || die "cannot create directory '$1'"
dir="$(cd "$1" && pwd)"
bin="$(pg_bindir)"

exec 9>>"$dir/.lock"
flock -w 60 9 || die "timed out waiting for another start.sh/stop.sh on $dir"

if [ -f "$dir/port" ]; then
  port="$(cat "$dir/port")"
  [ -z "${PG_PORT:-}" ] || [ "$PG_PORT" = "$port" ] || say "note: $dir keeps its port $port (PG_PORT=$PG_PORT ignored)"
else
  port="${PG_PORT:-15432}"
fi
is_port "$port" || die "PG_PORT='$port' is not a TCP port"
url="postgres://fleetprof@127.0.0.1:$port/fleetprof"

if pid="$(pg_running_pid "$dir")"; then
  say "already running (pid $pid, $dir)"
  echo "$url"
  exit 0
fi
port_open "$port" && die "port 127.0.0.1:$port is already in use by another process (set PG_PORT)"

if [ ! -f "$dir/data/PG_VERSION" ]; then
  [ -z "$(ls -A "$dir" | grep -vx '.lock')" ] || die "'$dir' is not empty and holds no cluster; give an empty or new directory"
  touch "$dir/.fleetprof-postgres"  # marker: stop.sh --remove only deletes dirs carrying it
  echo "$port" >"$dir/port"
  [ "$(id -u)" -ne 0 ] || chown "${PG_OS_USER:-postgres}:" "$dir"
  as_pg "$bin/initdb" -D "$dir/data" -U fleetprof --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
    --no-instructions >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed in $dir/data"; }
  cat >>"$dir/data/postgresql.conf" <<CONF
# Written by deploy/postgres/start.sh: a throwaway test cluster, loopback only.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
shared_buffers = 128MB
fsync = ${PG_FSYNC:-on}
logging_collector = off
log_min_messages = warning
${PG_EXTRA_CONF:-}
CONF
  say "initialised a cluster in $dir/data"
fi

# -W: we wait with pg_isready ourselves. 9>&-: the server must not hold our lock.
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -W start >/dev/null 2>"$dir/pg_ctl.err" 9>&- ||
  { cat "$dir/pg_ctl.err" >&2; tail -n 20 "$dir/server.log" >&2 2>/dev/null; die "pg_ctl start failed"; }
deadline=$((SECONDS + PG_START_TIMEOUT))
until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -d fleetprof -U fleetprof 2>/dev/null; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    tail -n 30 "$dir/server.log" >&2 2>/dev/null || true
    p="$(pg_running_pid "$dir")" && kill -KILL "$p" 2>/dev/null
    die "not ready on 127.0.0.1:$port after ${PG_START_TIMEOUT}s (log: $dir/server.log)"
  fi
  sleep 0.1
done
# the database (first start only; 'postgres' always exists to connect to)
if ! psql -X -q -h 127.0.0.1 -p "$port" -U fleetprof -d postgres -tAc \
     "SELECT 1 FROM pg_database WHERE datname = 'fleetprof'" | grep -q 1; then
  psql -X -q -h 127.0.0.1 -p "$port" -U fleetprof -d postgres -c "CREATE DATABASE fleetprof" >/dev/null ||
    die "cannot create database fleetprof"
fi
say "ready on 127.0.0.1:$port (pid $(pg_running_pid "$dir"), data $dir/data)"
echo "$url"
