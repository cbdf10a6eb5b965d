#!/usr/bin/env bash
# A Kubernetes cluster on this machine for the README's cluster commands: the project's test control plane
# (etcd, kube-apiserver, controller-manager, scheduler, kwok GPU nodes), the chart installed, the operator's
# and the runs' pods played here. See scripts/dev_cluster.py for what it does and where it keeps its state.
#
#   scripts/dev-cluster.sh up       start (builds the control plane first if it is not built: ~20 min, once)
#   scripts/dev-cluster.sh status   running? prints the exports
#   scripts/dev-cluster.sh down     stop it (the runs' folders are kept)
#
# `up` ends with the line to paste: export KUBECONFIG=... PATH=... (kubectl and helm come with the build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  up)
    if ! bash "$here/build-control-plane.sh" --check >/dev/null 2>&1; then
      echo "dev-cluster: building the control plane from Go modules first (about 20 minutes, once)" >&2
      bash "$here/build-control-plane.sh" >&2
    fi ;;
  down|status) ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
python3 -c "import kubernetes" 2>/dev/null || {
  echo "dev-cluster: error: the kubernetes Python client is missing: pip install 'cudanalyst[operator]'" >&2; exit 2; }
exec python3 "$here/dev_cluster.py" "$@"
