#!/usr/bin/env bash
# Rebuilds the web UI's assets (ui/dist, committed) from ui/src: npm ci (pinned by
# package-lock.json) then esbuild. The C build embeds ui/dist; it never needs node.
# ui/build.sh --check: only verify that ui/dist is what ui/src builds to.
set -euo pipefail
cd "$(dirname "$0")"
[ -f node_modules/.package-lock.json ] && [ ! package-lock.json -nt node_modules/.package-lock.json ] ||
  npm ci --no-audit --no-fund --loglevel=error
if [ "${1:-}" = --check ]; then exec node build.mjs --check; fi
node build.mjs
ls -l dist
