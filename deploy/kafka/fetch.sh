#!/usr/bin/env bash
# Fetches the pinned Apache Kafka broker + tools + log4j2 binding from Maven Central into
#   ${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}/kafka-<version>/lib
# Does nothing (and needs no network or Maven) once that dir is complete.
# Prints the lib dir on stdout.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The stamp records the manifest's hash, so editing pom.xml refetches.
want_stamp="kafka=$KAFKA_VERSION pom=$(sha256sum "$KAFKA_DIR/pom.xml" | cut -c1-16)"
stamp_ok() { [ -f "$KAFKA_STAMP" ] && [ "$(cat "$KAFKA_STAMP")" = "$want_stamp" ] && [ -d "$KAFKA_LIB" ]; }

if stamp_ok; then
  echo "$KAFKA_LIB"
  exit 0
fi

command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
mkdir -p "$KAFKA_HOME_DIR" || die "cannot create cache dir $KAFKA_HOME_DIR"

# One fetch at a time per cache (parallel start.sh calls on a cold cache).
exec 9>"$KAFKA_HOME_DIR/.lock"
flock -w 600 9 || die "timed out waiting for another fetch.sh (lock $KAFKA_HOME_DIR/.lock)"
if stamp_ok; then
  echo "$KAFKA_LIB"
  exit 0
fi

tmp="$KAFKA_HOME_DIR/lib.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mvn_args=(-B -q -Dstyle.color=never -f "$KAFKA_DIR/pom.xml"
  -Dkafka.version="$KAFKA_VERSION" -Dkafka.lib.dir="$tmp" dependency:copy-dependencies)

log="$KAFKA_HOME_DIR/fetch.log"
# Offline first: works without network when ~/.m2 already has everything.
if ! mvn -o "${mvn_args[@]}" >"$log" 2>&1; then
  say "fetching Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_HOME_DIR"
  rm -rf "$tmp"
  if ! mvn "${mvn_args[@]}" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "mvn could not fetch Kafka $KAFKA_VERSION (full log: $log)"
  fi
fi

for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar"; do
  [ -f "$tmp/$jar" ] || die "fetch incomplete: $jar missing (log: $log)"
done
ls "$tmp"/log4j-core-*.jar "$tmp"/log4j-slf4j-impl-*.jar >/dev/null 2>&1 || die "fetch incomplete: log4j2 binding missing"

rm -rf "$KAFKA_LIB" "$KAFKA_STAMP"
mv "$tmp" "$KAFKA_LIB"
trap - EXIT
echo "$want_stamp" > "$KAFKA_STAMP.tmp"
mv "$KAFKA_STAMP.tmp" "$KAFKA_STAMP"   # written last: marks the cache complete
say "Kafka $KAFKA_VERSION ready: $(find "$KAFKA_LIB" -name '*.jar' | wc -l) jars in $KAFKA_LIB"
echo "$KAFKA_LIB"
