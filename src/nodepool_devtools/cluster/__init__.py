"""The local control plane: builds the Kubernetes binaries from Go modules, runs them."""
