"""The CustomResourceDefinitions of the three kinds, as dicts and as YAML.

``nodepool-operator crds`` prints ``render_yaml()``; deploy manifests and the test
control plane install the same objects, so there is one definition of the API.
"""

from __future__ import annotations

from typing import Any

import yaml

from nodepool_operator.api import autoscaler, nodepool_schema, scalerequest

__all__ = ["all_crds", "render_yaml"]


def all_crds() -> list[dict[str, Any]]:
    """Fresh copies of every CRD, sorted by name so that the output never reorders."""
    crds = [nodepool_schema.crd(), scalerequest.crd(), autoscaler.crd()]
    return sorted(crds, key=lambda crd: str(crd["metadata"]["name"]))


def render_yaml() -> str:
    """All CRDs as one multi-document YAML stream, each document starting with ``---``."""
    # sort_keys=False keeps the conventional apiVersion/kind/metadata/spec order; the
    # dicts are built in a fixed order, so the text is the same on every run.
    return yaml.safe_dump_all(
        all_crds(),
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        width=100,
    )
