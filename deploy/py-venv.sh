#!/usr/bin/env bash
# Makes (once) a Python venv holding one pinned PyPI package, for the scripts that pin one
# (k8s-validate-venv.sh, otel-venv.sh). The venv is kept when MODULE already imports in it.
# Usage: py-venv.sh VENV_DIR PACKAGE==VERSION MODULE
set -euo pipefail
venv=$1 requirement=$2 module=$3
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import $module" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q "$requirement"
