"""The three kinds of the API group nodepool.dev/v1alpha1: types, defaults, CRD schemas, validation."""
