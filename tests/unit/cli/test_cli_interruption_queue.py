"""`run --interruption-queue URL` reaches the EC2 provider, and the operator reads the
cloud's events where the cloud tells them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodepool_operator import operator
from nodepool_operator.cloud import selection
from nodepool_operator.cloud.simcloud.client import SimCloudClient
from unit.cli import run_recorder

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/prod-interruptions"


def test_the_interruption_queue_flag_reaches_the_operator_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = ("--cloud", "aws", "--cluster-name", "prod", "--interruption-queue", QUEUE)
    result, seen = run_recorder.invoke_run(monkeypatch, *flags, kubeconfig=tmp_path / "kubeconfig")

    assert result.exit_code == 0, result.output
    [options] = seen
    assert options.interruption_queue == QUEUE


async def test_ec2_is_read_for_events_only_with_a_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with_queue = selection.create(
        "aws", selection.ProviderOptions(cluster_name="prod", interruption_queue=QUEUE)
    )
    without = selection.create("aws", selection.ProviderOptions(cluster_name="prod"))
    try:
        source = operator.event_source(with_queue, name="aws", interruption_queue=QUEUE)
        assert source is with_queue
        assert with_queue._interruptions is not None  # type: ignore[attr-defined]
        assert operator.event_source(without, name="aws", interruption_queue=None) is None
    finally:
        await with_queue.close()
        await without.close()


async def test_the_simcloud_is_read_for_events_without_a_flag() -> None:
    cloud = SimCloudClient("http://127.0.0.1:1", cluster="c")
    try:
        assert operator.event_source(cloud, name="simcloud", interruption_queue=None) is cloud
    finally:
        await cloud.close()
