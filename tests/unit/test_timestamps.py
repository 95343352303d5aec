"""The one reader of the API server's RFC 3339 timestamps (``timestamps``)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from nodepool_operator import timestamps
from nodepool_operator.api import zones

SOURCE = pathlib.Path(timestamps.__file__).parent


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-01-01T00:00:00Z", 1_767_225_600),
        ("2026-01-01T00:00:00.250000Z", 1_767_225_600.25),  # MicroTime, as Leases and Events
        ("2026-01-01T01:00:00+01:00", 1_767_225_600),
        ("2026-01-01T00:00:00", 1_767_225_600),  # no offset: UTC, the API server's only zone
    ],
)
def test_a_time_the_api_server_writes_is_read_to_epoch_seconds(text: str, seconds: float) -> None:
    assert timestamps.parse_rfc3339(text) == seconds


@pytest.mark.parametrize("text", [None, "", "not a time", "2026-13-01T00:00:00Z", 1_767_225_600])
def test_what_is_absent_or_not_a_time_reads_as_none(text: object) -> None:
    assert timestamps.parse_rfc3339(text) is None


def test_no_module_parses_timestamps_but_the_one_reader() -> None:
    """A second parser drifts from the first (one read a time without an offset as UTC,
    the other as no time at all), and a timer one controller counts from a stored time
    would then disagree with the other's reading of the same fact."""
    parsing = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("fromisoformat", "strptime"):
                parsing.append(str(path.relative_to(SOURCE)))
    assert parsing == ["timestamps.py"]


def test_a_requests_zone_claim_counts_from_its_creation_time_read_by_the_one_reader() -> None:
    request = {
        "metadata": {"name": "r", "creationTimestamp": "2026-01-01T01:00:00+01:00"},
        "spec": {"nodePoolName": "p", "targetNodes": 2, "newNodeZones": {"a": 2}},
        "status": {"phase": "Applied"},
    }
    [claim] = zones.claims_of([request])
    assert claim.created == timestamps.parse_rfc3339("2026-01-01T00:00:00Z")
