//go:build tools

// Package tools pins Karpenter's kwok provider command this module builds.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
