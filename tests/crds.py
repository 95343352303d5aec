"""Throwaway CustomResourceDefinitions for the integration tests, which prove what the
operator relies on with kinds of their own rather than the operator's schemas."""

from __future__ import annotations

from typing import Any


def crd_with_status(
    *,
    group: str,
    plural: str,
    kind: str,
    scope: str,
    spec: dict[str, Any],
    status: dict[str, Any],
) -> dict[str, Any]:
    """A CRD of one version, ``v1``, served and stored, with the status subresource;
    ``spec`` and ``status`` are the properties of each (OpenAPI v3 schemas)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": spec},
                                "status": {"type": "object", "properties": status},
                            },
                        }
                    },
                }
            ],
        },
    }
