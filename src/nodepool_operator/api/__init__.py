"""The three kinds of the API group nodepool.dev/v1alpha1: types, defaults, CRD schemas, validation.

One module per kind (``nodepool``, ``scalerequest``, ``autoscaler``), each holding the
frozen dataclasses that controllers read objects through and the CRD schema that the
API server validates them with (NodePool's, the longest, in ``nodepool_schema``);
``wellknown`` holds the labels, taints and annotations on Nodes and Pods that the
controllers read, with the one reading of each; ``meta`` holds what the kinds share,
``quantity`` parses resource quantities, and ``crds`` renders the manifests. Of the
project's layers only ``certificates`` lies below it, and it needs none: it imports only
the standard library and PyYAML.
"""

__all__: list[str] = []
