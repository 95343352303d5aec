"""A snapshot keeps what the planner reads, leaves secrets and env values out, and replays
into informers that hold exactly what was recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodepool_operator.controllers import cached
from nodepool_operator.inspection import snapshot
from nodepool_operator.runtime import kinds


def _pod_template() -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"app": "agent"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": '{"password": "hunter2"}',
                "nodepool.dev/do-not-disrupt": "true",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.example.com/agent:1",
                    "command": ["agent", "--token=hunter2"],
                    "env": [{"name": "TOKEN", "value": "hunter2"}],
                    "resources": {"requests": {"cpu": "100m"}},
                }
            ],
            "nodeSelector": {"zone": "a"},
        },
    }


def test_scrubbing_drops_env_commands_images_and_foreign_annotations_and_keeps_the_rest() -> None:
    daemon_set = {
        "metadata": {"name": "agent", "namespace": "kube-system", "managedFields": [{}]},
        "spec": {"template": _pod_template()},
    }

    kept = snapshot.scrubbed(daemon_set)

    assert "hunter2" not in repr(kept)
    assert "registry.example.com" not in repr(kept)
    assert "managedFields" not in kept["metadata"]
    template = kept["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"zone": "a"}
    assert template["spec"]["containers"] == [
        {"name": "agent", "resources": {"requests": {"cpu": "100m"}}}
    ]
    assert template["metadata"]["annotations"] == {"nodepool.dev/do-not-disrupt": "true"}


def _recording() -> snapshot.CacheRecording:
    template = _pod_template()
    identity = {"name": "agent-x", "namespace": "kube-system", "uid": "u1"}
    pod = {**template, "metadata": {**template["metadata"], **identity}}
    key = snapshot.cache_key(kinds.PODS, None, None, None)
    return snapshot.CacheRecording(
        caches={key: [snapshot.scrubbed(pod)]}, captured_at="2026-12-01T00:00:00+00:00"
    )


def test_a_replayed_cache_holds_the_recorded_objects_through_the_same_transform() -> None:
    cache = snapshot.SnapshotCache(_recording())

    pods = cache.informer(kinds.PODS, transform=cached.pod_fields)

    assert pods.has_synced()
    found = pods.get("agent-x", "kube-system")
    assert found is not None
    assert found["spec"]["nodeSelector"] == {"zone": "a"}


def test_a_cache_the_snapshot_does_not_hold_is_refused_by_name() -> None:
    cache = snapshot.SnapshotCache(_recording())

    with pytest.raises(snapshot.SnapshotError, match="no nodes cache"):
        cache.informer(kinds.NODES, label_selector="nodepool.dev/pool")


@pytest.mark.parametrize("name", ["snap.json", "snap.json.gz"])
def test_a_saved_snapshot_loads_back_equal(tmp_path: Path, name: str) -> None:
    saved = _recording()
    path = tmp_path / name

    saved.save(path)
    loaded = snapshot.load(path)

    assert loaded.caches == saved.caches
    assert loaded.captured_at == saved.captured_at


def test_saving_the_same_state_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    _recording().save(tmp_path / "a.json.gz")
    _recording().save(tmp_path / "b.json.gz")

    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_a_file_that_is_not_a_snapshot_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"kind": "List"}')

    with pytest.raises(snapshot.SnapshotError, match=r"other\.json is not a"):
        snapshot.load(path)
    with pytest.raises(snapshot.SnapshotError, match="no snapshot file"):
        snapshot.load(tmp_path / "absent.json")
