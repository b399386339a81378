#!/usr/bin/env bash
# Makes (once) the Python venv with the OpenTelemetry SDK (PyPI opentelemetry-sdk) that
# tests/otel/otel-spans.py runs under: a real tracer whose span ids reach fleetprof through the
# agent's API (fleetprof_span_begin_ids / fleetprof_span_end, by ctypes). Usage: VENV_DIR
set -euo pipefail
venv=$1
ver=1.45.2
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import opentelemetry.sdk.trace" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q "opentelemetry-sdk==$ver"
