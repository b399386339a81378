# shellcheck shell=bash disable=SC2034  # (variables here are used by the scripts sourcing this)
# Shared settings for deploy/kafka/*.sh. Sourced, not run.

# The one pin: Apache Kafka release fetched from Maven Central (org.apache.kafka:kafka_2.13).
# Kafka 4.x brokers need Java 17+.
KAFKA_VERSION=4.1.2

KAFKA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FLEETPROF_CACHE="${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}"
KAFKA_HOME_DIR="$FLEETPROF_CACHE/kafka-$KAFKA_VERSION"
KAFKA_LIB="$KAFKA_HOME_DIR/lib"
KAFKA_STAMP="$KAFKA_HOME_DIR/.complete"

KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_STATE="${KAFKA_STATE:-/tmp/fleetprof-kafka-$KAFKA_PORT}"

die() { echo "kafka: error: $*" >&2; exit 1; }
say() { echo "kafka: $*" >&2; }

# Java for the broker and tools: $JAVA, else $JAVA_HOME/bin/java, else java on PATH.
kafka_java() {
  if [ -n "${JAVA:-}" ]; then
    echo "$JAVA"
  elif [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    echo "$JAVA_HOME/bin/java"
  else
    command -v java || die "java not found (install default-jre-headless, Java 17+)"
  fi
}

# Runs a Kafka CLI class (TopicCommand, StorageTool, ...) on the cached classpath, with a
# small fast-starting JVM and WARN-level logging to stderr, killed after $KAFKA_TOOL_TIMEOUT s.
kafka_tool() {
  local main="$1"; shift
  timeout --foreground "${KAFKA_TOOL_TIMEOUT:-120}" "$(kafka_java)" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-tools.properties" \
    -cp "$KAFKA_LIB/*" "$main" "$@"
}

# True if the pid in $KAFKA_STATE/pid is alive and is our broker (guards against pid reuse).
kafka_running_pid() {
  local pid dir
  [ -f "$KAFKA_STATE/pid" ] && [ -f "$KAFKA_STATE/dir" ] || return 1
  pid="$(cat "$KAFKA_STATE/pid")"
  dir="$(cat "$KAFKA_STATE/dir")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' '\n' < "/proc/$pid/cmdline" | grep -qxF "$dir/server.properties" || return 1
  echo "$pid"
}

# Removes the files start.sh keeps in $KAFKA_STATE (never anything else: it may be user-chosen).
clear_state() {
  rm -f "$KAFKA_STATE"/{pid,dir,port,controller_port,cluster_id,started_at}
  rmdir "$KAFKA_STATE" 2>/dev/null || true
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() {
  # shellcheck disable=SC2016  # $1 is expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}
