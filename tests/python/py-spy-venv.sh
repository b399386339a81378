#!/bin/sh
# Installs py-spy (PyPI) into a venv under ~/.cache/fleetprof for the Python frame test
# (issue 34) and prints the path of its py-spy binary. Idempotent; exits 1 (with pip's
# output on stderr) when it cannot be installed.
set -eu
venv="${XDG_CACHE_HOME:-$HOME/.cache}/fleetprof/py-spy-venv"
if [ ! -x "$venv/bin/py-spy" ]; then
    /usr/bin/python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet "py-spy==0.4.0" >&2
fi
echo "$venv/bin/py-spy"
