//go:build tools

// Package tools pins the helm command this module builds (for the chart's tests and users).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
