"""Running the inspection CLI as a user does, reading its JSON, and the Nodes its tests
make by hand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from e2e.autoscaling import kwok_node
from harness import CLI
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown


def run_cli(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    found = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    # Tables are as wide as the terminal; without one rich assumes 80 columns and wraps.
    wide = {**os.environ, "COLUMNS": "160"}
    return subprocess.run(
        [*CLI, *args, *found], capture_output=True, text=True, timeout=180, check=False, env=wide
    )


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hand_made_node(
    name: str, *, pool: str, owner_uid: str | None, annotations: dict[str, str]
) -> dict[str, Any]:
    """A kwok Node (kwok keeps it Ready) with the pool's labels; the pool's own only when
    ``owner_uid`` names the pool's uid, as the NodePool controller makes its Nodes."""
    room = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    template = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)
    owners = [
        {
            "apiVersion": nodepool_api.API_VERSION,
            "kind": nodepool_api.KIND,
            "name": pool,
            "uid": owner_uid,
            "blockOwnerDeletion": False,
        }
    ]
    labels = {**nodepool_api.node_labels(pool, template), wellknown.HOSTNAME_LABEL: name}
    return kwok_node(
        name,
        labels=labels,
        room=room,
        annotations=annotations,
        owners=owners if owner_uid else [],
    )
