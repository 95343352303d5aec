"""The local control plane: builds the Kubernetes binaries from Go modules, starts and stops them."""
