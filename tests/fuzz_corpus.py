"""A seeded corpus of bad (and oddly good) NodePools, Autoscalers and ScaleRequests.

Each ``Case`` is one write a user could send: the object (or patch), the category it
belongs to, what the server should answer when the generator knows (``refused`` naming
``field``, or ``accepted``), and ``either`` when only the server's answer can tell (the
test then checks that a refusal is a 4xx naming the field, or that the accepted object
is handled). Label and taint cases carry an ``oracle``: the test asks the server to
validate a Node with the same labels or taints (a dry run), since the CRD promises to
accept exactly what a Node accepts.

The same seed gives the same corpus, so a failure is reproduced by its seed and index.
"""

from __future__ import annotations

import dataclasses
import random
import re
import string
from collections.abc import Callable
from typing import Any, Final, Literal

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import nodepool_schema, quantity
from nodepool_operator.api import scalerequest as scalerequest_api

__all__ = [
    "AUTOSCALERS",
    "CATEGORIES",
    "NODEPOOLS",
    "SCALEREQUESTS",
    "Case",
    "Fixtures",
    "build",
]

NODEPOOLS: Final = "nodepools"
AUTOSCALERS: Final = "autoscalers"
SCALEREQUESTS: Final = "scalerequests"

Expect = Literal["refused", "accepted", "either"]
Oracle = Literal["node-labels", "node-taints"]
Operation = Literal["create", "patch", "scale"]

CATEGORIES: Final = (
    "wrong-type",
    "huge-number",
    "negative-number",
    "quantity",
    "label-syntax",
    "taint-syntax",
    "missing-field",
    "unknown-field",
    "metadata",
    "missing-pool",
    "request-storm",
)


@dataclasses.dataclass(frozen=True)
class Fixtures:
    """Objects that exist before the corpus is sent, which some cases refer to.

    ``storm_pool``: the pool storms of ScaleRequests aim at; ``watched_pool``: the pool
    the corpus's Autoscalers name when they name an existing one; ``patched_pool``: the
    pool the patch and /scale cases write to.
    """

    storm_pool: str
    watched_pool: str
    patched_pool: str
    max_nodes: int = 3


@dataclasses.dataclass(frozen=True)
class Case:
    index: int
    category: str
    kind: str
    body: Any
    expect: Expect
    # The field a refusal must name (a path such as "spec.targetNodes", or alternatives
    # separated by "|"); None: any.
    field: str | None = None
    oracle: Oracle | None = None
    operation: Operation = "create"
    # fieldValidation=Strict, as kubectl sends it: unknown fields are refused, not dropped.
    strict: bool = False
    # A burst: every case with the same storm id is sent at once.
    storm: int | None = None
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        metadata = self.body.get("metadata") if isinstance(self.body, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        return name if isinstance(name, str) else ""


# Values of the wrong JSON type for an integer, a string, an object and an array field.
_NOT_INTEGER: Final = ("3", "", True, 1.5, [1], {"n": 1}, "0x10", "1e3")
_NOT_STRING: Final = (4, 1.5, True, ["4"], {"v": "4"})
# Quantities are int-or-string, as Kubernetes takes them: an integer is one.
_NOT_QUANTITY: Final = (1.5, True, ["4"], {"v": "4"})
_NOT_OBJECT: Final = ("a=b", 1, True, ["a", "b"])
_NOT_ARRAY: Final = ("us-east-1a", 1, {"0": "a"}, True)

_HUGE: Final = (1001, 4096, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30)
_NEGATIVE: Final = (-1, -2, -1000, -(2**31), -(2**31) - 1, -(2**63), -(10**30))

# Integer fields of a NodePool spec: (path under spec, largest accepted value).
_POOL_INTEGERS: Final = (
    ("targetNodes", nodepool_api.MAX_NODES_PER_POOL),
    ("minNodes", nodepool_api.MAX_NODES_PER_POOL),
    ("maxNodes", nodepool_api.MAX_NODES_PER_POOL),
    ("weight", nodepool_api.MAX_WEIGHT),
    ("drainTimeoutSeconds", None),
    ("notReadyTimeoutSeconds", None),
    ("registrationTimeoutSeconds", None),
    ("template.pods", None),
)
_INT32_MAX: Final = 2**31 - 1

_LABEL_ALPHABET: Final = string.ascii_letters + string.digits + "-_./" + " é:#\n"
_SAFE_NAME: Final = string.ascii_lowercase + string.digits


class _Generator:
    def __init__(self, seed: int, fixtures: Fixtures) -> None:
        self.random = random.Random(seed)
        self.fixtures = fixtures
        self.cases: list[Case] = []
        self._storms = 0

    # -- helpers -----------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        return f"fz-{prefix}-{len(self.cases)}-" + "".join(self.random.choices(_SAFE_NAME, k=4))

    def _add(self, case_kind: str, category: str, body: Any, expect: Expect, **kw: Any) -> None:
        self.cases.append(Case(len(self.cases), category, case_kind, body, expect, **kw))

    def _pool(self, *, nodes: int = 0) -> dict[str, Any]:
        """A valid NodePool of 0 nodes (or ``nodes``), the base every pool case mutates."""
        spec = nodepool_api.NodePoolSpec(
            target_nodes=nodes,
            max_nodes=self.fixtures.max_nodes,
            template=nodepool_api.NodeTemplate(cpu="2", memory="4Gi", pods=20),
        )
        return nodepool_api.manifest(self._name("np"), spec)

    def _autoscaler(self, pool: str) -> dict[str, Any]:
        return {
            "apiVersion": "nodepool.dev/v1alpha1",
            "kind": "Autoscaler",
            "metadata": {"name": self._name("nas")},
            "spec": {"nodePoolName": pool, "scanIntervalSeconds": 30},
        }

    def _request(self, pool: str, target: int) -> dict[str, Any]:
        return {
            "apiVersion": "nodepool.dev/v1alpha1",
            "kind": "ScaleRequest",
            "metadata": {"name": self._name("sr")},
            "spec": {"nodePoolName": pool, "targetNodes": target, "requester": "fuzz"},
        }

    def _missing_pool_name(self) -> str:
        return "absent-" + "".join(self.random.choices(_SAFE_NAME, k=8))

    def _some_nodes(self) -> int:
        # Rarely a Node or two, so accepted pools do real work without flooding kwok.
        return self.random.choices((0, 1, 2), weights=(80, 15, 5))[0]

    # -- NodePools ---------------------------------------------------------------------

    def pool_wrong_type(self) -> None:
        body = self._pool()
        kind, path, value = self.random.choice(
            [
                ("int", f"spec.{p}", v)
                for p, _ in _POOL_INTEGERS
                for v in _NOT_INTEGER
                if not (isinstance(v, float) and v.is_integer())
            ]
            + [
                ("quantity", f"spec.template.{p}", v)
                for p in ("cpu", "memory")
                for v in _NOT_QUANTITY
            ]
            + [
                ("obj", f"spec.template.{p}", v)
                for p in ("labels", "reserved")
                for v in _NOT_OBJECT
            ]
            + [("arr", f"spec.template.{p}", v) for p in ("zones", "taints") for v in _NOT_ARRAY]
            + [("obj", "spec.template", v) for v in _NOT_OBJECT]
            + [("obj", "spec", v) for v in _NOT_OBJECT]
        )
        _set(body, path, value)
        self._add(NODEPOOLS, "wrong-type", body, "refused", field=path, notes={"type": kind})

    def pool_huge(self) -> None:
        path, limit = self.random.choice(_POOL_INTEGERS)
        value = self.random.choice(_HUGE)
        body = self._pool()
        if path == "targetNodes":
            body["spec"]["maxNodes"] = nodepool_api.MAX_NODES_PER_POOL
        _set(body, f"spec.{path}", value)
        bound = _INT32_MAX if limit is None else limit
        expect: Expect = "refused" if value > bound else "accepted"
        self._add(NODEPOOLS, "huge-number", body, expect, field=f"spec.{path}")

    def pool_huge_but_valid(self) -> None:
        """The largest values the API allows, with no Node to make: maxNodes 1000,
        timeouts of 68 years, 2^31-1 pods a Node."""
        body = self._pool()
        for path, limit in self.random.sample(_POOL_INTEGERS, k=3):
            if path in ("targetNodes", "minNodes"):
                continue
            _set(body, f"spec.{path}", _INT32_MAX if limit is None else limit)
        self._add(NODEPOOLS, "huge-number", body, "accepted")

    def pool_integral_float(self) -> None:
        """An integer field written as a float with no fraction (3.0): JSON has one number
        type, so the server takes it as the integer, and the operator must read it so."""
        body = self._pool()
        path = self.random.choice(
            ("weight", "template.pods", "drainTimeoutSeconds", "maxNodes", "minNodes")
        )
        _set(body, f"spec.{path}", float(self.random.randint(1, 3)))
        if path.endswith("Nodes"):
            # Except where a CEL rule reads the field: the server's CEL refuses a float
            # where the schema says integer ("expected int, got float64"), naming the
            # rule's object, spec.
            self._add(NODEPOOLS, "wrong-type", body, "refused", field="spec")
        else:
            self._add(NODEPOOLS, "wrong-type", body, "accepted", field=f"spec.{path}")

    def pool_negative(self) -> None:
        path, _ = self.random.choice(_POOL_INTEGERS)
        body = self._pool()
        _set(body, f"spec.{path}", self.random.choice(_NEGATIVE))
        self._add(NODEPOOLS, "negative-number", body, "refused", field=f"spec.{path}")

    def pool_inverted_bounds(self) -> None:
        body = self._pool()
        low = self.random.randint(1, 5)
        body["spec"].update(minNodes=low, maxNodes=low - 1, targetNodes=0)
        self._add(NODEPOOLS, "negative-number", body, "refused", field="spec")

    def pool_quantity(self) -> None:
        body = self._pool(nodes=self._some_nodes())
        path = self.random.choice(("cpu", "memory", "ephemeralStorage"))
        text = _quantity_text(self.random)
        body["spec"]["template"][path] = text
        expect: Expect = "accepted" if _positive_quantity(text) else "refused"
        if expect == "accepted" and body["spec"]["targetNodes"]:
            # A Node's memory below one byte is no Node: keep created Nodes plausible.
            body["spec"]["targetNodes"] = 0
        self._add(NODEPOOLS, "quantity", body, expect, field=f"spec.template.{path}")

    def pool_reserved_quantity(self) -> None:
        body = self._pool()
        key = self.random.choice(("cpu", "memory", "pods", "ephemeral-storage", "example.com/gpu"))
        body["spec"]["template"]["reserved"] = {key: _quantity_text(self.random)}
        self._add(NODEPOOLS, "quantity", body, "either", field="spec.template")

    def pool_labels(self) -> None:
        body = self._pool(nodes=self._some_nodes())
        count = self.random.randint(1, 3)
        labels = {_label_key(self.random): _label_value(self.random) for _ in range(count)}
        body["spec"]["template"]["labels"] = labels
        self._add(
            NODEPOOLS,
            "label-syntax",
            body,
            "either",
            field="spec.template.labels",
            oracle="node-labels",
            notes={"labels": labels},
        )

    def pool_topology(self) -> None:
        body = self._pool()
        value = _label_value(self.random)
        where = self.random.choice(("zones", "region"))
        body["spec"]["template"][where] = [value] if where == "zones" else value
        valid = value != "" and _valid_label_value(value)
        expect: Expect = "accepted" if valid else "refused"
        self._add(NODEPOOLS, "label-syntax", body, expect, field=f"spec.template.{where}")

    def pool_taints(self) -> None:
        body = self._pool(nodes=self._some_nodes())
        taints = []
        for _ in range(self.random.randint(1, 3)):
            taint: dict[str, Any] = {
                "key": _label_key(self.random),
                "effect": self.random.choice(
                    [*nodepool_api.TAINT_EFFECTS, "Never", "noschedule", ""]
                ),
            }
            if self.random.random() < 0.6:
                taint["value"] = _label_value(self.random)
            taints.append(taint)
        if self.random.random() < 0.15:
            taints.append(dict(taints[0]))  # the same key and effect twice
        body["spec"]["template"]["taints"] = taints
        self._add(
            NODEPOOLS,
            "taint-syntax",
            body,
            "either",
            field="spec.template.taints",
            oracle="node-taints",
            notes={"taints": taints},
        )

    def pool_missing_field(self) -> None:
        body = self._pool()
        path, expect, where = self.random.choice(
            [
                ("spec", "accepted", None),
                ("spec.template", "accepted", None),
                ("spec.template.cpu", "accepted", None),
                ("spec.targetNodes", "accepted", None),
                ("metadata.name", "refused", "metadata.name"),
                ("apiVersion", "refused", None),
                ("kind", "refused", None),
            ]
        )
        _delete(body, path)
        self._add(NODEPOOLS, "missing-field", body, expect, field=where)

    def pool_taint_missing_field(self) -> None:
        body = self._pool()
        missing = self.random.choice(("key", "effect"))
        taint = {"key": "example.com/x", "value": "v", "effect": "NoSchedule"}
        del taint[missing]
        body["spec"]["template"]["taints"] = [taint]
        where = f"spec.template.taints[0].{missing}"
        self._add(NODEPOOLS, "missing-field", body, "refused", field=where)

    def pool_unknown_field(self) -> None:
        body = self._pool()
        where = self.random.choice(("spec", "spec.template", "status", ""))
        key = self.random.choice(("replicas", "targetnodes", "Target_Nodes", "nodes", "x-extra"))
        path = f"{where}.{key}" if where else key
        _set(body, path, self.random.choice((1, "x", {"a": 1}, [1])))
        strict = self.random.random() < 0.5
        # Without Strict the server drops what the schema does not know (and a status
        # sent on create is dropped whole): the object is accepted without it.
        self._add(
            NODEPOOLS,
            "unknown-field",
            body,
            "refused" if strict else "accepted",
            field=path,
            strict=strict,
            notes={"unknown": path},
        )

    def pool_metadata(self) -> None:
        body = self._pool()
        choice = self.random.randrange(6)
        if choice == 0:
            body["metadata"]["name"] = self._name("NP").upper()
            self._add(NODEPOOLS, "metadata", body, "refused", field="metadata.name")
        elif choice == 1:
            body["metadata"]["name"] = "x" * self.random.choice((254, 300))
            self._add(NODEPOOLS, "metadata", body, "refused", field="metadata.name")
        elif choice == 2:
            # A valid object name, maybe too long to make the label values of the pool's
            # Nodes (the pool's name, and the Node's own as its hostname); with a Node to
            # make, so that an accepted name is put to the test.
            body = self._pool(nodes=1)
            length = self.random.randint(50, 253)
            stem = self._name("long")
            body["metadata"]["name"] = (stem + "-" + "n" * length)[:length]
            fits: Expect = (
                "accepted" if length <= nodepool_schema.MAX_POOL_NAME_LENGTH else "refused"
            )
            self._add(NODEPOOLS, "metadata", body, fits, field="metadata.name")
        elif choice == 3:
            body["metadata"]["labels"] = {_label_key(self.random): _label_value(self.random)}
            self._add(NODEPOOLS, "metadata", body, "either", field="metadata.labels")
        elif choice == 4:
            body["metadata"]["name"] = self.random.choice(("..", ".", "a..b", "-a", "a_b", "a b"))
            self._add(NODEPOOLS, "metadata", body, "refused", field="metadata.name")
        else:
            body["kind"] = self.random.choice(("Autoscaler", "Nodepool", "Pod"))
            self._add(NODEPOOLS, "metadata", body, "refused", field=None)

    def pool_patch(self) -> None:
        """A merge patch or a /scale write to an existing pool with a bad value."""
        notes = {"target": self.fixtures.patched_pool}
        value = self.random.choice([*_HUGE, *_NEGATIVE, *_NOT_INTEGER[:3]])
        number = isinstance(value, int) and not isinstance(value, bool)
        category = "wrong-type" if not number else "negative-number" if value < 0 else "huge-number"
        if self.random.random() < 0.5:
            # /scale decodes into autoscaling/v1 Scale first: what is no int32 is refused
            # there, naming the Scale's field; the rest by the CRD, naming the pool's.
            int32 = number and -(2**31) <= value < 2**31
            where = "spec.targetNodes" if int32 else "spec.replicas|spec.targetNodes"
            body = {"spec": {"replicas": value}}
            self._add(
                NODEPOOLS, category, body, "refused", field=where, operation="scale", notes=notes
            )
        else:
            path = self.random.choice(("targetNodes", "maxNodes", "minNodes"))
            body = {"spec": {path: value}}
            self._add(
                NODEPOOLS,
                category,
                body,
                "refused",
                field=f"spec.{path}",
                operation="patch",
                notes=notes,
            )

    # -- Autoscalers -------------------------------------------------------------------

    def autoscaler_numbers(self) -> None:
        body = self._autoscaler(self.fixtures.watched_pool)
        path, low, high = self.random.choice(
            (
                ("spec.scanIntervalSeconds", 1, 3600),
                ("spec.batchWindowSeconds", 0, 60),
                ("spec.scaleDown.unneededSeconds", 0, _INT32_MAX),
            )
        )
        value = self.random.choice([*_HUGE, *_NEGATIVE, 0, high, high + 1, 0.5, 1e308, -0.0])
        _set(body, path, value)
        # JSON has one number type: 0.0 or -0.0 is an integer as good as 0.
        integral = isinstance(value, int) or float(value).is_integer()
        number_ok = path.endswith("batchWindowSeconds") or integral
        expect: Expect = "accepted" if number_ok and low <= value <= high else "refused"
        category = "negative-number" if value < 0 else "huge-number"
        self._add(AUTOSCALERS, category, body, expect, field=path)

    def autoscaler_wrong_type(self) -> None:
        body = self._autoscaler(self.fixtures.watched_pool)
        path, value = self.random.choice(
            [("spec.nodePoolName", v) for v in _NOT_STRING]
            + [("spec.scanIntervalSeconds", v) for v in _NOT_INTEGER if v != 1.5]
            + [("spec.namespaces", v) for v in _NOT_ARRAY]
            + [("spec.scaleDown", v) for v in _NOT_OBJECT]
            + [("spec.scaleDown.enabled", v) for v in ("true", 1, "yes")]
        )
        _set(body, path, value)
        self._add(AUTOSCALERS, "wrong-type", body, "refused", field=path)

    def autoscaler_missing(self) -> None:
        body = self._autoscaler(self.fixtures.watched_pool)
        path, expect, where = self.random.choice(
            (
                ("spec", "refused", "spec"),
                ("spec.nodePoolName", "refused", "spec.nodePoolName"),
                ("spec.scanIntervalSeconds", "accepted", None),
            )
        )
        _delete(body, path)
        self._add(AUTOSCALERS, "missing-field", body, expect, field=where)

    def autoscaler_unknown(self) -> None:
        body = self._autoscaler(self._missing_pool_name())
        path = self.random.choice(("spec.pool", "spec.scaleDown.after", "spec.maxNodes"))
        _set(body, path, 5)
        strict = self.random.random() < 0.5
        expect: Expect = "refused" if strict else "accepted"
        self._add(AUTOSCALERS, "unknown-field", body, expect, field=path, strict=strict)

    def autoscaler_odd_names(self) -> None:
        """Pool and namespace names no NodePool or Namespace can have."""
        odd = self.random.choice(
            ("..", ".", "x/status", "a/b", "UPPER", "a b", "%2e%2e", "pool?x=1", "é", "a" * 253)
        )
        body = self._autoscaler(self._missing_pool_name())
        where = self.random.choice(("spec.nodePoolName", "spec.namespaces"))
        _set(body, where, [odd] if where == "spec.namespaces" else odd)
        # No pool or namespace can have such a name: refused, not watched in vain.
        self._add(AUTOSCALERS, "missing-pool", body, "refused", field=where)

    def autoscaler_missing_pool(self) -> None:
        body = self._autoscaler(self._missing_pool_name())
        if self.random.random() < 0.5:
            # The longest names: the operator's events about it must still fit a name.
            length = self.random.randint(200, 253)
            body["metadata"]["name"] = (body["metadata"]["name"] + "-" + "n" * length)[:length]
        self._add(AUTOSCALERS, "missing-pool", body, "accepted")

    # -- ScaleRequests -----------------------------------------------------------------

    def request_numbers(self) -> None:
        body = self._request(self._missing_pool_name(), 1)
        path = self.random.choice(("spec.targetNodes", "spec.basedOnTargetNodes"))
        value = self.random.choice([*_HUGE, *_NEGATIVE])
        _set(body, path, value)
        top = nodepool_api.MAX_NODES_PER_POOL if path == "spec.targetNodes" else _INT32_MAX
        expect: Expect = "refused" if value < 0 or value > top else "accepted"
        category = "negative-number" if value < 0 else "huge-number"
        self._add(SCALEREQUESTS, category, body, expect, field=path)

    def request_wrong_type(self) -> None:
        body = self._request(self._missing_pool_name(), 1)
        path, value = self.random.choice(
            [("spec.targetNodes", v) for v in _NOT_INTEGER if v != 1.5]
            + [("spec.nodePoolName", v) for v in _NOT_STRING]
            + [("spec.reason", v) for v in _NOT_STRING]
            + [("spec", v) for v in _NOT_OBJECT]
        )
        _set(body, path, value)
        self._add(SCALEREQUESTS, "wrong-type", body, "refused", field=path)

    def request_missing(self) -> None:
        body = self._request(self._missing_pool_name(), 1)
        path = self.random.choice(("spec", "spec.nodePoolName", "spec.targetNodes"))
        _delete(body, path)
        self._add(SCALEREQUESTS, "missing-field", body, "refused", field=path)

    def request_long_text(self) -> None:
        body = self._request(self._missing_pool_name(), 1)
        path, top = self.random.choice(
            (("spec.reason", 1024), ("spec.requester", scalerequest_api.MAX_REQUESTER_LENGTH))
        )
        length = self.random.choice((top, top + 1, 10 * top))
        _set(body, path, "r" * length)
        expect: Expect = "accepted" if length <= top else "refused"
        self._add(SCALEREQUESTS, "huge-number", body, expect, field=path)

    def request_missing_pool(self) -> None:
        pool = self.random.choice(
            (self._missing_pool_name(), "..", "x/status", "UPPER", "a b", "a" * 253)
        )
        body = self._request(pool, self.random.randint(0, 3))
        # A name no pool can have is refused; a pool that could exist but does not is
        # the NodePool controller's to answer (Rejected).
        plain = pool.startswith("absent-")
        self._add(
            SCALEREQUESTS,
            "missing-pool",
            body,
            "accepted" if plain else "refused",
            field="spec.nodePoolName",
        )

    def request_unknown(self) -> None:
        body = self._request(self._missing_pool_name(), 1)
        path = self.random.choice(("spec.pool", "spec.replicas", "spec.force"))
        _set(body, path, True)
        strict = self.random.random() < 0.5
        expect: Expect = "refused" if strict else "accepted"
        self._add(SCALEREQUESTS, "unknown-field", body, expect, field=path, strict=strict)

    def request_storm(self, size: int) -> None:
        """``size`` requests at once: most for the storm pool, targets on both sides of
        its maxNodes, some for a pool that does not exist."""
        storm = self._storms
        self._storms += 1
        absent = self._missing_pool_name()
        for _ in range(size):
            to_missing = self.random.random() < 0.2
            pool = absent if to_missing else self.fixtures.storm_pool
            target = self.random.randint(0, self.fixtures.max_nodes + 2)
            body = self._request(pool, target)
            if not to_missing and self.random.random() < 0.3:
                body["spec"]["basedOnTargetNodes"] = self.random.randint(0, self.fixtures.max_nodes)
            self._add(SCALEREQUESTS, "request-storm", body, "accepted", storm=storm)


def _set(body: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        child = body.get(key)
        if not isinstance(child, dict):
            child = body[key] = {}
        body = child
    body[keys[-1]] = value


def _delete(body: dict[str, Any], path: str) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        body = body[key]
    body.pop(keys[-1], None)


def _quantity_text(rng: random.Random) -> str:
    """Texts near the quantity grammar: valid ones, and each way of being a little off."""
    # "\u0661" is an Arabic-Indic one: a digit to Python's \d, not to the API server.
    numbers = ("4", "0", "0.5", ".5", "5.", "1.25", "0.0", "007", "", "\u0661")
    number = rng.choice((*numbers, "1" * rng.randint(1, 70)))
    sign = rng.choices(("", "+", "-"), weights=(80, 10, 10))[0]
    suffix = rng.choice(
        ("", "m", "Mi", "Gi", "Ki", "k", "K", "G", "GB", "gi", "e3", "E3", "e-3", "e100", "E",
         "n", "u", "Ti ", " ", "\n", "e", "i")
    )  # fmt: skip
    return sign + number + suffix


def _positive_quantity(text: str) -> bool:
    """The CRD's promise: a capacity is accepted exactly when the operator parses it > 0."""
    try:
        return quantity.parse_non_negative_quantity(text) > 0
    except ValueError:
        return False


def _valid_label_value(value: str) -> bool:
    return (
        len(value) <= nodepool_schema.MAX_LABEL_VALUE_LENGTH
        and re.fullmatch(nodepool_schema.LABEL_VALUE_PATTERN.strip("^$"), value) is not None
    )


def _label_key(rng: random.Random) -> str:
    # Weighted towards keys that are valid or nearly so, so that both answers are common.
    shape = rng.choices(range(5), weights=(1, 3, 2, 3, 1))[0]
    if shape == 0:
        return "".join(rng.choices(_LABEL_ALPHABET, k=rng.randint(0, 12)))
    name = _identifier(rng, rng.choice((1, 5, 62, 63, 64)))
    if shape == 1:
        return name
    prefix = ".".join(_identifier(rng, 63).lower() for _ in range(4))[: rng.choice((250, 253, 254))]
    if shape == 2:
        return f"{prefix}/{name}"
    small = rng.choice(("example.com", "Example.com", "a.b", "-a.com", "kubernetes.io", "x"))
    return f"{small}/{name}" if shape == 3 else f"{small}/{name}/extra"


def _label_value(rng: random.Random) -> str:
    shape = rng.choices(range(3), weights=(1, 4, 1))[0]
    if shape == 0:
        return ""
    if shape == 1:
        return _identifier(rng, rng.choice((1, 30, 63, 64, 100)))
    return "".join(rng.choices(_LABEL_ALPHABET.replace("/", ""), k=rng.randint(1, 10)))


def _identifier(rng: random.Random, length: int) -> str:
    """Letters, digits and the inner punctuation of a qualified name, sometimes at the ends."""
    inner = "".join(rng.choices(string.ascii_letters + string.digits + "-_.", k=length))
    if rng.random() < 0.8:
        ends = string.ascii_lowercase + string.digits
        inner = rng.choice(ends) + inner[1:-1] + rng.choice(ends) if length > 1 else "a"
    return inner[:length]


# How often each generator runs, per 100 cases.
_MIX: Final[tuple[tuple[str, int], ...]] = (
    ("pool_wrong_type", 8),
    ("pool_huge", 5),
    ("pool_huge_but_valid", 1),
    ("pool_integral_float", 1),
    ("pool_negative", 4),
    ("pool_inverted_bounds", 1),
    ("pool_quantity", 10),
    ("pool_reserved_quantity", 2),
    ("pool_labels", 9),
    ("pool_topology", 3),
    ("pool_taints", 6),
    ("pool_missing_field", 3),
    ("pool_taint_missing_field", 1),
    ("pool_unknown_field", 3),
    ("pool_metadata", 4),
    ("pool_patch", 3),
    ("autoscaler_numbers", 5),
    ("autoscaler_wrong_type", 4),
    ("autoscaler_missing", 2),
    ("autoscaler_unknown", 2),
    ("autoscaler_odd_names", 2),
    ("autoscaler_missing_pool", 2),
    ("request_numbers", 4),
    ("request_wrong_type", 4),
    ("request_missing", 2),
    ("request_long_text", 2),
    ("request_missing_pool", 3),
    ("request_unknown", 2),
)


def build(*, seed: int, size: int, fixtures: Fixtures, storm_size: int = 40) -> list[Case]:
    """``size`` cases (at least), a fixed share of them request storms of ``storm_size``."""
    generator = _Generator(seed, fixtures)
    storms = max(1, size // 500)
    singles = size - storms * storm_size
    names = [name for name, _ in _MIX]
    weights = [weight for _, weight in _MIX]
    makers: dict[str, Callable[[], None]] = {n: getattr(generator, n) for n in names}
    while len(generator.cases) < singles:
        makers[generator.random.choices(names, weights=weights)[0]]()
    for _ in range(storms):
        generator.request_storm(storm_size)
    return generator.cases
