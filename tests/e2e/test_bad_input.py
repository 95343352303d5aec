"""Bad input, fuzzed: a seeded corpus of NodePools, Autoscalers and ScaleRequests sent to
the real API server while the operator runs.

Each write is either refused with a 4xx whose message names the field at fault, or
accepted, parsed by the operator's own types, and handled: a NodePool gets
``observedGeneration`` and its three conditions, an Autoscaler its Ready condition (and a
Warning event when it is False), a ScaleRequest an answer (phase and message). Meanwhile
the operator stays up and logs no error, nothing it writes is refused by the server, its
writes per object stay within the bounds below, and once everything is answered it
writes nothing at all.

``NODEPOOL_FUZZ_CASES`` (default 1000) and ``NODEPOOL_FUZZ_SEED`` choose the corpus;
the figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

import fuzz_corpus
import workloads
from e2e.scenes import World
from fuzz_corpus import AUTOSCALERS, NODEPOOLS, SCALEREQUESTS, Case
from harness import MERGE, POOLS, Operator, SimCloud, pool_body, remove_pool, wait_for
from nodepool_devtools.cluster import audit
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import meta, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api

SEED = int(os.environ.get("NODEPOOL_FUZZ_SEED", "20261130"))
SIZE = int(os.environ.get("NODEPOOL_FUZZ_CASES", "1000"))
OPERATOR_USER = "nodepool-operator"
SENDERS = 8  # writes in flight at once, outside storms
QUIET_SECONDS = 15.0
# Every event the operator writes for a cluster-scoped object goes to this namespace.
EVENTS_NAMESPACE = "default"

# Most writes the operator may make about one object (its own, its status, its Events,
# a pool's Nodes) while the corpus is handled, cleanup aside, and why:
WRITE_BOUNDS = {
    # the finalizer patch and the first status; one more status write when a cache lags.
    NODEPOOLS: 3,
    # its status, one Warning event when Ready turns False, and one more status write when
    # the pods it counts move (counts-only writes: at most one per scan interval).
    AUTOSCALERS: 3,
    # one status write: the answer; and one Warning event when it is Rejected.
    SCALEREQUESTS: 2,
}
# And per Node a pool gets: the Node's create, the ScaleUp event (or a patch of its
# count), a status step while it boots and one when it is Ready, its unregistered taint's
# removal; one spare.
NODE_WRITES = 6


@dataclass
class Outcome:
    case: Case
    code: int
    message: str = ""
    stored: dict[str, Any] | None = None
    oracle_accepts: bool | None = None

    @property
    def refused(self) -> bool:
        return self.code >= 400


@dataclass
class Figures:
    sent: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    handled: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    codes: Counter[int] = field(default_factory=Counter)


def _group(kind: str) -> tuple[str, str, str]:
    return (meta.GROUP, meta.VERSION, kind)


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message", error.body))
    except ValueError:
        return str(error.body)


async def _answer(call: Awaitable[Any]) -> tuple[int, str, dict[str, Any] | None]:
    try:
        stored = await call
    except ApiException as error:
        return error.status, _message(error), None
    return 201, "", stored


async def _send(custom: client.CustomObjectsApi, case: Case) -> Outcome:
    group = _group(case.kind)
    if case.operation == "scale":
        call = custom.patch_cluster_custom_object_scale(
            *group, case.notes["target"], case.body, _content_type=MERGE
        )
    elif case.operation == "patch":
        call = custom.patch_cluster_custom_object(
            *group, case.notes["target"], case.body, _content_type=MERGE
        )
    else:
        validation = "Strict" if case.strict else None
        call = custom.create_cluster_custom_object(*group, case.body, field_validation=validation)
    code, message, stored = await _answer(call)
    return Outcome(case, code, message, stored)


async def _node_accepts(core: client.CoreV1Api, case: Case) -> bool:
    """The server's own verdict on a Node with the case's labels or taints (a dry run)."""
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fuzz"}}
    if case.oracle == "node-labels":
        node["metadata"]["labels"] = case.notes["labels"]
    else:
        node["spec"] = {"taints": case.notes["taints"]}
    code, _, _ = await _answer(core.create_node(node, dry_run="All"))
    assert code in (201, 422), f"dry-run Node for case {case.index}: {code}"
    return code == 201


async def _send_all(api_client: client.ApiClient, cases: list[Case]) -> list[Outcome]:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    limit = asyncio.Semaphore(SENDERS)

    async def one(case: Case) -> Outcome:
        async with limit:
            oracle = await _node_accepts(core, case) if case.oracle else None
            outcome = await _send(custom, case)
        outcome.oracle_accepts = oracle
        return outcome

    singles = [c for c in cases if c.storm is None]
    outcomes = list(await asyncio.gather(*(one(c) for c in singles)))
    for storm in sorted({c.storm for c in cases if c.storm is not None}):
        burst = [c for c in cases if c.storm == storm]
        outcomes += await asyncio.gather(*(_send(custom, c) for c in burst))
    return outcomes


def _check_answer(outcome: Outcome) -> str | None:
    """What is wrong with the server's answer to one case, or None."""
    case = outcome.case
    if outcome.code >= 500 or (outcome.code >= 300 and outcome.code < 400):
        return f"answered {outcome.code}: {outcome.message}"
    expect = case.expect
    if case.oracle is not None:
        expect = "accepted" if outcome.oracle_accepts else "refused"
    if expect == "refused" and not outcome.refused:
        return "accepted, but should have been refused"
    if expect == "accepted" and outcome.refused:
        return f"refused ({outcome.code}), but valid: {outcome.message}"
    if outcome.refused:
        if outcome.code not in (400, 422):
            return f"refused with {outcome.code}: {outcome.message}"
        if case.field is not None and not any(f in outcome.message for f in case.field.split("|")):
            return f"refusal does not name {case.field}: {outcome.message}"
    return None


def _check_parsed(outcome: Outcome) -> str | None:
    """An accepted object must parse with the operator's own types (else it cannot act)."""
    if outcome.stored is None or outcome.case.operation != "create":
        return None
    parse = {
        NODEPOOLS: nodepool_api.spec_of,
        AUTOSCALERS: autoscaler_api.spec_of,
        SCALEREQUESTS: scalerequest_api.spec_of,
    }
    try:
        parse[outcome.case.kind](outcome.stored)
    except (ValueError, TypeError, KeyError) as error:
        return f"stored object the operator cannot parse: {error}"
    unknown = outcome.case.notes.get("unknown")
    if unknown and _lookup(outcome.stored, unknown) is not None:
        return f"unknown field {unknown} was stored"
    return None


def _lookup(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


class ServerView:
    """What the server holds of the accepted objects, and the operator's events on them."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    async def objects(self, kind: str) -> dict[str, dict[str, Any]]:
        listed = await self.custom.list_cluster_custom_object(*_group(kind))
        return {o["metadata"]["name"]: o for o in listed["items"]}

    async def events(self) -> dict[str, set[tuple[str, str]]]:
        """(type, reason) of the operator's events, by the uid of the object they are on."""
        found: dict[str, set[tuple[str, str]]] = defaultdict(set)
        listed = await self.core.list_namespaced_event(EVENTS_NAMESPACE)
        for event in listed.items:
            found[event.involved_object.uid or ""].add((event.type, event.reason))
        return found


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _observed(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return bool(status.get("observedGeneration") == obj["metadata"].get("generation"))


def _handled(kind: str, obj: dict[str, Any], events: set[tuple[str, str]]) -> str | None:
    """What is missing for an accepted object to count as handled, or None."""
    if not _observed(obj):
        return "status.observedGeneration is not the generation"
    conditions = _conditions(obj)
    if kind == NODEPOOLS:
        nodepool_api.status_of(obj)  # well-formed, by the operator's own parser
        missing = {"Ready", "Scaling", "Degraded"} - set(conditions)
        if missing:
            return f"no {sorted(missing)} condition"
        degraded = conditions["Degraded"]
        if degraded["status"] == "True":
            if ("Warning", degraded["reason"]) not in events:
                return f"Degraded {degraded['reason']} without its Warning event"
            return None
        desired = nodepool_api.spec_of(obj).target_nodes
        if desired and not nodepool_api.is_settled(obj, desired):
            return f"not settled on {desired} nodes"
        return None
    if kind == AUTOSCALERS:
        autoscaler_api.status_of(obj)
        ready = conditions.get("Ready")
        if ready is None:
            return "no Ready condition"
        if ready["status"] == "False" and ("Warning", ready["reason"]) not in events:
            return f"Ready=False {ready['reason']} without its Warning event"
        return None
    status = scalerequest_api.status_of(obj)
    if status.phase == "Pending" or not status.message:
        return "not answered"
    return None


def _written_for(event: audit.AuditEvent) -> str:
    """The name of the object an operator write is about: the object itself, the one an
    Event (named "<object>.<digest>") is on, or the pool a Node ("<pool>-<index>") is of."""
    if event.resource == "events":
        return event.name.rsplit(".", 1)[0]
    if event.resource == "nodes":
        return event.name.rsplit("-", 1)[0]
    return event.name


def _owner(event: audit.AuditEvent, names: dict[str, Case], fixtures: fuzz_corpus.Fixtures) -> str:
    """The category an operator write belongs to, from the object it wrote."""
    name = _written_for(event)
    if name in names:
        return names[name].category
    if name == fixtures.storm_pool:
        return "request-storm"
    return "fixtures" if name in vars(fixtures).values() else f"other:{event.resource}"


async def _within(bound: float, step: Callable[[], Awaitable[list[str]]]) -> list[str]:
    """Poll ``step`` (the problems still open) until none are left or ``bound`` s pass."""
    problems: list[str] = []

    async def clear() -> bool:
        nonlocal problems
        problems = await step()
        return not problems

    with contextlib.suppress(AssertionError):
        await wait_for(clear, within=bound, every=2.0)
    return problems


def _table(figures: Figures, categories: Iterable[str]) -> str:
    lines = [
        "| category | sent | refused (4xx) | accepted and handled | operator writes |",
        "|---|---|---|---|---|",
    ]
    for category in categories:
        lines.append(
            f"| {category} | {figures.sent[category]} | {figures.refused[category]} | "
            f"{figures.handled[category]} | {figures.writes[category]} |"
        )
    total = [sum(c.values()) for c in (figures.sent, figures.refused, figures.handled)]
    lines.append(f"| all | {total[0]} | {total[1]} | {total[2]} | {sum(figures.writes.values())} |")
    return "\n".join(lines)


@pytest.mark.timeout(max(900, SIZE))
async def test_a_fuzzed_corpus_is_refused_with_a_4xx_or_handled_without_harm(world: World) -> None:
    log = world.cluster.audit_log()
    suffix = f"{SEED % 10**6}"
    fixtures = fuzz_corpus.Fixtures(
        storm_pool=f"fz-storm-{suffix}",
        watched_pool=f"fz-watched-{suffix}",
        patched_pool=f"fz-patched-{suffix}",
    )
    cases = fuzz_corpus.build(seed=SEED, size=SIZE, fixtures=fixtures)
    assert len(cases) >= SIZE
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.2", "--latency-jitter", "0", "--delete-latency", "0.2"
    )
    operator: Operator = world.start_operator(cloud, "--scale-request-retention", "3600")
    for pool in vars(fixtures).values():
        if isinstance(pool, str):
            body = pool_body(pool, max_nodes=fixtures.max_nodes)
            await world.custom.create_cluster_custom_object(*POOLS, body)
    log.mark()
    outcomes: list[Outcome] = []
    try:
        outcomes = await _send_all(world.api_client, cases)
        await _check_corpus(world.api_client, log, operator, outcomes, fixtures)
    finally:
        await _remove(world.custom, outcomes, fixtures)


async def _check_corpus(
    api_client: client.ApiClient,
    log: audit.AuditLog,
    operator: Operator,
    outcomes: list[Outcome],
    fixtures: fuzz_corpus.Fixtures,
) -> None:
    figures = Figures()
    wrong = [
        f"#{o.case.index} {o.case.category} {o.case.kind} {o.case.field}: {problem}"
        for o in outcomes
        if (problem := _check_answer(o) or _check_parsed(o))
    ]
    accepted = [o for o in outcomes if not o.refused and o.case.operation == "create"]
    state = ServerView(api_client)

    async def unhandled() -> list[str]:
        events = await state.events()
        problems: list[str] = []
        for kind in (NODEPOOLS, AUTOSCALERS, SCALEREQUESTS):
            stored = await state.objects(kind)
            for o in (o for o in accepted if o.case.kind == kind):
                obj = stored.get(o.case.name)
                why = "gone" if obj is None else _handled(kind, obj, events[obj["metadata"]["uid"]])
                if why:
                    problems.append(f"#{o.case.index} {o.case.category} {o.case.name}: {why}")
        return problems

    # A few minutes for the default corpus; a larger one gets proportionally longer.
    open_problems = await _within(max(180.0, 0.1 * len(outcomes)), unhandled)

    async def still_initialising() -> list[str]:
        # A settled pool's newest Nodes may still wait for their kubelet (kwok here) before
        # the operator lifts the unregistered taint: one patch each, still the scale-up's.
        found = await client.CoreV1Api(api_client).list_node(label_selector=wellknown.POOL_LABEL)
        return [
            str(node.metadata.name)
            for node in found.items
            if any(t.key == wellknown.UNREGISTERED_TAINT_KEY for t in node.spec.taints or ())
        ]

    uninitialised = await _within(60.0, still_initialising)
    open_problems += [f"Node {name} never initialised" for name in uninitialised]
    await asyncio.sleep(2)  # the pool status that follows its last Node's change

    # Everything is answered: from now on the operator has nothing to write.
    quiet_from = len(log.events_since_mark())
    await asyncio.sleep(QUIET_SECONDS)
    everything = log.events_since_mark()
    writes = audit.writes(everything, user=OPERATOR_USER)
    quiet = [
        e for e in audit.writes(everything[quiet_from:], user=OPERATOR_USER)
        if e.resource != "leases"
    ]  # fmt: skip

    names = {o.case.name: o.case for o in accepted}
    for outcome in outcomes:
        category = outcome.case.category
        figures.sent[category] += 1
        figures.codes[outcome.code] += 1
        figures.refused[category] += outcome.refused
    handled_now = set(await unhandled())
    for outcome in accepted:
        figures.handled[outcome.case.category] += not any(
            p.startswith(f"#{outcome.case.index} ") for p in handled_now
        )
    fixture_pools = [p for p in vars(fixtures).values() if isinstance(p, str)]
    kinds = {**{n: c.kind for n, c in names.items()}, **dict.fromkeys(fixture_pools, NODEPOOLS)}
    per_object: Counter[tuple[str, str]] = Counter()
    for event in writes:
        figures.writes[_owner(event, names, fixtures)] += 1
        if (about := _written_for(event)) in kinds:
            per_object[(kinds[about], about)] += 1
    refused_writes = [e for e in writes if e.code >= 400 and e.code not in (404, 409)]
    nodes_created = Counter(
        e.name.rsplit("-", 1)[0] for e in writes if e.resource == "nodes" and e.verb == "create"
    )
    bound = {
        (kind, name): WRITE_BOUNDS[kind] + NODE_WRITES * nodes_created[name]
        for name, kind in kinds.items()
    }
    # The storm pool also takes one targetNodes write per request it applies.
    storm_key = (NODEPOOLS, fixtures.storm_pool)
    bound[storm_key] += sum(1 for o in outcomes if o.case.storm is not None)
    over_bound = [
        f"{kind}/{name}: {count} writes" for (kind, name), count in per_object.items()
        if count > bound[(kind, name)]
    ]  # fmt: skip
    # Every write is about a corpus object or a fixture pool: nothing else is touched.
    stray = [
        (e.verb, e.target, e.name)
        for e in writes
        if _owner(e, names, fixtures).startswith("other:")
    ]
    categories = [
        *fuzz_corpus.CATEGORIES,
        *sorted(set(figures.writes) - set(fuzz_corpus.CATEGORIES)),
    ]
    print(f"\nseed {SEED}, {len(outcomes)} cases, answers by code: {dict(figures.codes)}")
    print(_table(figures, categories))
    print(
        f"operator writes: {len(writes)} in all ({audit.summarize(writes).most_common(12)}); "
        f"most on one object: {per_object.most_common(3)}; in the {QUIET_SECONDS:.0f} s "
        f"after everything was answered: {len(quiet)}; Nodes created: "
        f"{sum(nodes_created.values())}; bound on all writes: {sum(bound.values())}"
    )

    assert operator.running, operator.output()[-4000:]
    assert wrong == [], "\n".join(wrong[:40])
    assert open_problems == [], "\n".join(open_problems[:40])
    assert operator.errors_logged() == []
    assert refused_writes == [], refused_writes[:20]
    assert over_bound == [], over_bound[:20]
    assert stray == [], stray[:20]
    assert len(writes) <= sum(bound.values())
    assert quiet == [], [(e.verb, e.target, e.name) for e in quiet[:20]]


async def _remove(
    custom: client.CustomObjectsApi, outcomes: list[Outcome], fixtures: fuzz_corpus.Fixtures
) -> None:
    """Delete every object the corpus created, pools last and while the operator runs."""
    created = [o.case for o in outcomes if not o.refused and o.case.operation == "create"]
    limit = asyncio.Semaphore(SENDERS)

    async def delete(kind: str, name: str) -> None:
        async with limit:
            with contextlib.suppress(ApiException):
                await custom.delete_cluster_custom_object(*_group(kind), name)

    await asyncio.gather(*(delete(c.kind, c.name) for c in created if c.kind != NODEPOOLS))
    pools = [c.name for c in created if c.kind == NODEPOOLS]
    pools += [p for p in vars(fixtures).values() if isinstance(p, str)]

    async def remove(name: str) -> None:
        async with limit:
            await remove_pool(custom, name, within=60)

    await asyncio.gather(*(remove(p) for p in pools))


async def test_an_autoscaler_with_the_longest_name_still_gets_its_pool_scaled(world: World) -> None:
    """A name the server accepts (253 characters) must not break the Autoscaler's own
    writes: its ScaleRequest names it as requester, its events are named after it."""
    log = world.cluster.audit_log()
    _, operator = await world.operated(latency=0.2)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, max_nodes=2))
    name = ("fz-longest-" + "n" * 253)[:253]
    spec = autoscaler_api.AutoscalerSpec(
        node_pool_name=world.pool, namespaces=(world.namespace,), batch_window_seconds=0.2
    )
    log.mark()
    await world.custom.create_cluster_custom_object(
        *_group(AUTOSCALERS), autoscaler_api.manifest(name, spec)
    )
    try:
        pod = {
            "metadata": {"name": "waiting"},
            "spec": {
                "nodeSelector": {wellknown.POOL_LABEL: world.pool},
                "containers": [workloads.container("1")],
            },
        }
        await world.core.create_namespaced_pod(world.namespace, pod)

        async def scaled() -> bool:
            pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
            return bool(pool["spec"]["targetNodes"] == 1)

        await wait_for(scaled, within=60)
        writes = audit.writes(log.events_since_mark(), user=OPERATOR_USER)
        # A 409 is the server saying our copy was stale (our own status write may have
        # moved the pool's resourceVersion); it is re-read and re-applied, not a refusal.
        refused = [(e.verb, e.target, e.code) for e in writes if e.code >= 400 and e.code != 409]
        assert refused == []
        assert operator.errors_logged() == []
    finally:
        with contextlib.suppress(ApiException):
            await world.custom.delete_cluster_custom_object(*_group(AUTOSCALERS), name)
