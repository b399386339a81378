#!/usr/bin/env bash
# Fetches async-profiler 4.1 (Maven Central tools.profiler:async-profiler, the jar carries the
# linux-x64 native library) into ${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}/async-profiler-4.1/
# and prints the path of libasyncProfiler.so. Does nothing (no network, no Maven) once cached.
set -euo pipefail
VER=4.1
DIR="${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}/async-profiler-$VER"
LIB="$DIR/libasyncProfiler.so"
if [ -s "$LIB" ]; then
  echo "$LIB"
  exit 0
fi
command -v mvn >/dev/null || { echo "async-profiler.sh: mvn not found (deploy/install-deps.sh)" >&2; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock -w 600 9 || { echo "async-profiler.sh: timed out waiting for $DIR/.lock" >&2; exit 1; }
if [ -s "$LIB" ]; then
  echo "$LIB"
  exit 0
fi
tmp="$DIR/tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
art=tools.profiler:async-profiler:$VER:jar
# offline first: ~/.m2 may have it
if ! mvn -B -q -o dependency:copy -Dartifact="$art" -DoutputDirectory="$tmp" >"$DIR/fetch.log" 2>&1; then
  mvn -B -q dependency:copy -Dartifact="$art" -DoutputDirectory="$tmp" >"$DIR/fetch.log" 2>&1 ||
    { echo "async-profiler.sh: mvn failed, see $DIR/fetch.log" >&2; exit 1; }
fi
jar="$tmp/async-profiler-$VER.jar"
(cd "$tmp" && unzip -q -o "$jar") || { echo "async-profiler.sh: cannot unpack $jar" >&2; exit 1; }
so=$(find "$tmp" -path '*linux-x64*' -name libasyncProfiler.so | head -1)
[ -n "$so" ] || { echo "async-profiler.sh: no linux-x64 libasyncProfiler.so in $jar" >&2; exit 1; }
cp "$so" "$LIB.tmp" && mv "$LIB.tmp" "$LIB"
echo "$LIB"
