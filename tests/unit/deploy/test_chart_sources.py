"""The chart is made from deploy/'s sources: its CRDs are `nodepool-operator crds`, its
RBAC rules and monitoring assets are deploy/'s files (charts/sync-from-deploy.sh copies
them; helm reads nothing outside the chart). Rendering is tested with helm itself in
tests/integration/deploy/test_chart.py."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodepool_operator.api import crds

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "nodepool-operator"
COPIES = {
    "deploy/crds/crds.yaml": "crds/crds.yaml",
    "deploy/rbac/clusterrole.yaml": "files/rbac/clusterrole.yaml",
    "deploy/rbac/leader-election-role.yaml": "files/rbac/leader-election-role.yaml",
    "deploy/rbac/metrics-reader-role.yaml": "files/rbac/metrics-reader-role.yaml",
    "deploy/monitoring/prometheusrule.yaml": "files/monitoring/prometheusrule.yaml",
    "deploy/monitoring/dashboards/nodepool-operator.json": (
        "files/monitoring/nodepool-operator.json"
    ),
}


def _values_schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


@pytest.mark.parametrize(("source", "copy"), COPIES.items())
def test_the_chart_copies_deploys_file_byte_for_byte(source: str, copy: str) -> None:
    assert (CHART / copy).read_bytes() == (REPO / source).read_bytes(), (
        f"charts/nodepool-operator/{copy} is stale: run charts/sync-from-deploy.sh"
    )


def test_the_sync_script_copies_exactly_these_files() -> None:
    script = (REPO / "charts" / "sync-from-deploy.sh").read_text()
    for source, copy in COPIES.items():
        assert f"{source} " in script
        assert f'"$chart/{copy}"' in script
    checked = subprocess.run(
        ["bash", str(REPO / "charts" / "sync-from-deploy.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_charts_crds_are_what_the_cli_prints() -> None:
    assert (CHART / "crds" / "crds.yaml").read_text() == crds.render_yaml()
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["crds.yaml"]


def test_the_chart_version_follows_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    assert chart["apiVersion"] == "v2"


def test_every_value_has_a_schema_and_the_schema_refuses_unknown_keys() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = _values_schema()

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        if isinstance(value, dict) and "properties" in node:
            assert node.get("additionalProperties") is False, path
            for key, child in value.items():
                assert key in node["properties"], f"{path}.{key} has no schema"
                walk(child, node["properties"][key], f"{path}.{key}")

    walk(values, schema, "values")
