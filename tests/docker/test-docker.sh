#!/usr/bin/env bash
# test-docker: builds deploy/docker/{collector,aggregator,agent}.Dockerfile with podman and
# runs each image once.
#
# This machine (and CI) cannot reach a container registry, so the Dockerfiles' default base
# (docker.io/library/debian:bookworm-slim) cannot be pulled. The test builds the equivalent
# base itself: `debootstrap --variant=minbase bookworm` from the Debian mirror apt already uses,
# imported as localhost/fleetprof-debian:bookworm (cached: ~/.cache/fleetprof/debian-bookworm.tar),
# and passes it as --build-arg BASE. Builds use --network host (the build stages run apt-get)
# and --isolation chroot: podman's OCI runtime (crun) cannot start containers inside this
# machine's own container ("cgroups in hybrid mode not supported"; with --cgroups=disabled,
# "setrlimit RLIMIT_NPROC: Operation not permitted"), so the images are exercised by entering
# their file systems (podman create + podman mount) with chroot under the image's user.
# Checks: the three images build; their USER is 10001; the daemons' --help runs from the image
# (every shared library present); the collector runs from its image (socket 0666 owned by
# 10001, /metrics answers); the agent image's entrypoint copies libfleetprof.so, and a program
# preloading that copy writes a chunk that `fleetprof fold` reads.
# Usage: test-docker.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1; build=$2
cache=${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}
base=localhost/fleetprof-debian:bookworm
tag=fleetprof-test
tmp=$(mktemp -d /tmp/fleetprof-docker.XXXXXX)
chmod 0777 "$tmp"
cleanup() { rm -rf "$tmp"; }
trap 'cleanup' EXIT
fail=0
check() {
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

if ! podman image exists "$base"; then
    mkdir -p "$cache"
    if [ ! -s "$cache/debian-bookworm.tar" ]; then
        rootfs=$(mktemp -d /tmp/fleetprof-rootfs.XXXXXX)
        debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian \
            >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log"; exit 1; }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -cf "$cache/debian-bookworm.tar.tmp" .
        mv "$cache/debian-bookworm.tar.tmp" "$cache/debian-bookworm.tar"
        rm -rf "$rootfs"
    fi
    podman import "$cache/debian-bookworm.tar" "$base" >/dev/null
fi
echo "base image: $base"

for img in collector aggregator agent; do
    start=$(date +%s)
    if podman build -q --isolation chroot --network host --build-arg "BASE=$base" \
            -f "$src/deploy/docker/$img.Dockerfile" -t "$tag-$img" "$src" >"$tmp/build-$img.log" 2>&1; then
        echo "ok: built $tag-$img in $(( $(date +%s) - start )) s"
    else
        tail -30 "$tmp/build-$img.log"
        echo "FAIL: build $img"
        exit 1
    fi
done

# Each image's file system, as a container's (podman create + mount), entered with chroot
# under the image's user: see the header for why not podman run.
mounted=()
enter() { # enter IMAGE -> prints the mount point of a fresh container of IMAGE
    local cid
    cid=$(podman create "$1")
    mounted+=("$cid")
    podman mount "$cid"
}
cleanup() {
    [ -n "${colpid:-}" ] && kill "$colpid" 2>/dev/null && wait "$colpid" 2>/dev/null
    for m in "${procs[@]:-}"; do [ -n "$m" ] && umount "$m" 2>/dev/null; done
    for c in "${mounted[@]:-}"; do [ -n "$c" ] && podman rm -f "$c" >/dev/null 2>&1; done
    rm -rf "$tmp"
}
procs=()

for d in collector aggregator agent; do
    check "$d image: USER 10001:10001" \
        test "$(podman image inspect "$tag-$d" --format '{{.Config.User}}')" = "10001:10001"
done
for d in collector aggregator; do
    size=$(podman image inspect "$tag-$d" --format '{{.Size}}')
    echo "$d image size: $((size / 1048576)) MiB"
    mnt=$(enter "$tag-$d")
    check "$d image: fleetprof-$d --help runs (all its libraries present)" \
        sh -c "chroot --userspec=10001:10001 '$mnt' /usr/bin/fleetprof-$d --help 2>&1 | grep -q http"
    check "$d image: entrypoint is the daemon" \
        sh -c "podman image inspect '$tag-$d' --format '{{.Config.Entrypoint}}' | grep -q fleetprof-$d"
done

# The collector from its image: socket 0666, /metrics served.
mnt=$(enter "$tag-collector")
mount -t proc proc "$mnt/proc" && procs+=("$mnt/proc")
chroot --userspec=10001:10001 "$mnt" /usr/bin/fleetprof-collector \
    --config=/etc/fleetprof/collector.conf --brokers=127.0.0.1:19864 \
    --http-listen=127.0.0.1:19865 >"$tmp/collector.log" 2>&1 &
colpid=$!
for _ in $(seq 100); do [ -S "$mnt/run/fleetprof/collector.sock" ] && break; sleep 0.1; done
check "collector image: the daemon creates its socket as uid 10001" \
    test "$(stat -c '%u %a' "$mnt/run/fleetprof/collector.sock" 2>/dev/null)" = "10001 666"
check "collector image: /metrics answers" \
    sh -c "curl -sf http://127.0.0.1:19865/metrics | grep -q fleetprof_collector_"
kill "$colpid"; wait "$colpid" 2>/dev/null || true; colpid=

# The agent image: its entrypoint copies the library into the directory given; the copy
# profiles a program on this machine.
check "agent image: entrypoint copies libfleetprof.so" \
    sh -c "podman image inspect '$tag-agent' --format '{{.Config.Entrypoint}} {{.Config.Cmd}}' | grep -q 'cp /opt/fleetprof/libfleetprof.so.*/fleetprof'"
mnt=$(enter "$tag-agent")
mkdir -p "$mnt/fleetprof" && chmod 0777 "$mnt/fleetprof"
chroot --userspec=10001:10001 "$mnt" /bin/cp /opt/fleetprof/libfleetprof.so /fleetprof
check "agent image copied libfleetprof.so" test -s "$mnt/fleetprof/libfleetprof.so"
mkdir -m 0777 "$tmp/out"
LD_PRELOAD="$mnt/fleetprof/libfleetprof.so" FLEETPROF_OUTPUT="$tmp/out" FLEETPROF_COLLECTOR=none \
    FLEETPROF_SERVICE=imgtest "$build/tests/fp-work" cpu 0.3 >/dev/null
check "the image's agent profiled a program (fleetprof fold reads its chunk)" \
    sh -c "'$build/cli/fleetprof' fold '$tmp/out' | grep -q burn_"

[ "$fail" -eq 0 ] && echo "test-docker: all checks passed"
exit "$fail"
