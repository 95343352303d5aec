"""Secure /metrics: TokenReview decides who, SubjectAccessReview decides whether; answers are
cached briefly; the probes stay plain HTTP on their own port for the kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors, tls
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.manager import Manager
from nodepool_operator.runtime.metrics_auth import (
    SUBJECTACCESSREVIEWS,
    TOKENREVIEWS,
    Decision,
    MetricsAuthorizer,
)

READER = "reader-token"
STRANGER = "stranger-token"


class FakeReviewApi:
    """An API server that knows two tokens and lets one of their users get /metrics."""

    def __init__(self) -> None:
        self.users = {
            READER: {"username": "system:serviceaccount:monitoring:prometheus", "uid": "u-1"},
            STRANGER: {"username": "system:serviceaccount:default:nosy", "groups": ["g"]},
        }
        self.readers = {"system:serviceaccount:monitoring:prometheus"}
        self.calls: list[tuple[str, Mapping[str, Any]]] = []
        self.failing = False

    async def create(
        self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> Object:
        self.calls.append((resource.plural, body["spec"]))
        if self.failing:
            raise errors.ServerTimeout("the API server is slow")
        if resource == TOKENREVIEWS:
            user = self.users.get(body["spec"]["token"])
            status = {"authenticated": True, "user": user} if user else {"authenticated": False}
            return {**body, "status": status}
        assert resource == SUBJECTACCESSREVIEWS
        spec = body["spec"]
        allowed = spec["user"] in self.readers and spec["nonResourceAttributes"] == {
            "path": "/metrics",
            "verb": "get",
        }
        return {**body, "status": {"allowed": allowed}}

    def count(self, plural: str) -> int:
        return sum(1 for kind, _ in self.calls if kind == plural)


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


@pytest.fixture
def api() -> FakeReviewApi:
    return FakeReviewApi()


@pytest.fixture
def authorizer(api: FakeReviewApi, clock: clock_.FakeClock) -> MetricsAuthorizer:
    return MetricsAuthorizer(api, clock=clock, authn_ttl=60, allow_ttl=60, deny_ttl=10)


@pytest.mark.parametrize("header", [None, "", "Bearer ", "Basic dXNlcjpwdw==", READER])
async def test_a_request_without_a_bearer_token_is_401_without_asking_the_api(
    authorizer: MetricsAuthorizer, api: FakeReviewApi, header: str | None
) -> None:
    assert await authorizer.decide(header, path="/metrics") is Decision.UNAUTHENTICATED
    assert api.calls == []


async def test_a_token_the_api_server_does_not_know_is_401(
    authorizer: MetricsAuthorizer, api: FakeReviewApi
) -> None:
    assert await authorizer.decide("Bearer forged", path="/metrics") is Decision.UNAUTHENTICATED
    assert api.count("subjectaccessreviews") == 0


async def test_a_known_user_the_sar_denies_is_403(
    authorizer: MetricsAuthorizer, api: FakeReviewApi
) -> None:
    assert await authorizer.decide(f"Bearer {STRANGER}", path="/metrics") is Decision.FORBIDDEN
    [(_, sar)] = [call for call in api.calls if call[0] == "subjectaccessreviews"]
    assert sar == {
        "user": "system:serviceaccount:default:nosy",
        "groups": ["g"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_a_user_allowed_to_get_metrics_is_200(
    authorizer: MetricsAuthorizer, api: FakeReviewApi
) -> None:
    assert await authorizer.decide(f"Bearer {READER}", path="/metrics") is Decision.ALLOWED
    [(_, review)] = [call for call in api.calls if call[0] == "tokenreviews"]
    assert review == {"token": READER}


async def test_answers_are_reused_within_their_ttl_and_asked_again_after(
    authorizer: MetricsAuthorizer, api: FakeReviewApi, clock: clock_.FakeClock
) -> None:
    for _ in range(5):
        assert await authorizer.decide(f"Bearer {READER}", path="/metrics") is Decision.ALLOWED
        assert await authorizer.decide(f"Bearer {STRANGER}", path="/metrics") is Decision.FORBIDDEN
    assert (api.count("tokenreviews"), api.count("subjectaccessreviews")) == (2, 2)

    await clock.advance(11)  # past the denial's TTL, within the grant's
    api.readers.add("system:serviceaccount:default:nosy")
    assert await authorizer.decide(f"Bearer {STRANGER}", path="/metrics") is Decision.ALLOWED
    assert await authorizer.decide(f"Bearer {READER}", path="/metrics") is Decision.ALLOWED
    assert (api.count("tokenreviews"), api.count("subjectaccessreviews")) == (2, 3)

    await clock.advance(60)
    api.readers.clear()
    assert await authorizer.decide(f"Bearer {READER}", path="/metrics") is Decision.FORBIDDEN
    assert (api.count("tokenreviews"), api.count("subjectaccessreviews")) == (3, 4)


async def test_a_failed_review_is_500_and_not_cached(
    authorizer: MetricsAuthorizer, api: FakeReviewApi
) -> None:
    api.failing = True
    assert await authorizer.decide(f"Bearer {READER}", path="/metrics") is Decision.REVIEW_FAILED
    api.failing = False
    assert await authorizer.decide(f"Bearer {READER}", path="/metrics") is Decision.ALLOWED


async def test_the_token_is_never_a_cache_key_or_logged(
    authorizer: MetricsAuthorizer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    await authorizer.decide(f"Bearer {STRANGER}", path="/metrics")
    assert "nosy" in caplog.text  # the user is named
    assert STRANGER not in caplog.text
    assert STRANGER not in repr(vars(authorizer))


# --- served by the manager ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def _serving(manager: Manager) -> AsyncIterator[Manager]:
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await asyncio.wait_for(manager.started.wait(), 5)
        yield manager
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


async def _get(url: str, *, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=False) as response,
    ):
        return response.status, await response.text()


async def _served_certificate(port: int | None) -> x509.Certificate:
    assert port is not None
    pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", port))
    return x509.load_pem_x509_certificate(pem.encode())


def _secure_manager(
    api: FakeReviewApi, clock: clock_.FakeClock, context: ssl.SSLContext
) -> Manager:
    return Manager(
        api,  # type: ignore[arg-type]
        metrics_port=0,
        health_port=0,
        metrics_tls=context,
        metrics_authorizer=MetricsAuthorizer(api, clock=clock),
        clock=clock,
    )


async def test_metrics_over_https_answer_401_403_200_and_probes_stay_plain_http(
    api: FakeReviewApi, clock: clock_.FakeClock
) -> None:
    context, source = tls.server_context(None)
    async with _serving(_secure_manager(api, clock, context)) as manager:
        metrics = f"https://127.0.0.1:{manager.bound_port}/metrics"
        anonymous = await _get(metrics)
        stranger = await _get(metrics, token=STRANGER)
        reader = await _get(metrics, token=READER)
        health = await _get(f"http://127.0.0.1:{manager.health_bound_port}/healthz")
        ready = await _get(f"http://127.0.0.1:{manager.health_bound_port}/readyz")
        probe_on_metrics = await _get(f"https://127.0.0.1:{manager.bound_port}/healthz")
        served = await _served_certificate(manager.bound_port)

    assert source == "self-signed"
    assert (anonymous[0], stranger[0], reader[0]) == (401, 403, 200)
    assert "workqueue_depth" in reader[1] or "rest_client_requests_total" in reader[1]
    assert served.subject.rfc4514_string() == "CN=nodepool-operator-metrics"
    assert (health[0], ready[0]) == (200, 200)
    assert probe_on_metrics[0] == 404  # the probes live on the health port only


async def test_a_mounted_certificate_is_the_one_served(
    api: FakeReviewApi, clock: clock_.FakeClock, tmp_path: Path
) -> None:
    cert, key = tls.self_signed_pem(hosts=["metrics.example", "127.0.0.1"])
    (tmp_path / tls.CERT_FILE).write_bytes(cert)
    (tmp_path / tls.KEY_FILE).write_bytes(key)
    context, source = tls.server_context(tmp_path)
    async with _serving(_secure_manager(api, clock, context)) as manager:
        served = await _served_certificate(manager.bound_port)

    assert source == str(tmp_path)
    assert served == x509.load_pem_x509_certificate(cert)


def test_the_self_signed_certificate_names_the_hosts_and_serves_only_servers() -> None:
    cert_pem, _ = tls.self_signed_pem(hosts=["localhost", "127.0.0.1", "localhost"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert [u.dotted_string for u in usage] == ["1.3.6.1.5.5.7.3.1"]
