"""The errors a reconcile may raise, one hierarchy: Kubernetes API errors, mapped once from
HTTP status and Status reason to typed exceptions, and the errors of other dependencies (a
cloud), mapped at the boundary by the controller that calls them.

Every API call goes through `translated()` (or `from_api_exception()`), so the rest of the
operator catches `NotFound` or `Conflict`, never a status code. The hierarchy, with whether
repeating the same request can help (*transient*) or not (*permanent*)::

    OperatorError               what the reconcile loop knows how to treat
    ├── Terminal                a reconcile says its key cannot succeed as things are     permanent
    ├── ReconcileTimeout        a reconcile ran past its timeout and was cancelled        transient
    ├── DependencyError         a call to a dependency other than the API server failed
    │   ├── DependencyUnavailable  it may answer if asked again (`retry_after` if given) transient
    │   └── DependencyRefused      it refused what we asked for (quota, a bad spec)      permanent
    └── ApiError                any failed API call; raised as such for unmapped statuses permanent
        ├── BadRequest          400                                                     permanent
        ├── Unauthorized        401                                                     permanent
        ├── Forbidden           403                                                     permanent
        ├── NotFound            404                                                     permanent
        ├── Conflict            409  stale resourceVersion: re-read and re-apply        transient
        ├── AlreadyExists       409  reason AlreadyExists                               permanent
        ├── Gone                410  reason Gone or Expired: the watch must re-list     transient
        ├── Invalid             422                                                     permanent
        ├── TooManyRequests     429  wait `retry_after` seconds when given              transient
        ├── ServerError         5xx                                                     transient
        │   ├── InternalError   500
        │   └── ServerTimeout   504, or reason Timeout / ServerTimeout
        └── ConnectionFailed    no HTTP response (aiohttp.ClientError, TimeoutError, OSError)
                                                                                        transient

*Transient* says a retry can succeed, not that anything should retry blindly: a `Conflict`
is retried only by `retry.retry_on_conflict` or by requeueing the key, after a re-read.
What the reconcile loop does with each (``controller.Controller``): a `Conflict` is
requeued with backoff, quietly; an error with `retry_after` comes back after that long; a
permanent one is looked at again only after a long fixed delay; a transient one is
requeued with backoff; any other exception is a bug, logged with its traceback.

As in client-go's apierrors, the `reason` of the `metav1.Status` in the response body
decides when it is one we know, and the HTTP status decides otherwise; that is how a 409
with reason AlreadyExists becomes `AlreadyExists` and not `Conflict`.
"""

# The class names are Kubernetes' StatusReason names (NotFound, not NotFoundError), so a
# reader can match them to API documentation and client-go's IsNotFound at a glance.
# ruff: noqa: N818

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from nodepool_operator import pacing

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "ConnectionFailed",
    "DependencyError",
    "DependencyRefused",
    "DependencyUnavailable",
    "Forbidden",
    "Gone",
    "InternalError",
    "Invalid",
    "NotFound",
    "OperatorError",
    "ReconcileTimeout",
    "ServerError",
    "ServerTimeout",
    "Terminal",
    "TooManyRequests",
    "Unauthorized",
    "from_api_exception",
    "from_status",
    "is_connection_error",
    "translated",
]

# A non-Status body (an HTML page from a proxy, say) is kept in the message, but only
# this much of it: enough to recognise, not enough to flood a log line.
_MAX_BODY_IN_MESSAGE = 500


class OperatorError(Exception):
    """A failure the reconcile loop knows how to treat (see the module docstring)."""

    transient: ClassVar[bool] = False
    #: Seconds to wait before asking again, when the one who refused said so.
    retry_after: float | None = None


class Terminal(OperatorError):
    """A reconcile's verdict that its key cannot succeed as things are (a spec that can
    never be met): not retried, looked at again after a long delay or the next event."""


class ReconcileTimeout(OperatorError):
    """A reconcile ran past the controller's ``reconcile_timeout`` and was cancelled."""

    transient = True


class DependencyError(OperatorError):
    """A call to a dependency other than the API server (a cloud) failed; raised by the
    controller that made the call, ``from`` the dependency's own error."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DependencyUnavailable(DependencyError):
    """It may answer if asked again (a timeout, a 5xx, a throttle)."""

    transient = True


class DependencyRefused(DependencyError):
    """It refused what was asked for (a quota, an invalid spec): asking again cannot help."""


class ApiError(OperatorError):
    """A Kubernetes API call that failed; see the module docstring for the subclasses."""

    default_status: ClassVar[int] = 0
    default_reason: ClassVar[str] = ""

    def __init__(
        self,
        message: str = "",
        *,
        status: int | None = None,
        reason: str | None = None,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status: int = self.default_status if status is None else status
        self.reason: str = self.default_reason if reason is None else reason
        self.message: str = message
        # metav1.StatusDetails as sent: name, group, kind, uid, causes, retryAfterSeconds.
        self.details: dict[str, Any] = dict(details) if details else {}
        # Seconds the server asked us to wait (Retry-After header, else
        # details.retryAfterSeconds); None when it did not say.
        self.retry_after: float | None = retry_after

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the object's namespace is being deleted: nothing new may be made
        there, and what is there is on its way out."""
        # A StatusCause's type travels in JSON as "reason".
        causes = self.details.get("causes") or ()
        return any(cause.get("reason") == "NamespaceTerminating" for cause in causes)

    def __str__(self) -> str:
        head = f"HTTP {self.status}" if self.status else "no response"
        if self.reason:
            head = f"{head} {self.reason}"
        return f"{head}: {self.message}" if self.message else head


class BadRequest(ApiError):
    default_status = 400
    default_reason = "BadRequest"


class Unauthorized(ApiError):
    default_status = 401
    default_reason = "Unauthorized"


class Forbidden(ApiError):
    default_status = 403
    default_reason = "Forbidden"


class NotFound(ApiError):
    default_status = 404
    default_reason = "NotFound"


class Conflict(ApiError):
    """The object changed since it was read (the resourceVersion precondition failed)."""

    transient = True
    default_status = 409
    default_reason = "Conflict"


class AlreadyExists(ApiError):
    """A create for a name that is taken; repeating the create cannot succeed."""

    default_status = 409
    default_reason = "AlreadyExists"


class Gone(ApiError):
    """The requested resourceVersion is too old (410 Gone / Expired): list again."""

    transient = True
    default_status = 410
    default_reason = "Gone"


class Invalid(ApiError):
    default_status = 422
    default_reason = "Invalid"


class TooManyRequests(ApiError):
    transient = True
    default_status = 429
    default_reason = "TooManyRequests"


class ServerError(ApiError):
    transient = True
    default_status = 500
    default_reason = ""


class InternalError(ServerError):
    default_status = 500
    default_reason = "InternalError"


class ServerTimeout(ServerError):
    default_status = 504
    default_reason = "Timeout"


class ConnectionFailed(ApiError):
    """No HTTP response at all: refused, reset, TLS failure or timed out."""

    transient = True
    default_status = 0
    default_reason = ""


_BY_REASON: Mapping[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Gone,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "Timeout": ServerTimeout,
    "ServerTimeout": ServerTimeout,
    "InternalError": InternalError,
    "ServiceUnavailable": ServerError,
}

_BY_STATUS: Mapping[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    504: ServerTimeout,
}


def from_api_exception(exc: ApiException) -> ApiError:
    """The typed error for a kubernetes_asyncio `ApiException` (status, body, headers)."""
    http_status = _as_int(getattr(exc, "status", None))
    body = _parse_status_body(getattr(exc, "body", None))
    status = body if body is not None else {}
    code = http_status or _as_int(status.get("code"))
    message = _as_str(status.get("message"))
    if not message:
        message = _fallback_message(getattr(exc, "body", None), getattr(exc, "reason", None), body)
    return _build(
        code=code,
        status=status,
        message=message,
        retry_after_header=_header(getattr(exc, "headers", None), "Retry-After"),
    )


def from_status(status: Mapping[str, Any]) -> ApiError:
    """The typed error for a `metav1.Status` already decoded, as in a watch ERROR event."""
    return _build(
        code=_as_int(status.get("code")),
        status=status,
        message=_as_str(status.get("message")),
        retry_after_header=None,
    )


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` means no HTTP response arrived: refused, reset, TLS, timed out."""
    if isinstance(exc, ConnectionFailed):
        return True
    if isinstance(exc, ApiError | aiohttp.ClientResponseError):
        return False
    # TimeoutError (asyncio's included) is an OSError subclass; named for the reader.
    return isinstance(exc, aiohttp.ClientError | TimeoutError | OSError)


def translated() -> _Translated:
    """Re-raise API and connection failures inside the block as `ApiError`, `from` the original.

    `async with errors.translated(): await api.read_node(name)`; plain `with` works too.
    Errors already typed, cancellation and unrelated exceptions pass through untouched.
    """
    return _Translated()


class _Translated:
    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        typed = _translate(exc)
        if typed is not None:
            raise typed from exc

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def _translate(exc: BaseException) -> ApiError | None:
    if isinstance(exc, ApiError):
        return None
    if isinstance(exc, ApiException):
        return from_api_exception(exc)
    if isinstance(exc, aiohttp.ClientResponseError):
        # A response did arrive; classify it like any other status.
        return _build(
            code=exc.status,
            status={},
            message=exc.message or f"HTTP {exc.status}",
            retry_after_header=_header(exc.headers, "Retry-After"),
        )
    if is_connection_error(exc):
        detail = str(exc)
        name = type(exc).__name__
        return ConnectionFailed(f"{name}: {detail}" if detail else name)
    return None


def _build(
    *,
    code: int,
    status: Mapping[str, Any],
    message: str,
    retry_after_header: str | None,
) -> ApiError:
    reason = _as_str(status.get("reason"))
    raw_details = status.get("details")
    details: Mapping[str, Any] = raw_details if isinstance(raw_details, Mapping) else {}
    cls = _BY_REASON.get(reason) or _class_for_status(code)
    retry_after = pacing.parse_retry_after(retry_after_header, http_date=False)
    if retry_after is None:
        retry_after = _non_negative(details.get("retryAfterSeconds"))
    return cls(
        message,
        status=code,
        reason=reason or cls.default_reason,
        details=details,
        retry_after=retry_after,
    )


def _class_for_status(code: int) -> type[ApiError]:
    known = _BY_STATUS.get(code)
    if known is not None:
        return known
    if 500 <= code <= 599:
        return ServerError
    return ApiError


def _parse_status_body(body: object) -> Mapping[str, Any] | None:
    """The body as a metav1.Status, or None when it is empty, not JSON or another kind."""
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.strip():
        return None
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    if not isinstance(decoded, dict) or decoded.get("kind", "Status") != "Status":
        return None
    return decoded


def _fallback_message(body: object, http_reason: object, status: Mapping[str, Any] | None) -> str:
    if status is None:
        if isinstance(body, bytes | bytearray):
            body = bytes(body).decode("utf-8", errors="replace")
        if isinstance(body, str) and body.strip():
            return body.strip()[:_MAX_BODY_IN_MESSAGE]
    return _as_str(http_reason)


def _header(headers: object, name: str) -> str | None:
    if not isinstance(headers, Mapping):
        return None
    # aiohttp's CIMultiDictProxy is case-insensitive; a plain dict (tests, other
    # transports) is not, hence the scan.
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        for key, candidate in headers.items():
            if isinstance(key, str) and key.lower() == lowered:
                value = candidate
                break
    return value if isinstance(value, str) else None


def _non_negative(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _as_str(value: object) -> str:
    return value if isinstance(value, str) else ""
