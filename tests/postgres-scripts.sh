#!/usr/bin/env bash
# test-postgres-scripts: deploy/postgres/start.sh and stop.sh on a real cluster (port 15432):
# initdb + start + URL, loopback only, data kept across a clean stop and across a SIGKILL
# (crash recovery), precise errors (port in use, a foreign directory), --remove leaves no
# process and no directory.
set -euo pipefail
src="${FLEETPROF_SRC:-$(cd "$(dirname "$0")/.." && pwd)}"
start="$src/deploy/postgres/start.sh"; stop="$src/deploy/postgres/stop.sh"
port=15432
dir="$(mktemp -d -u "${TMPDIR:-/tmp}/fp-pgtest.XXXXXX")"
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
cleanup() { "$stop" "$dir" --remove >/dev/null 2>&1 || true; rm -rf "$dir.other"; }
trap cleanup EXIT

sql() { psql -X -q -tA -v ON_ERROR_STOP=1 "$url" -c "$1"; }

url="$(PG_PORT=$port "$start" "$dir")"
[ "$url" = "postgres://fleetprof@127.0.0.1:$port/fleetprof" ] && ok "URL $url" || bad "URL '$url'"
[ "$(sql 'SELECT 6*7')" = 42 ] && ok "query answered" || bad "query"
listen="$(ss -Htln "sport = :$port" | awk '{print $4}' | sort -u | tr '\n' ' ')"
[ "$listen" = "127.0.0.1:$port " ] && ok "listens on loopback only ($listen)" || bad "listens on '$listen'"
sql "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)"

# already running: same URL, nothing restarted
pid="$(head -n 1 "$dir/data/postmaster.pid")"
[ "$(PG_PORT=$port "$start" "$dir" 2>/dev/null)" = "$url" ] && [ "$(head -n 1 "$dir/data/postmaster.pid")" = "$pid" ] &&
  ok "start on a running cluster is a no-op" || bad "second start"

# port in use by someone else: a second cluster on the same port fails, naming the port
if out="$(PG_PORT=$port "$start" "$dir.other" 2>&1)"; then bad "second cluster on a used port started"
else grep -q "port 127.0.0.1:$port is already in use" <<<"$out" && ok "port in use: $out" || bad "port in use message: $out"; fi

# a directory holding something else is refused
mkdir -p "$dir.other"; rm -rf "$dir.other"/*; touch "$dir.other/precious"
if out="$(PG_PORT=15441 "$start" "$dir.other" 2>&1)"; then bad "started in a foreign dir"
else grep -q "is not empty and holds no cluster" <<<"$out" && [ -f "$dir.other/precious" ] && ok "foreign dir refused" || bad "foreign dir: $out"; fi

# clean stop, start again: data kept, same port
"$stop" "$dir" 2>/dev/null
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null; }
. "$src/deploy/postgres/common.sh"
! port_open $port && ! pg_alive "$pid" && ok "stopped (pid $pid gone, port closed)" || bad "still running after stop"
[ "$(PG_PORT=15441 "$start" "$dir" 2>/dev/null)" = "$url" ] && ok "restart keeps port $port" || bad "restart URL"
[ "$(sql 'SELECT sum(x) FROM t')" = 3 ] && ok "data kept across a clean stop" || bad "data after clean stop"

# crash: SIGKILL with a committed transaction, then start recovers it
sql "INSERT INTO t VALUES (4)"
pid="$(head -n 1 "$dir/data/postmaster.pid")"
"$stop" "$dir" --kill 2>/dev/null
! kill -0 "$pid" 2>/dev/null && ! pgrep -f -- "-D $dir/data" >/dev/null && ok "killed" || bad "survived --kill"
"$start" "$dir" >/dev/null 2>&1
[ "$(sql 'SELECT sum(x) FROM t')" = 7 ] && ok "committed data recovered after SIGKILL" || bad "data after kill"
grep -q "database system was interrupted\|not properly shut down" "$dir/server.log" && ok "server log shows crash recovery" || bad "no crash recovery in log"

"$stop" "$dir" --remove 2>/dev/null
[ ! -e "$dir" ] && ! port_open $port && ok "--remove: directory and server gone" || bad "--remove"
"$stop" "$dir" 2>/dev/null && ok "stop of nothing exits 0" || bad "stop of nothing"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
