#!/usr/bin/env bash
# The README's main command: installs what it needs, then runs the demo on the local
# control plane. Extra arguments go to `nodepool-operator demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
exec .venv/bin/nodepool-operator demo "$@"
