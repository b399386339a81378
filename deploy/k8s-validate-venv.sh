#!/usr/bin/env bash
# Makes (once) the Python venv with kubernetes-validate, which ships the Kubernetes JSON schemas
# that tests/k8s/check-manifests.py validates deploy/k8s/*.yaml against. Usage: VENV_DIR
set -euo pipefail
venv=$1
ver=1.37.0
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import kubernetes_validate" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q "kubernetes-validate==$ver"
