#!/usr/bin/env bash
# Starts a single-node KRaft Kafka broker (combined broker+controller) on 127.0.0.1 for tests
# and development, creates the fleetprof topics, and prints the bootstrap address as the last
# line of stdout (progress goes to stderr, so BOOTSTRAP=$(start.sh) works).
#
#   start.sh            fresh broker on a new temp data dir (or no-op if already running)
#   start.sh --restart  start again on the data dir and ports kept by `KAFKA_KEEP_DATA=1 stop.sh`
#
# Env: KAFKA_PORT (19092), KAFKA_CONTROLLER_PORT (random free port in 30000-32767),
#      KAFKA_STATE (/tmp/fleetprof-kafka-$KAFKA_PORT), KAFKA_PARTITIONS (4),
#      KAFKA_TOPICS (extra "name:partitions ..."), KAFKA_START_TIMEOUT (60 s),
#      KAFKA_HEAP_OPTS (-Xmx512m -Xms128m), KAFKA_EXTRA_PROPS (extra server.properties lines),
#      FLEETPROF_CACHE, JAVA / JAVA_HOME.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

restart=0
case "${1:-}" in
  "") ;;
  --restart) restart=1 ;;
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (usage: start.sh [--restart])" ;;
esac
[ $# -le 1 ] || die "too many arguments (usage: start.sh [--restart])"

KAFKA_PARTITIONS="${KAFKA_PARTITIONS:-4}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
is_port() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }
is_port "$KAFKA_PORT" || die "KAFKA_PORT='$KAFKA_PORT' is not a TCP port"
[[ "$KAFKA_PARTITIONS" =~ ^[1-9][0-9]*$ ]] || die "KAFKA_PARTITIONS='$KAFKA_PARTITIONS' is not a positive integer"
[[ "$KAFKA_START_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "KAFKA_START_TIMEOUT='$KAFKA_START_TIMEOUT' is not a positive integer"

# Topics as "name:partitions".
# fleetprof.control: capture commands (`fleetprof capture`), read by every collector; an hour of
# them is kept (collectors ignore commands older than their control-max-age anyway).
topics=("fleetprof.chunks:$KAFKA_PARTITIONS" "fleetprof.chunks.dlq:1" "fleetprof.control:1")
for t in ${KAFKA_TOPICS:-}; do
  [[ "$t" =~ ^[A-Za-z0-9._-]+:[1-9][0-9]*$ ]] || die "bad KAFKA_TOPICS entry '$t' (want name:partitions)"
  topics+=("$t")
done

"$KAFKA_DIR/fetch.sh" >/dev/null

# One start/stop at a time per state dir. The lock file sits beside the state dir so stop.sh
# can delete the state dir; fd 9 is closed for the broker so it never holds the lock.
mkdir -p "$(dirname "$KAFKA_STATE")"
exec 9>"$KAFKA_STATE.lock"
flock -w 120 9 || die "timed out waiting for another start.sh/stop.sh on $KAFKA_STATE"

# ---------------------------------------------------------------------------------------------
list_topics() {  # prints topic names; fails if the broker does not answer metadata in time
  KAFKA_TOOL_TIMEOUT=30 kafka_tool org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "127.0.0.1:$port" --command-config "$dir/admin.properties" --list
}

ensure_topics() {
  local existing missing=() t name parts pids=() i rc=0
  existing="$(list_topics 2>"$dir/logs/tools.err")" || {
    cat "$dir/logs/tools.err" >&2; die "broker on 127.0.0.1:$port does not answer metadata requests"; }
  for t in "${topics[@]}"; do
    grep -qxF "${t%%:*}" <<<"$existing" || missing+=("$t")
  done
  # Each TopicCommand is its own JVM (~1-2 s); run them side by side.
  for i in "${!missing[@]}"; do
    name="${missing[$i]%%:*}"; parts="${missing[$i]##*:}"
    local conf=()
    [ "$name" != fleetprof.control ] || conf=(--config retention.ms=3600000)
    kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
      --command-config "$dir/admin.properties" --create --if-not-exists --topic "$name" \
      --partitions "$parts" --replication-factor 1 "${conf[@]}" >"$dir/logs/create.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      cat "$dir/logs/create.$i.log" >&2
      say "could not create topic ${missing[$i]%%:*}"; rc=1
    fi
  done
  [ "$rc" -eq 0 ] || die "topic creation failed on 127.0.0.1:$port"
  [ ${#missing[@]} -eq 0 ] || say "created topics: ${missing[*]}"
}

fail_start() {  # $1 = message; shows the broker log, stops the broker, keeps the dir for a look
  local p
  say "----- tail of $dir/logs/server.log -----"
  tail -n 40 "$dir/logs/server.log" >&2 2>/dev/null || true
  if [ -s "$dir/logs/stdout.log" ]; then
    say "----- tail of $dir/logs/stdout.log -----"
    tail -n 20 "$dir/logs/stdout.log" >&2
  fi
  if p="$(kafka_running_pid)"; then kill -KILL "$p" 2>/dev/null || true; fi
  [ -z "${launched:-}" ] || kill -KILL "$launched" 2>/dev/null || true
  rm -f "$KAFKA_STATE/pid"
  die "$1 (data dir kept: $dir; stop.sh removes it)"
}

# ---------------------------------------------------------------------------------------------
# Already running from this state dir?
if pid="$(kafka_running_pid)"; then
  dir="$(cat "$KAFKA_STATE/dir")"; port="$(cat "$KAFKA_STATE/port")"
  say "broker already running (pid $pid, data $dir)"
  ensure_topics
  echo "127.0.0.1:$port"
  exit 0
fi

if [ "$restart" -eq 1 ]; then
  [ -f "$KAFKA_STATE/dir" ] || die "nothing to restart: no kept broker in $KAFKA_STATE (run start.sh without --restart)"
  dir="$(cat "$KAFKA_STATE/dir")"
  [ -f "$dir/data/meta.properties" ] || die "cannot restart: data dir $dir is gone or was never formatted"
  port="$(cat "$KAFKA_STATE/port")"; ctrl_port="$(cat "$KAFKA_STATE/controller_port")"
  [ "$port" = "$KAFKA_PORT" ] || say "note: restarting on the kept port $port (KAFKA_PORT=$KAFKA_PORT ignored)"
else
  if [ -f "$KAFKA_STATE/dir" ] && [ -d "$(cat "$KAFKA_STATE/dir")" ]; then
    say "note: leaving previous data dir $(cat "$KAFKA_STATE/dir") in place (use start.sh --restart to reuse it)"
  fi
  clear_state
  port="$KAFKA_PORT"
  if [ -n "${KAFKA_CONTROLLER_PORT:-}" ]; then
    ctrl_port="$KAFKA_CONTROLLER_PORT"
    is_port "$ctrl_port" || die "KAFKA_CONTROLLER_PORT='$ctrl_port' is not a TCP port"
  else  # below the kernel's ephemeral range, so outgoing connections never take it
    for _ in $(seq 50); do
      ctrl_port=$((30000 + RANDOM % 2768))
      [ "$ctrl_port" != "$port" ] && ! port_open "$ctrl_port" && break
    done
  fi
  [ "$ctrl_port" != "$port" ] || die "controller port must differ from KAFKA_PORT ($port)"
fi
port_open "$port" && die "port 127.0.0.1:$port is already in use by another process (set KAFKA_PORT)"
port_open "$ctrl_port" && die "controller port 127.0.0.1:$ctrl_port is already in use (set KAFKA_CONTROLLER_PORT)"

if [ "$restart" -eq 0 ]; then
  dir="$(mktemp -d "${TMPDIR:-/tmp}/fleetprof-kafka-$port.XXXXXX")"
  touch "$dir/.fleetprof-kafka"   # marker: stop.sh only deletes dirs carrying it
  mkdir -p "$dir/data" "$dir/logs"
  cat >"$dir/server.properties" <<EOF
# Written by deploy/kafka/start.sh: single-node KRaft broker+controller for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctrl_port
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctrl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=4
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.cleaner.dedupe.buffer.size=16777216
EOF
  # Extra settings from the caller win (java.util.Properties keeps the last value).
  if [ -n "${KAFKA_EXTRA_PROPS:-}" ]; then
    printf '# KAFKA_EXTRA_PROPS\n%s\n' "$KAFKA_EXTRA_PROPS" >>"$dir/server.properties"
  fi
  cat >"$dir/admin.properties" <<EOF
request.timeout.ms=10000
default.api.timeout.ms=20000
EOF

  # Random cluster id: 16 random bytes, base64url without padding (what Uuid.randomUuid makes;
  # a leading '-' is avoided because it reads as an option on the command line).
  while :; do
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$cluster_id" != -* ]] && break
  done
  if ! kafka_tool kafka.tools.StorageTool format --cluster-id "$cluster_id" \
      --config "$dir/server.properties" >"$dir/logs/format.log" 2>&1; then
    cat "$dir/logs/format.log" >&2
    rm -rf "$dir"
    die "kafka-storage format failed (bad KAFKA_EXTRA_PROPS?)"
  fi

  mkdir -p "$KAFKA_STATE"
  echo "$dir" >"$KAFKA_STATE/dir"
  echo "$port" >"$KAFKA_STATE/port"
  echo "$ctrl_port" >"$KAFKA_STATE/controller_port"
  echo "$cluster_id" >"$KAFKA_STATE/cluster_id"
fi

# ---------------------------------------------------------------------------------------------
# Launch. setsid + no inherited stdio: the broker outlives this script and never holds a
# caller's pipe open (so `$(start.sh)` and subprocess captures return).
log_start=0
[ -f "$dir/logs/server.log" ] && log_start=$(stat -c %s "$dir/logs/server.log")
read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m}"
setsid "$(kafka_java)" "${heap[@]}" -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
  -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError \
  -Djava.awt.headless=true -Dkafka.logs.dir="$dir/logs" \
  -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-broker.properties" \
  -cp "$KAFKA_LIB/*" kafka.Kafka "$dir/server.properties" \
  </dev/null >>"$dir/logs/stdout.log" 2>&1 9>&- &
launched=$!
echo "$launched" >"$KAFKA_STATE/pid"
date +%s >"$KAFKA_STATE/started_at"
say "starting Kafka $KAFKA_VERSION (pid $launched) on 127.0.0.1:$port, controller :$ctrl_port, data $dir"

# True while the launched child exists and has not exited (a zombie has exited). Not
# kafka_running_pid: until the forked shell has exec'd java, its command line is this script's,
# and on a loaded machine that window is long enough to be taken for an exit.
launched_running() {
  local st
  st="$(sed -n 's/.*) \(.\) .*/\1/p' "/proc/$launched/stat" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# Wait: process alive -> "Kafka Server started" logged by this run -> port open -> metadata.
deadline=$((SECONDS + KAFKA_START_TIMEOUT))
while :; do
  if ! launched_running; then
    rc=0; wait "$launched" || rc=$?
    fail_start "broker exited during startup (exit status $rc)"
  fi
  if tail -c +"$((log_start + 1))" "$dir/logs/server.log" 2>/dev/null | grep -q 'Kafka Server started' \
     && port_open "$port"; then
    break
  fi
  [ "$SECONDS" -lt "$deadline" ] || fail_start "broker not ready after ${KAFKA_START_TIMEOUT}s"
  sleep 0.3
done
ensure_topics
say "broker ready in ${SECONDS}s (log: $dir/logs/server.log)"
echo "127.0.0.1:$port"
