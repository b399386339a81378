#!/usr/bin/env bash
# No folder of production code holds more than LIMIT files (default 20): a folder a reader can
# take in at once. Production code: the tracked files under agent/, aggregator/, collector/,
# common/ and cli/, outside their tests. Usage: folders.sh SOURCE_DIR [LIMIT]. Fails listing
# each fuller folder as "FILES folder".
set -euo pipefail
src=${1:?usage: folders.sh SOURCE_DIR [LIMIT]}
limit=${2:-20}
cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files agent aggregator collector common cli)
else
    files=$(find agent aggregator collector common cli -type f | grep -v '/node_modules/')
fi
counts=$(printf '%s\n' "$files" | grep -v '/tests/' | xargs -n1 dirname | sort | uniq -c | sort -rn)
nfolders=$(printf '%s\n' "$counts" | grep -c . || true)
if [ "$nfolders" -lt 10 ]; then
    echo "folders: only $nfolders folders found under $src" >&2
    exit 1
fi
over=$(printf '%s\n' "$counts" | awk -v l="$limit" '$1 > l')
echo "folders: $nfolders folders of production code, the fullest: $(printf '%s\n' "$counts" | head -1 | xargs)"
if [ -n "$over" ]; then
    echo "folders over $limit files:"
    printf '%s\n' "$over"
    exit 1
fi
