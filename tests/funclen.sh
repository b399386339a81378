#!/usr/bin/env bash
# No production function over LIMIT lines (default 150): the functions a reader would have to
# scroll through. Production code is every tracked *.c and *.cc file outside tests/ and bench/
# (tests/fuzz included). Lengths come from universal-ctags (first to last line of the body).
# Usage: funclen.sh SOURCE_DIR [LIMIT]. Fails listing each longer function as
# "LINES file:line name", longest first; prints how many are over 100 lines for the record.
set -euo pipefail
src=${1:?usage: funclen.sh SOURCE_DIR [LIMIT]}
limit=${2:-150}
cd "$src"
if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "funclen: universal-ctags is required (deploy/install-deps.sh installs it)" >&2
    exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.cc')
else
    files=$(find . -name '*.c' -o -name '*.cc' | sed 's|^\./||')
fi
files=$(printf '%s\n' "$files" | grep -v '^tests/\|^bench/\|^build' || true)
# name file start end, one line per function definition
table=$(printf '%s\n' "$files" | xargs ctags -x --kinds-C=f --kinds-C++=f \
    --_xformat='%N %F %n %{end}')
nfun=$(printf '%s\n' "$table" | grep -c . || true)
if [ "$nfun" -lt 500 ]; then # the tree has ~1,600: fewer means ctags read nothing useful
    echo "funclen: ctags found only $nfun functions in $(printf '%s\n' "$files" | wc -l) files" >&2
    exit 1
fi
lengths=$(printf '%s\n' "$table" | awk '{ print $4 - $3 + 1, $2 ":" $3, $1 }' | sort -rn)
over100=$(printf '%s\n' "$lengths" | awk '$1 > 100' | wc -l)
long=$(printf '%s\n' "$lengths" | awk -v l="$limit" '$1 > l')
echo "funclen: $nfun functions, $over100 over 100 lines, limit $limit"
if [ -n "$long" ]; then
    echo "funclen: production functions over $limit lines (split them along their steps):" >&2
    printf '%s\n' "$long" >&2
    exit 1
fi
