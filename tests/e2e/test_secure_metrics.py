"""Secure /metrics on the real control plane: the operator, under the deployed ClusterRole,
asks the API server about each scraper. No token: 401; a ServiceAccount without the
metrics-reader role: 403; one bound to it: 200. The probes stay plain HTTP."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client

from e2e.scenes import World
from harness import Operator, SimCloud, wait_for
from nodepool_devtools.cluster import install

READER_ROLE = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "metrics-reader-role.yaml"
NAMESPACE = install.OPERATOR_NAMESPACE


@pytest.fixture
async def service_accounts(
    api_client: client.ApiClient, operator_rbac: None
) -> AsyncIterator[dict[str, str]]:
    """Tokens of two new ServiceAccounts: ``reader`` bound to the metrics-reader role, and
    ``stranger`` with no role at all. All of it is deleted afterwards."""
    core = client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    authz = client.AuthorizationV1Api(api_client)
    role = yaml.safe_load(READER_ROLE.read_text())
    suffix = uuid.uuid4().hex[:6]
    names = {"reader": f"metrics-reader-{suffix}", "stranger": f"metrics-stranger-{suffix}"}
    binding = f"metrics-reader-{suffix}"
    created_role = False
    try:
        with contextlib.suppress(client.exceptions.ApiException):
            await rbac.create_cluster_role(role)
            created_role = True
        tokens = {}
        for who, name in names.items():
            await core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": name}})
            request: Any = {"spec": {"expirationSeconds": 600}}
            answer = await core.create_namespaced_service_account_token(name, NAMESPACE, request)
            tokens[who] = answer.status.token
        await rbac.create_cluster_role_binding(
            {
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role["metadata"]["name"],
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": names["reader"], "namespace": NAMESPACE}
                ],
            }
        )

        async def binding_in_effect() -> bool:
            review: Any = {
                "spec": {
                    "user": f"system:serviceaccount:{NAMESPACE}:{names['reader']}",
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                }
            }
            answer = await authz.create_subject_access_review(review)
            return bool(answer.status.allowed)

        # RBAC reaches the authorizer through a watch: wait, so no 403 gets cached.
        await wait_for(binding_in_effect, within=30)
        yield tokens
    finally:
        with contextlib.suppress(client.exceptions.ApiException):
            await rbac.delete_cluster_role_binding(binding)
        for name in names.values():
            with contextlib.suppress(client.exceptions.ApiException):
                await core.delete_namespaced_service_account(name, NAMESPACE)
        if created_role:
            with contextlib.suppress(client.exceptions.ApiException):
                await rbac.delete_cluster_role(role["metadata"]["name"])


async def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=False) as response,
    ):
        return response.status, await response.text()


async def test_metrics_need_a_token_the_api_server_accepts_and_the_metrics_reader_role(
    world: World, service_accounts: dict[str, str]
) -> None:
    cloud: SimCloud = await world.start_simcloud()
    operator: Operator = world.start_operator(cloud)  # secure metrics: the default
    metrics = await operator.served("metrics")
    probes = await operator.served("probes")
    assert metrics.startswith("https://")
    assert probes.startswith("http://")
    await wait_for(lambda: _ready(probes), within=60)

    anonymous, _ = await _get(f"{metrics}/metrics")
    forged, _ = await _get(f"{metrics}/metrics", "not-a-token")
    stranger, _ = await _get(f"{metrics}/metrics", service_accounts["stranger"])
    reader, text = await _get(f"{metrics}/metrics", service_accounts["reader"])

    assert (anonymous, forged, stranger, reader) == (401, 401, 403, 200)
    assert "controller_runtime_reconcile_total" in text
    # The operator's own reviews, counted like its other API calls: one TokenReview per
    # token offered (none without a token), one SubjectAccessReview per known user.
    assert 'rest_client_requests_total{code="201",resource="tokenreviews",verb="POST"} 3.0' in text
    assert (
        'rest_client_requests_total{code="201",resource="subjectaccessreviews",verb="POST"} 2.0'
        in text
    )
    for token in service_accounts.values():
        assert token not in operator.output()
    assert operator.errors_logged() == []


async def _ready(probes: str) -> bool:
    status, _ = await _get(f"{probes}/readyz")
    return status == 200
