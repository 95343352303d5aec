"""``explain pod`` and ``plan --dry-run`` read the cloud's catalog as the operator does
(``--catalog FILE`` or ``--cloud-endpoint URL``): a pool with requirements is planned with
its offerings, and a catalog that cannot be read is one line and exit code 2."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import catalogs
from nodepool_operator import cli
from unit.autoscaler.catalogs import TYPES, ZONES
from unit.inspection.recordings import CREATED, NAMESPACE, pod, recording

MANY = "many"


def _pool() -> dict[str, Any]:
    found = catalogs.many_types_pool(MANY, TYPES, ZONES)
    found["metadata"].update(uid=f"uid-{MANY}", creationTimestamp=CREATED)
    return found


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    """A pool allowing c2, c8 and c32 in two zones and a pending pod of 6 cpu for it."""
    path = tmp_path / "snapshot.json"
    recording(pools=[_pool()], nodes=[], pods=[pod("six", "6", pool=MANY)]).save(path)
    return path


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    return catalogs.catalog_file(tmp_path / "instance_types.json", TYPES, ZONES)


def _invoke(*args: str) -> Any:
    # Tables are as wide as the terminal; without one rich assumes 80 columns and wraps.
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})


def test_explain_with_a_catalog_file_names_the_offering_and_the_cheaper_ones_refused(
    snapshot_file: Path, catalog_file: Path
) -> None:
    done = _invoke(
        "explain", "pod", f"{NAMESPACE}/six", "--snapshot", str(snapshot_file),
        "--catalog", str(catalog_file), "-o", "json",
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    explained = json.loads(done.stdout)
    assert explained["planned"].startswith(f"needs a new node of pool {MANY}: targetNodes 0 -> 1")
    assert explained["offering"].startswith("offering c8 in z-a (on-demand, 0.36/h)")
    assert "c2 in z-a (on-demand, 0.1/h): too small (Insufficient cpu)" in explained["offering"]


def test_explain_without_a_catalog_still_says_the_pool_is_not_grown(snapshot_file: Path) -> None:
    done = _invoke(
        "explain", "pod", f"{NAMESPACE}/six", "--snapshot", str(snapshot_file), "-o", "json"
    )

    assert done.exit_code == 0, done.output
    explained = json.loads(done.stdout)
    assert explained["offering"] is None
    assert "has requirements" in explained["planned"]


def test_plan_with_a_catalog_file_shows_the_pools_offerings_and_the_plans_price(
    snapshot_file: Path, catalog_file: Path
) -> None:
    as_json = _invoke(
        "plan", "--dry-run", "--snapshot", str(snapshot_file), "--catalog", str(catalog_file),
        "-o", "json",
    )  # fmt: skip
    table = _invoke(
        "plan", "--dry-run", "--snapshot", str(snapshot_file), "--catalog", str(catalog_file)
    )

    assert as_json.exit_code == 0, as_json.output
    planned = json.loads(as_json.stdout)
    [pool] = planned["offerings"]
    assert pool["pool"] == MANY
    assert pool["blocked"] is None
    # Every offering the pool allows, cheapest first.
    assert [(o["instanceType"], o["zone"], o["pricePerHour"]) for o in pool["offerings"]] == [
        ("c2", "z-a", 0.10),
        ("c2", "z-b", 0.11),
        ("c8", "z-a", 0.36),
        ("c8", "z-b", 0.37),
        ("c32", "z-a", 1.30),
        ("c32", "z-b", 1.31),
    ]
    [new] = pool["newNodes"]
    assert (new["offering"]["instanceType"], new["offering"]["zone"], new["count"]) == (
        "c8",
        "z-a",
        1,
    )
    assert pool["newNodesPerHour"] == pytest.approx(0.36)
    assert planned["newNodesPerHour"] == pytest.approx(0.36)
    assert table.exit_code == 0, table.output
    assert "Pools with requirements" in table.stdout
    assert "1 x c8 in z-a (on-demand, 0.36/h)" in table.stdout
    assert "the plan's new nodes cost 0.36/h" in table.stdout


def test_plan_without_a_catalog_says_the_pool_cannot_grow_and_names_no_price(
    snapshot_file: Path,
) -> None:
    done = _invoke("plan", "--dry-run", "--snapshot", str(snapshot_file), "-o", "json")

    assert done.exit_code == 0, done.output
    planned = json.loads(done.stdout)
    [pool] = planned["offerings"]
    assert pool["blocked"] is not None
    assert "has requirements" in pool["blocked"]
    assert pool["newNodes"] == []
    assert planned["newNodesPerHour"] is None


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("command", [["plan", "--dry-run"], ["explain", "pod", "web/six"]])
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--catalog", "{tmp}/absent.json"], "cannot read the catalog {tmp}/absent.json"),
        (["--catalog", "{tmp}/not-json.json"], "cannot read the catalog {tmp}/not-json.json"),
        (["--catalog", "{tmp}/no-resources.json"], "'resources' must be an object"),
        (["--cloud-endpoint", "http://127.0.0.1:{port}"], "ConnectionError"),
        (["--cloud-endpoint", "http://x", "--catalog", "{tmp}/a.json"], "not both"),
        (["--cloud-token-file", "{tmp}/token"], "give both"),
        (["--cloud-endpoint", "http://x", "--cloud-token-file", "{tmp}/absent"], "token file"),
    ],
)
def test_an_unreadable_catalog_is_one_line_and_exit_code_2(
    tmp_path: Path, snapshot_file: Path, command: list[str], flags: list[str], said: str
) -> None:
    (tmp_path / "not-json.json").write_text("[{")
    (tmp_path / "no-resources.json").write_text(json.dumps([{"name": "c2", "offerings": []}]))
    (tmp_path / "token").write_text("secret-token\n")
    port = _closed_port()
    given = [f.format(tmp=tmp_path, port=port) for f in flags]

    done = _invoke(*command, "--snapshot", str(snapshot_file), *given)

    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert said.format(tmp=tmp_path, port=port) in line
    assert "Traceback" not in done.output
    assert "secret-token" not in done.output
