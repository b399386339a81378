#!/usr/bin/env bash
# test-package: the install and the Debian package, as an operator meets them.
#   1. cmake --install into a temporary prefix: every file where GNUInstallDirs puts it, the
#      pkg-config file usable (a program compiled and linked against the installed agent only).
#   2. cpack -G DEB: lintian reports no error, and no missing or malformed manual page;
#      dpkg-deb -c lists the expected paths (the three manual pages among them); the
#      maintainer scripts parse; the sysusers/tmpfiles snippets create the fleetprof user and
#      the socket directory in a scratch root (systemd-sysusers/tmpfiles --root).
#   3. The units from the package pass `systemd-analyze verify` against the package's file
#      tree (binaries present and executable) and rate <= 3.0 in `systemd-analyze security`.
# Usage: test-package.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1; build=$2
tmp=$(mktemp -d /tmp/fleetprof-package.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

# 1. cmake --install
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$build/fleetprof.pc")
for f in bin/fleetprof bin/fleetprof-collector bin/fleetprof-aggregator \
         "$libdir/libfleetprof.so" include/fleetprof.h "$libdir/pkgconfig/fleetprof.pc" \
         lib/systemd/system/fleetprof-collector.service \
         lib/systemd/system/fleetprof-aggregator.service \
         lib/sysusers.d/fleetprof.conf lib/tmpfiles.d/fleetprof.conf \
         etc/fleetprof/collector.conf etc/fleetprof/aggregator.conf \
         share/doc/fleetprof/examples/collector.conf.example \
         share/doc/fleetprof/examples/aggregator.conf.example share/doc/fleetprof/copyright; do
    check "installed $f" test -e "$tmp/prefix/$f"
done
check "installed binaries have no build-tree RPATH" \
    sh -c "! readelf -d '$tmp/prefix/bin/fleetprof-collector' | grep -q '$build'"
export PKG_CONFIG_PATH="$tmp/prefix/$libdir/pkgconfig"
check "pkg-config names the temporary prefix" \
    test "$(pkg-config --variable=prefix fleetprof)" = "$tmp/prefix"
cat >"$tmp/use.c" <<'C'
#include <fleetprof.h>
int main(void) { fleetprof_work_done(1); return 0; }
C
# shellcheck disable=SC2046
check "a program builds against the installed header and library via pkg-config" \
    cc -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs fleetprof)
check "fleetprof run finds the installed agent" \
    sh -c "FLEETPROF_OUTPUT= '$tmp/prefix/bin/fleetprof' run --service pkgtest -- /bin/sh -c \
           'case \"\$LD_PRELOAD\" in *$tmp/prefix/$libdir/libfleetprof.so*) exit 0;; esac; exit 1'"

# 2. the .deb
(cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/pkg/fleetprof_*.deb)
echo "package: $(basename "$deb")"
lintian --no-cfg --fail-on error "$deb" >"$tmp/lintian.log" 2>&1 || true
cat "$tmp/lintian.log"
check "lintian: no errors" sh -c "! grep -q '^E:' '$tmp/lintian.log'"
check "lintian: every program has a manual page" sh -c "! grep -q 'no-manual-page' '$tmp/lintian.log'"
check "lintian: the manual pages have no groff or format warnings" \
    sh -c "! grep -qE 'groff-message|manual-page-not-compressed|bad-whatis-entry|manpage-has' '$tmp/lintian.log'"
dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/contents"
for f in ./usr/bin/fleetprof ./usr/bin/fleetprof-collector ./usr/bin/fleetprof-aggregator \
         ./usr/lib/libfleetprof.so ./usr/include/fleetprof.h ./usr/lib/pkgconfig/fleetprof.pc \
         ./usr/lib/systemd/system/fleetprof-collector.service \
         ./usr/lib/systemd/system/fleetprof-aggregator.service \
         ./usr/lib/sysusers.d/fleetprof.conf ./usr/lib/tmpfiles.d/fleetprof.conf \
         ./etc/fleetprof/collector.conf ./etc/fleetprof/aggregator.conf \
         ./usr/share/doc/fleetprof/copyright ./usr/share/doc/fleetprof/changelog.gz \
         ./usr/share/man/man1/fleetprof.1.gz ./usr/share/man/man8/fleetprof-collector.8.gz \
         ./usr/share/man/man8/fleetprof-aggregator.8.gz; do
    check "deb contains $f" grep -qxF "$f" "$tmp/contents"
done
check "deb has nothing outside /etc and /usr" sh -c "! grep -vE '^\./(etc|usr)(/|$)|^\./$' '$tmp/contents'"
mkdir -p "$tmp/control" "$tmp/root"
dpkg-deb -e "$deb" "$tmp/control"
dpkg-deb -x "$deb" "$tmp/root"
check "pkg-config file in the deb says prefix=/usr" \
    grep -qx 'prefix=/usr' "$tmp/root/usr/lib/pkgconfig/fleetprof.pc"
check "conffiles lists the two configs" \
    sh -c "grep -qx /etc/fleetprof/collector.conf '$tmp/control/conffiles' && \
           grep -qx /etc/fleetprof/aggregator.conf '$tmp/control/conffiles'"
check "postinst and postrm parse" sh -c "sh -n '$tmp/control/postinst' && sh -n '$tmp/control/postrm'"
check "postinst creates the user (sysusers or adduser)" \
    sh -c "grep -q 'systemd-sysusers' '$tmp/control/postinst' && grep -q 'adduser --system' '$tmp/control/postinst'"
mkdir -p "$tmp/scratch/etc"
systemd-sysusers --root="$tmp/scratch" "$tmp/root/usr/lib/sysusers.d/fleetprof.conf" 2>/dev/null
check "sysusers snippet creates the fleetprof system user" \
    sh -c "grep -q '^fleetprof:x:[0-9]*:[0-9]*:.*:/var/lib/fleetprof:/usr/sbin/nologin' '$tmp/scratch/etc/passwd'"
systemd-tmpfiles --root="$tmp/scratch" --create "$tmp/root/usr/lib/tmpfiles.d/fleetprof.conf"
uid=$(awk -F: '$1=="fleetprof"{print $3}' "$tmp/scratch/etc/passwd")
check "tmpfiles snippet creates /run/fleetprof 0755 owned by fleetprof" \
    test "$(stat -c '%a %u' "$tmp/scratch/run/fleetprof")" = "755 $uid"

# 3. the units: verify against the package's tree (plus the host's targets), then security.
cp -n /lib/systemd/system/*.target "$tmp/root/usr/lib/systemd/system/" 2>/dev/null || true
for u in fleetprof-collector fleetprof-aggregator; do
    check "systemd-analyze verify $u" \
        systemd-analyze verify --man=no --root="$tmp/root" "$u.service"
    out=$(systemd-analyze security --offline=true --threshold=30 \
          "$tmp/root/usr/lib/systemd/system/$u.service" 2>&1) && rc=0 || rc=$?
    echo "$out" | tail -1
    check "systemd-analyze security $u <= 3.0" test "$rc" -eq 0
done
# The verify above can fail: a unit whose binary is missing or not executable is refused.
chmod -x "$tmp/root/usr/bin/fleetprof-collector"
check "verify refuses a non-executable ExecStart (the check can fail)" \
    sh -c "! systemd-analyze verify --man=no --root='$tmp/root' fleetprof-collector.service 2>/dev/null"

[ "$fail" -eq 0 ] && echo "test-package: all checks passed"
exit "$fail"
