#!/usr/bin/env bash
# Regenerates deploy/crds/crds.yaml from the one definition of the API
# (nodepool_operator.api.crds.render_yaml(), printed by `nodepool-operator crds`),
# then the Helm chart's copies of deploy/ (charts/sync-from-deploy.sh).
# With --check it changes nothing and exits 1 when a file is stale (for CI).
# tests/unit/deploy/test_deploy_manifests.py fails while the file differs.
set -euo pipefail
cd "$(dirname "$0")/.."
target=deploy/crds/crds.yaml
cli=.venv/bin/nodepool-operator
[ -x "$cli" ] || cli=nodepool-operator
if [ "${1:-}" = "--check" ]; then
  if ! "$cli" crds | diff -u "$target" -; then
    echo "$target is stale: run scripts/update-crds.sh" >&2
    exit 1
  fi
  echo "$target is up to date"
  bash charts/sync-from-deploy.sh --check
else
  tmp=$(mktemp "$target.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  "$cli" crds >"$tmp"
  chmod 0644 "$tmp"
  mv "$tmp" "$target"
  echo "wrote $target"
  bash charts/sync-from-deploy.sh  # the Helm chart's crds/ is a copy
fi
