# shellcheck shell=bash disable=SC2034  # (variables here are used by the scripts sourcing this)
# Shared settings for deploy/postgres/*.sh. Sourced, not run.

die() { echo "postgres: error: $*" >&2; exit 1; }
say() { echo "postgres: $*" >&2; }

# The server binaries (initdb, pg_ctl, postgres, pg_isready): $PG_BINDIR, else the newest
# /usr/lib/postgresql/*/bin (Debian keeps them off PATH), else PATH.
pg_bindir() {
  local d
  if [ -n "${PG_BINDIR:-}" ]; then
    [ -x "$PG_BINDIR/pg_ctl" ] || die "PG_BINDIR='$PG_BINDIR' has no pg_ctl"
    echo "$PG_BINDIR"; return
  fi
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return; fi
  d="$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/pg_ctl)")"
  [ -x "$d/pg_ctl" ] || die "PostgreSQL server binaries not found (install Debian's 'postgresql', or set PG_BINDIR)"
  echo "$d"
}

# PostgreSQL refuses to run as root: as root, the server runs as $PG_OS_USER (postgres, the
# account Debian's package creates) and owns the cluster directory.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    local u="${PG_OS_USER:-postgres}"
    id "$u" >/dev/null 2>&1 || die "running as root, and the account '$u' to run PostgreSQL as does not exist (set PG_OS_USER)"
    setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"
  else
    "$@"
  fi
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() {
  # shellcheck disable=SC2016  # $1 is expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

is_port() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }

# The postmaster's pid when the cluster in $1 is running (postmaster.pid and a live process
# whose data directory it is), else fails.
pg_running_pid() {
  local pid
  [ -f "$1/data/postmaster.pid" ] || return 1
  pid="$(head -n 1 "$1/data/postmaster.pid")"
  [[ "$pid" =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' '\n' < "/proc/$pid/cmdline" | grep -qxF "$1/data" || return 1
  echo "$pid"
}

# True while process $1 exists and is not a zombie (a postmaster that exited is reaped by init
# a moment later).
pg_alive() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
