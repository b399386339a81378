#!/usr/bin/env bash
# Rebuilds the web UI's assets (ui/dist, committed) from ui/src: npm ci (pinned by
# package-lock.json) then esbuild. The C build embeds ui/dist; it never needs node.
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
node build.mjs
ls -l dist
