#!/usr/bin/env bash
# Makes (once) the Python venv with the OpenTelemetry SDK (PyPI opentelemetry-sdk) that
# tests/otel/otel-spans.py runs under: a real tracer whose span ids reach fleetprof through the
# agent's API (fleetprof_span_begin_ids / fleetprof_span_end, by ctypes). Usage: VENV_DIR
set -euo pipefail
exec "$(dirname "$0")/py-venv.sh" "$1" "opentelemetry-sdk==1.45.2" opentelemetry.sdk.trace
