#!/usr/bin/env bash
# The chart is rendered from the same sources as deploy/: its CRDs, RBAC rules, alert rules
# and Grafana dashboard are copies of deploy/'s files (helm reads nothing outside the
# chart's directory). This script refreshes the copies; with --check it changes nothing and
# exits 1 when one differs (tests/unit/deploy/test_chart_sources.py fails then too).
#
#   deploy/crds/crds.yaml                        -> crds/crds.yaml (= `nodepool-operator crds`)
#   deploy/rbac/{clusterrole,leader-election-role,metrics-reader-role}.yaml -> files/rbac/
#   deploy/monitoring/prometheusrule.yaml        -> files/monitoring/
#   deploy/monitoring/dashboards/nodepool-operator.json -> files/monitoring/
set -euo pipefail
cd "$(dirname "$0")/.."
chart=charts/nodepool-operator
pairs=(
  deploy/crds/crds.yaml "$chart/crds/crds.yaml"
  deploy/rbac/clusterrole.yaml "$chart/files/rbac/clusterrole.yaml"
  deploy/rbac/leader-election-role.yaml "$chart/files/rbac/leader-election-role.yaml"
  deploy/rbac/metrics-reader-role.yaml "$chart/files/rbac/metrics-reader-role.yaml"
  deploy/monitoring/prometheusrule.yaml "$chart/files/monitoring/prometheusrule.yaml"
  deploy/monitoring/dashboards/nodepool-operator.json "$chart/files/monitoring/nodepool-operator.json"
)
stale=0
for ((i = 0; i < ${#pairs[@]}; i += 2)); do
  source=${pairs[i]} copy=${pairs[i + 1]}
  if [ "${1:-}" = "--check" ]; then
    if ! cmp -s "$source" "$copy"; then
      echo "$copy differs from $source: run charts/sync-from-deploy.sh" >&2
      stale=1
    fi
  else
    install -D -m 0644 "$source" "$copy"
  fi
done
if [ "${1:-}" = "--check" ]; then
  [ $stale = 0 ] && echo "the chart's copies of deploy/ are up to date"
else
  echo "copied deploy/'s CRDs, RBAC rules and monitoring assets into $chart"
fi
exit $stale
