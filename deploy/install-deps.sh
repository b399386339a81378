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
  libpq-dev               # aggregator: the PostgreSQL store backend (libpq)
  postgresql              # tests: a throwaway PostgreSQL cluster (deploy/postgres)
  libjansson-dev          # JSON for the HTTP API and CLI
  libinih-dev             # config files of the daemons (INI: key = value)
  libmicrohttpd-dev       # HTTP serving (/metrics, /healthz, query API)
  libre2-dev              # aggregator: include/exclude/fold/group patterns in linear time (RE2)
  libcurl4-openssl-dev    # HTTP client of the CLI query commands (fleetprof top, diff, ...)
  libunwind-dev           # fallback unwinder for code without frame pointers
  zlib1g-dev              # gzip for pprof export
  clang llvm libclang-rt-14-dev  # libFuzzer targets and sanitizer runtimes
  maven default-jre-headless  # fetch and run the Kafka broker for tests
  openjdk-17-jdk-headless  # agent: JVMTI headers (Java frames); tests: javac, jfr (Java frames vs JFR)
  curl netcat-openbsd procps python3
  python3-venv            # test-k8s: kubernetes-validate (Kubernetes schemas) in a venv
  lintian systemd         # test-package: lintian on the .deb, systemd-analyze verify/security on the units
  gnuplot-nox             # bench/agent-step.png: plot of the agent controller step response
  universal-ctags         # tests/funclen.sh: function lengths of the production code
  jq bc                   # bench/diff-pipeline.sh: reads each diff's JSON, averages the cells
  chromium fonts-dejavu-core  # the web UI's browser test and benchmark (headless, puppeteer-core)
  libdw-dev libelf-dev    # agent/aggregator symbolization: symbol tables, debug files, MiniDebugInfo, lines
  libiberty-dev           # demangler (C++, Rust legacy and v0), linked statically
  libdebuginfod-dev       # aggregator: fetch debug files by build id from debuginfod servers
  debuginfod              # tests: a real local debuginfod server (deploy/debuginfod)
  binutils xz-utils       # tests: objcopy/nm/addr2line/c++filt ground truth, MiniDebugInfo
  libc6-dbg               # separate debug file of libc: libc frames named in every profile
  python3.11-dbg redis-server redis-tools  # bench/symbols-unnamed.sh: debug file of Debian's python3, a redis load
  libjemalloc2            # tests/hostile: jemalloc behind the agent (case jemalloc_sized)
  gdb                     # tests/hostile: every thread's stack of a case that hangs, in the log
  util-linux libcap2-bin gosu libcap-dev  # tests/hostile: real privilege drops under the agent (setpriv, capsh, gosu, a libcap program)
  linux-perf nginx apache2-utils  # bench/cfi-vs-perf.sh: perf's stacks as ground truth, nginx under ab
)

# The opt-in container-image test (cmake -DFLEETPROF_CONTAINER_TESTS=ON) builds with podman
# from a debootstrap'd Debian base.
if [ "${FLEETPROF_CONTAINER_TESTS:-0}" = 1 ]; then
  PKGS+=(podman debootstrap)
fi

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

# node and npm: the web UI's browser test and benchmark (puppeteer-core from ui/package-lock.json)
# and rebuilding ui/dist (ui/build.sh). The C build does not need them (ui/dist is committed).
# Only when missing: a machine with node from elsewhere keeps it.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: installing nodejs and npm (web UI test and build)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
# kubernetes-validate (PyPI; it ships the Kubernetes JSON schemas) for test-k8s, in a venv in
# the cache so the system Python stays untouched.
"$(dirname "$0")/k8s-validate-venv.sh" "${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}/kvenv"
