#!/usr/bin/env bash
# test-k8s: deploy/k8s/*.yaml against the Kubernetes schemas and the operating rules
# (check-manifests.py). kubernetes-validate (which ships the schemas) lives in a venv under
# ~/.cache/fleetprof, made by deploy/install-deps.sh, or here when missing.
set -euo pipefail
src=$1
venv=${FLEETPROF_CACHE:-$HOME/.cache/fleetprof}/kvenv
"$src/deploy/k8s-validate-venv.sh" "$venv"
exec "$venv/bin/python" "$src/tests/k8s/check-manifests.py" "$src/deploy/k8s" 1.29.0 1.33.0
