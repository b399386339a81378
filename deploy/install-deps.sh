#!/usr/bin/env bash
# Installs every Debian package fleetprof needs to build, test and run. Idempotent: a package
# already installed is left alone; apt is only touched when something is missing.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  librdkafka-dev          # Kafka producer (collector) and consumer (aggregator)
  libprotobuf-c-dev protobuf-c-compiler  # chunk wire format: generated C codec
  libuv1-dev              # collector event loop
  liblz4-dev              # chunk payload compression
  libxxhash-dev           # chunk checksums, stack/string hashing
  libsqlite3-dev sqlite3  # aggregator storage
  libjansson-dev          # JSON for the HTTP API and CLI
  libinih-dev             # config files of the daemons (INI: key = value)
  libmicrohttpd-dev       # HTTP serving (/metrics, /healthz, query API)
  libcurl4-openssl-dev    # HTTP client of the CLI query commands (fleetprof top, diff, ...)
  libunwind-dev           # fallback unwinder for code without frame pointers
  zlib1g-dev              # gzip for pprof export
  clang llvm libclang-rt-14-dev  # libFuzzer targets and sanitizer runtimes
  maven default-jre-headless  # fetch and run the Kafka broker for tests
  curl netcat-openbsd procps python3
  gnuplot-nox             # bench/agent-step.png: plot of the agent controller step response
  libjemalloc2            # tests/hostile: jemalloc behind the agent (case jemalloc_sized)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#PKGS[@]} packages present"
fi

# The real `go tool pprof` reads our pprof export in a test. Machines of this project's kind
# ship Go; a plain Debian machine gets Debian's toolchain.
if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: installing golang-go (for go tool pprof)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go
fi
