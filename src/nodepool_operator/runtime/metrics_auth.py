"""Who may read ``/metrics``: the API server decides, as for controller-runtime's secure metrics.

A scrape carries ``Authorization: Bearer <token>`` (Prometheus sends its ServiceAccount
token). The token is checked with a TokenReview (authentication), and the user it names
with a SubjectAccessReview for the non-resource URL and verb, here ``get /metrics``
(authorization), exactly as controller-runtime's ``filters.WithAuthenticationAndAuthorization``
and kube-rbac-proxy do. So RBAC decides: a ClusterRole with
``nonResourceURLs: ["/metrics"], verbs: ["get"]`` bound to the scraper lets it in.

The answer is 401 without a token or with one the API server does not accept, 403 when
the user may not ``get`` the path, 200 otherwise. Answers are cached for a short while
(by a hash of the token, never the token itself) so a scrape every few seconds does not
cost two API calls each time; denials are kept for less time than grants, so a new
RoleBinding takes effect quickly. A failed review call is not cached and answers 500.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, lru
from nodepool_operator.runtime.client import Object, Resource

__all__ = [
    "SUBJECTACCESSREVIEWS",
    "TOKENREVIEWS",
    "Decision",
    "MetricsAuthorizer",
    "ReviewApi",
    "User",
]

log = logging.getLogger(__name__)

TOKENREVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)
SUBJECTACCESSREVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False
)


class ReviewApi(Protocol):
    """The one call the authorizer makes (``runtime.client.Client`` has it)."""

    async def create(
        self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> Object: ...


class Decision(enum.IntEnum):
    """The HTTP status a request gets."""

    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403
    REVIEW_FAILED = 500


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class MetricsAuthorizer:
    """Decides a request from its ``Authorization`` header, with TokenReview and SAR.

    ``authn_ttl``/``allow_ttl``/``deny_ttl``: seconds an answer is reused (controller-runtime
    keeps a TokenReview 2 min, an allowed SAR 5 min, a denied one 30 s; shorter here, so a
    revoked binding bites within a minute). At most ``cache_size`` answers of each kind.
    """

    def __init__(
        self,
        api: ReviewApi,
        *,
        clock: clock_module.Clock,
        authn_ttl: float = 60.0,
        allow_ttl: float = 60.0,
        deny_ttl: float = 10.0,
        cache_size: int = 1024,
    ) -> None:
        self._api = api
        self._clock = clock
        self._authn_ttl, self._allow_ttl, self._deny_ttl = authn_ttl, allow_ttl, deny_ttl
        self._users: lru.Bounded[str, tuple[User | None, float]] = lru.Bounded(cache_size)
        self._verdicts: lru.Bounded[tuple[User, str, str], tuple[bool, float]] = lru.Bounded(
            cache_size
        )

    async def decide(self, authorization: str | None, *, path: str, verb: str = "get") -> Decision:
        token = _bearer(authorization)
        if token is None:
            return Decision.UNAUTHENTICATED
        try:
            user = await self._authenticate(token)
            if user is None:
                return Decision.UNAUTHENTICATED
            allowed = await self._authorize(user, path=path, verb=verb)
        except errors.ApiError as e:
            log.warning(
                "event=metrics-review-failed path=%s error=%s status=%s",
                path,
                type(e).__name__,
                e.status,
            )
            return Decision.REVIEW_FAILED
        if not allowed:
            log.info("event=metrics-forbidden user=%s path=%s verb=%s", user.name, path, verb)
            return Decision.FORBIDDEN
        return Decision.ALLOWED

    async def _authenticate(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._users.get(key)
        now = self._clock.now()
        if cached is not None and cached[1] > now:
            return cached[0]
        review = await self._api.create(
            TOKENREVIEWS,
            {
                "apiVersion": TOKENREVIEWS.api_version,
                "kind": TOKENREVIEWS.kind,
                "spec": {"token": token},
            },
        )
        user = _reviewed_user(review)
        ttl = self._authn_ttl if user is not None else self._deny_ttl
        self._users[key] = (user, now + ttl)
        return user

    async def _authorize(self, user: User, *, path: str, verb: str) -> bool:
        key = (user, path, verb)
        cached = self._verdicts.get(key)
        now = self._clock.now()
        if cached is not None and cached[1] > now:
            return cached[0]
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        review = await self._api.create(
            SUBJECTACCESSREVIEWS,
            {
                "apiVersion": SUBJECTACCESSREVIEWS.api_version,
                "kind": SUBJECTACCESSREVIEWS.kind,
                "spec": spec,
            },
        )
        status = review.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        self._verdicts[key] = (allowed, now + (self._allow_ttl if allowed else self._deny_ttl))
        return allowed


def _bearer(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _reviewed_user(review: Mapping[str, Any]) -> User | None:
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None
    info = status.get("user") or {}
    name = info.get("username")
    if not isinstance(name, str) or not name:
        return None
    extra = info.get("extra") or {}
    return User(
        name=name,
        uid=str(info.get("uid") or ""),
        groups=tuple(str(g) for g in info.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in extra.items())),
    )
