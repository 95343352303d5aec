"""API errors: each status and Status reason maps to one typed, classified exception."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy

from nodepool_operator.runtime import errors


def _api_exception(
    status: int,
    *,
    reason: str | None = None,
    message: str = "",
    details: dict[str, Any] | None = None,
    body: str | bytes | None = None,
    headers: Any = None,
    http_reason: str = "",
) -> ApiException:
    """An ApiException as kubernetes_asyncio raises it: HTTP status and phrase, body text."""
    exc = ApiException(status=status, reason=http_reason)
    if body is None and reason is not None:
        status_body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": status,
        }
        if details is not None:
            status_body["details"] = details
        body = json.dumps(status_body)
    exc.body = body
    exc.headers = headers
    return exc


@pytest.mark.parametrize(
    ("status", "reason", "expected", "transient"),
    [
        (400, "BadRequest", errors.BadRequest, False),
        (401, "Unauthorized", errors.Unauthorized, False),
        (403, "Forbidden", errors.Forbidden, False),
        (404, "NotFound", errors.NotFound, False),
        (409, "Conflict", errors.Conflict, True),
        (409, "AlreadyExists", errors.AlreadyExists, False),
        (410, "Gone", errors.Gone, True),
        (410, "Expired", errors.Gone, True),
        (422, "Invalid", errors.Invalid, False),
        (429, "TooManyRequests", errors.TooManyRequests, True),
        (500, "InternalError", errors.InternalError, True),
        (500, "ServerTimeout", errors.ServerTimeout, True),
        (504, "Timeout", errors.ServerTimeout, True),
        (503, "ServiceUnavailable", errors.ServerError, True),
    ],
)
def test_status_reason_and_code_map_to_one_typed_error(
    status: int, reason: str, expected: type[errors.ApiError], transient: bool
) -> None:
    error = errors.from_api_exception(_api_exception(status, reason=reason, message="m"))
    assert type(error) is expected
    assert error.status == status
    assert error.reason == reason
    assert error.message == "m"
    assert error.transient is transient


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, errors.BadRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (410, errors.Gone),
        (422, errors.Invalid),
        (429, errors.TooManyRequests),
        (500, errors.InternalError),
        (502, errors.ServerError),
        (503, errors.ServerError),
        (504, errors.ServerTimeout),
        (405, errors.ApiError),
        (418, errors.ApiError),
    ],
)
def test_without_a_status_body_the_http_code_decides(
    status: int, expected: type[errors.ApiError]
) -> None:
    error = errors.from_api_exception(_api_exception(status, body="", http_reason="Phrase"))
    assert type(error) is expected
    assert error.status == status
    assert error.message == "Phrase"


def test_409_already_exists_is_not_a_conflict_and_is_never_retried() -> None:
    error = errors.from_api_exception(_api_exception(409, reason="AlreadyExists"))
    assert not isinstance(error, errors.Conflict)
    assert not error.transient


def test_known_reason_in_the_body_wins_over_the_http_code() -> None:
    error = errors.from_api_exception(_api_exception(500, reason="ServerTimeout"))
    assert isinstance(error, errors.ServerTimeout)
    assert isinstance(error, errors.ServerError)


def test_unknown_reason_falls_back_to_the_http_code() -> None:
    error = errors.from_api_exception(_api_exception(404, reason="SomethingNew"))
    assert isinstance(error, errors.NotFound)
    assert error.reason == "SomethingNew"


def test_unmapped_status_is_a_permanent_api_error() -> None:
    error = errors.from_api_exception(_api_exception(405, reason="MethodNotAllowed"))
    assert type(error) is errors.ApiError
    assert not error.transient


def test_status_message_and_details_are_kept() -> None:
    details = {
        "name": "pool-a",
        "group": "nodepool.dev",
        "kind": "nodepools",
        "causes": [{"reason": "FieldValueInvalid", "field": "spec.targetNodes"}],
    }
    error = errors.from_api_exception(
        _api_exception(422, reason="Invalid", message="spec.targetNodes: Invalid", details=details)
    )
    assert isinstance(error, errors.Invalid)
    assert error.message == "spec.targetNodes: Invalid"
    assert error.details == details
    assert error.retry_after is None


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "7"},
        {"retry-after": "7"},
        CIMultiDictProxy(CIMultiDict({"RETRY-AFTER": "7"})),
    ],
)
def test_retry_after_header_gives_the_wait_in_seconds(headers: Any) -> None:
    error = errors.from_api_exception(
        _api_exception(429, reason="TooManyRequests", headers=headers)
    )
    assert isinstance(error, errors.TooManyRequests)
    assert error.retry_after == 7.0


def test_retry_after_falls_back_to_status_details() -> None:
    error = errors.from_api_exception(
        _api_exception(429, reason="TooManyRequests", details={"retryAfterSeconds": 3})
    )
    assert error.retry_after == 3.0


def test_retry_after_header_wins_over_status_details() -> None:
    error = errors.from_api_exception(
        _api_exception(
            429,
            reason="TooManyRequests",
            details={"retryAfterSeconds": 3},
            headers={"Retry-After": "5"},
        )
    )
    assert error.retry_after == 5.0


@pytest.mark.parametrize("value", ["", "soon", "-1", "nan", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_unusable_retry_after_is_ignored(value: str) -> None:
    error = errors.from_api_exception(
        _api_exception(429, reason="TooManyRequests", headers={"Retry-After": value})
    )
    assert isinstance(error, errors.TooManyRequests)
    assert error.retry_after is None


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "   ",
        "{",
        "[1, 2]",
        '"a string"',
        '{"kind": "Pod", "reason": "NotFound"}',
        '{"reason": 42, "message": ["not", "a", "string"], "details": "nope"}',
        b"\xff\xfe not utf-8",
    ],
)
def test_malformed_bodies_fall_back_to_the_http_code(body: str | bytes | None) -> None:
    exc = ApiException(status=409, reason="Conflict")
    exc.body = body
    error = errors.from_api_exception(exc)
    assert type(error) is errors.Conflict
    assert error.status == 409
    assert error.reason == "Conflict"
    assert isinstance(error.message, str)
    assert error.details == {}


def test_body_that_is_not_a_status_is_kept_in_the_message_truncated() -> None:
    page = "<html>" + "x" * 2000 + "</html>"
    error = errors.from_api_exception(_api_exception(502, body=page, http_reason="Bad Gateway"))
    assert isinstance(error, errors.ServerError)
    assert error.message.startswith("<html>xxx")
    assert len(error.message) == 500


def test_status_body_as_bytes_is_decoded() -> None:
    body = json.dumps({"kind": "Status", "reason": "NotFound", "message": "gone", "code": 404})
    error = errors.from_api_exception(_api_exception(404, body=body.encode()))
    assert isinstance(error, errors.NotFound)
    assert error.message == "gone"


def test_status_code_from_the_body_when_the_exception_has_none() -> None:
    exc = ApiException(status=0, reason="")
    exc.body = json.dumps({"kind": "Status", "reason": "", "code": 404})
    assert isinstance(errors.from_api_exception(exc), errors.NotFound)


def test_watch_error_event_status_maps_to_gone() -> None:
    error = errors.from_status(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": "too old resource version: 1 (42)",
            "reason": "Expired",
            "code": 410,
        }
    )
    assert isinstance(error, errors.Gone)
    assert error.message == "too old resource version: 1 (42)"


async def test_translated_raises_the_typed_error_from_the_original() -> None:
    original = _api_exception(404, reason="NotFound", message='nodes "n1" not found')
    with pytest.raises(errors.NotFound) as caught:
        async with errors.translated():
            raise original
    assert caught.value.__cause__ is original
    assert str(caught.value) == 'HTTP 404 NotFound: nodes "n1" not found'


def test_translated_also_works_as_a_plain_context_manager() -> None:
    with pytest.raises(errors.Conflict), errors.translated():
        raise _api_exception(409, reason="Conflict")


async def test_translated_leaves_successful_blocks_alone() -> None:
    async with errors.translated():
        value = 1
    assert value == 1


@pytest.mark.parametrize(
    "failure",
    [
        aiohttp.ClientConnectionError("refused"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
        aiohttp.ServerTimeoutError("read timed out"),
        ConnectionResetError("reset by peer"),
        OSError("network is unreachable"),
    ],
)
async def test_failures_without_a_response_become_connection_failed(
    failure: BaseException,
) -> None:
    with pytest.raises(errors.ConnectionFailed) as caught:
        async with errors.translated():
            raise failure
    assert caught.value.__cause__ is failure
    assert caught.value.status == 0
    assert caught.value.transient
    assert errors.is_connection_error(failure)
    assert str(caught.value).startswith("no response: ")


@pytest.mark.parametrize(
    "failure",
    [ValueError("bug"), KeyError("spec"), errors.NotFound("already typed")],
)
async def test_translated_passes_other_exceptions_through_unchanged(failure: Exception) -> None:
    with pytest.raises(type(failure)) as caught:
        async with errors.translated():
            raise failure
    assert caught.value is failure


async def test_translated_never_swallows_cancellation() -> None:
    with pytest.raises(asyncio.CancelledError):
        async with errors.translated():
            raise asyncio.CancelledError


def test_aiohttp_response_error_is_classified_by_its_status() -> None:
    failure = aiohttp.ClientResponseError(
        request_info=None,  # type: ignore[arg-type]
        history=(),
        status=503,
        message="Service Unavailable",
        headers=CIMultiDictProxy(CIMultiDict({"Retry-After": "2"})),
    )
    with pytest.raises(errors.ServerError) as caught, errors.translated():
        raise failure
    assert caught.value.retry_after == 2.0
    assert not errors.is_connection_error(failure)


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (_api_exception(503, body=""), True),
        (_api_exception(409, reason="Conflict"), True),
        (_api_exception(422, reason="Invalid"), False),
        (_api_exception(403, reason="Forbidden"), False),
        (ConnectionRefusedError(), True),
        (errors.Gone(), True),
        (errors.AlreadyExists(), False),
    ],
)
def test_raw_and_typed_errors_come_out_typed_and_classed(
    exc: BaseException, transient: bool
) -> None:
    with pytest.raises(errors.ApiError) as caught, errors.translated():
        raise exc
    assert caught.value.transient is transient


@pytest.mark.parametrize("exc", [ValueError("bug"), asyncio.CancelledError()])
def test_errors_that_are_not_api_failures_pass_through_untouched(exc: BaseException) -> None:
    with pytest.raises(type(exc)) as caught, errors.translated():
        raise exc
    assert caught.value is exc


def test_typed_errors_can_be_raised_directly_with_their_defaults() -> None:
    error = errors.Conflict("the object has been modified")
    assert (error.status, error.reason, error.retry_after) == (409, "Conflict", None)
    assert str(error) == "HTTP 409 Conflict: the object has been modified"
    assert str(errors.ConnectionFailed()) == "no response"
