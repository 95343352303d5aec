"""Drift: whether a Node still is what its pool's spec would make now.

At launch each Node records the **spec hash** of the pool's spec it was made from, one
short hash per section of what shapes a node (``spec_hash``): its capacity, reserve,
region, labels, taints and the provider's launch parameters. A Node whose recorded
sections differ from the pool's current ones is **drifted**, and ``drifted_sections``
says which changed, so the event and the Node's condition can name them.

Left out, because they change nothing on a running Node: the pool's size and bounds
(``targetNodes``, ``minNodes``, ``maxNodes``), ``weight``, the timeouts, the disruption
settings and ``expireAfter``; and from the template ``startupTaints`` (an agent removed
them from a running Node long ago) and ``zones``: a Node in a zone the pool still allows
has not drifted when another zone is added, so zones are judged by membership
(``zone_drifted``), not by hash, as Karpenter judges requirements. A pool with
``requirements`` leaves out ``capacity`` too: its Nodes' shape is the catalog offering
each was launched as, never the template's cpu, memory or pods, so those drift nothing;
the offering is judged by membership in the requirements (``requirements_drifted``).
A section the current hash leaves out is not compared, so a Node stamped with it (before
its pool had requirements) does not drift for it either.

Values are canonical before they are hashed, so writing the same spec differently
drifts nothing: quantities as integers (``"4"`` and ``"4000m"`` are one cpu amount),
labels and taints in sorted order. The hashes must stay the same from one operator
version to the next (or an upgrade would drift every Node): a change to what is hashed
takes a new ``HASH_VERSION``, and a Node stamped under another version is not drifted
by hash, only stamped again (as Karpenter does).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator.api import nodepool, wellknown

__all__ = [
    "HASH_VERSION",
    "SPEC_HASH_ANNOTATION",
    "SpecHash",
    "drift_of",
    "drifted_sections",
    "needs_stamp",
    "requirements_drifted",
    "spec_hash",
    "zone_drifted",
]

#: On a pool's Node: the hash of the spec it was made from (``SpecHash.text``).
SPEC_HASH_ANNOTATION: Final = wellknown.SPEC_HASH_ANNOTATION
HASH_VERSION: Final = "v1"
_DIGEST_CHARS: Final = 10


@dataclasses.dataclass(frozen=True)
class SpecHash:
    """A hash per section of what shapes a node, under one ``version``."""

    version: str
    sections: Mapping[str, str]

    @property
    def text(self) -> str:
        """As the annotation holds it: ``v1;capacity=…;labels=…``."""
        parts = (f"{name}={digest}" for name, digest in sorted(self.sections.items()))
        return ";".join((self.version, *parts))

    @classmethod
    def parse(cls, text: str) -> SpecHash | None:
        """The hash an annotation holds; None when it is not one (edited by hand)."""
        version, _, rest = text.partition(";")
        sections: dict[str, str] = {}
        for part in rest.split(";") if rest else ():
            name, sep, digest = part.partition("=")
            if not sep or not name or not digest:
                return None
            sections[name] = digest
        return cls(version, sections) if version and sections else None


def _digest(value: object) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:_DIGEST_CHARS]


def _taint_key(taint: nodepool.Taint) -> tuple[str, str, str]:
    return (taint.key, taint.value or "", taint.effect)


def spec_hash(spec: nodepool.NodePoolSpec) -> SpecHash:
    """The hash a Node made from ``spec`` records (ValueError on quantities the CRD
    refuses)."""
    template = spec.template
    reserved = {name: nodepool.amount_of(name, text) for name, text in template.reserved.items()}
    provider: dict[str, Any] | None = (
        None if template.provider is None else template.provider.to_dict()
    )
    sections: dict[str, object] = {
        "reserved": reserved,
        "region": template.region,
        "labels": dict(template.labels),
        "taints": [t.to_dict() for t in sorted(template.taints, key=_taint_key)],
        "provider": provider,
    }
    if not spec.requirements:
        # With requirements the offering shapes the Node (see the module's docstring).
        sections["capacity"] = nodepool.template_capacity(template)
    return SpecHash(HASH_VERSION, {name: _digest(value) for name, value in sections.items()})


def drifted_sections(recorded: SpecHash, current: SpecHash) -> tuple[str, ...]:
    """The sections of ``current`` that changed since the Node was made, sorted; none
    when the Node was stamped under another hash version (it is stamped again instead).
    A section only ``recorded`` has is one the pool no longer judges by hash."""
    if recorded.version != current.version:
        return ()
    return tuple(
        sorted(n for n, digest in current.sections.items() if recorded.sections.get(n) != digest)
    )


def needs_stamp(node: Mapping[str, Any], current: SpecHash) -> bool:
    """Whether ``node`` is to be stamped with ``current``: it records no hash (made before
    the operator recorded them), one that is not a hash (edited by hand), or one of another
    ``HASH_VERSION`` (hashed by an older operator: judged by nothing, so stamped again)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
    recorded = None if text is None else SpecHash.parse(str(text))
    return recorded is None or recorded.version != current.version


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    return labels


def requirements_drifted(node: Mapping[str, Any], spec: nodepool.NodePoolSpec) -> bool:
    """Whether the Node's offering labels no longer meet its pool's requirements."""
    return bool(spec.requirements) and not spec.requirements.allows(_labels(node))


def drift_of(
    node: Mapping[str, Any], spec: nodepool.NodePoolSpec, current: SpecHash
) -> tuple[str, ...]:
    """What changed since ``node`` was made (sections of its hash, ``zones``,
    ``requirements``); none when it has not drifted, or has no readable hash yet."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(SPEC_HASH_ANNOTATION)
    recorded = None if text is None else SpecHash.parse(str(text))
    changed = [] if recorded is None else list(drifted_sections(recorded, current))
    if zone_drifted(node, spec):
        changed.append("zones")
    if requirements_drifted(node, spec):
        changed.append("requirements")
    return tuple(changed)


def zone_drifted(node: Mapping[str, Any], spec: nodepool.NodePoolSpec) -> bool:
    """Whether the Node is in a zone its pool no longer allows."""
    zones = spec.template.zones
    if not zones:
        return False
    zone = _labels(node).get(wellknown.ZONE_LABEL)
    return zone is not None and zone not in zones
