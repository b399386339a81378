#!/usr/bin/env bash
# Makes (once) the Python venv with kubernetes-validate, which ships the Kubernetes JSON schemas
# that tests/k8s/check-manifests.py validates deploy/k8s/*.yaml against. Usage: VENV_DIR
set -euo pipefail
exec "$(dirname "$0")/py-venv.sh" "$1" "kubernetes-validate==1.37.0" kubernetes_validate
