"""``run --cloud NAME``: the built-in providers, and one installed as a separate package
through the entry-point group (a real distribution's metadata on ``sys.path``); and
``run --cluster-name``: required for aws, from the kubeconfig for simcloud."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodepool_operator import cli
from nodepool_operator.cloud import aws, credentials, selection
from nodepool_operator.cloud.simcloud import server
from nodepool_operator.cloud.simcloud.client import SimCloudClient


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package ``toycloud`` installed as a distribution that registers two providers
    under the group: ``toy``, and ``aws`` (which must not replace the built-in one)."""
    (tmp_path / "toycloud.py").write_text(
        textwrap.dedent(
            """
            from nodepool_operator.cloud.simcloud.client import SimCloudClient

            def create(options):
                client = SimCloudClient(options.endpoint or "http://toy.invalid")
                client.made_by_toy = True
                return client
            """
        )
    )
    dist_info = tmp_path / "toycloud-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: toycloud\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{selection.ENTRY_POINT_GROUP}]\ntoy = toycloud:create\naws = toycloud:create\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("toycloud", None)


async def test_simcloud_is_made_with_the_default_endpoint_and_the_token() -> None:
    token = credentials.StaticToken("t0k3n")

    cloud = selection.create("simcloud", selection.ProviderOptions(token=token))

    assert isinstance(cloud, SimCloudClient)
    assert cloud.endpoint == selection.DEFAULT_SIMCLOUD_ENDPOINT
    await cloud.close()


async def test_aws_is_the_ec2_provider_of_the_named_cluster() -> None:
    options = selection.ProviderOptions(endpoint="http://127.0.0.1:1", cluster_name="prod-eu")

    cloud = selection.create("aws", options)

    assert isinstance(cloud, aws.Ec2Provider)
    assert cloud.cluster_name == "prod-eu"
    await cloud.close()


def test_aws_without_a_cluster_name_is_refused_with_the_reason() -> None:
    with pytest.raises(selection.InvalidProviderOptions, match="--cluster-name"):
        selection.create("aws", selection.ProviderOptions())


@pytest.mark.parametrize("name", ["", "-lead", "has space", "x" * 101, "a/b"])
def test_a_cluster_name_that_cannot_be_a_tag_is_refused(name: str) -> None:
    with pytest.raises(selection.InvalidProviderOptions, match="--cluster-name"):
        selection.check_cluster_name(name)


def test_the_simcloud_cluster_defaults_to_the_kubeconfig_s_current_cluster(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "current-context: admin@eks\n"
        "contexts:\n"
        "- name: admin@local\n  context: {cluster: local, user: admin}\n"
        "- name: admin@eks\n"
        "  context: {cluster: 'arn:aws:eks:eu-west-1:111122223333:cluster/prod eu', user: a}\n"
    )

    assert selection.default_cluster_name(kubeconfig) == "prod-eu"
    assert selection.default_cluster_name(None) == selection.DEFAULT_CLUSTER_NAME


def test_a_kubeconfig_without_a_current_cluster_asks_for_the_flag(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("contexts: []\n")

    with pytest.raises(selection.InvalidProviderOptions, match="give --cluster-name"):
        selection.default_cluster_name(kubeconfig)


def test_an_unknown_name_lists_what_is_available() -> None:
    with pytest.raises(selection.UnknownProvider, match="available: aws, simcloud"):
        selection.create("gcp", selection.ProviderOptions())


async def test_a_provider_installed_under_the_entry_point_group_is_found(
    installed_plugin: Path,
) -> None:
    assert "toy" in selection.available()

    cloud = selection.create("toy", selection.ProviderOptions(endpoint="http://toy.example"))

    assert getattr(cloud, "made_by_toy", False)
    assert isinstance(cloud, SimCloudClient)
    assert cloud.endpoint == "http://toy.example"
    await cloud.close()


async def test_an_installed_package_cannot_take_a_built_in_name(installed_plugin: Path) -> None:
    cloud = selection.create("aws", selection.ProviderOptions(cluster_name="c"))

    assert isinstance(cloud, aws.Ec2Provider)
    await cloud.close()


def test_run_with_aws_and_no_cluster_name_exits_with_the_reason(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.app, ["run", "--cloud", "aws", "--kubeconfig", str(tmp_path / "absent")]
    )

    assert result.exit_code == 1
    assert "--cloud aws needs --cluster-name" in result.output


def test_simcloud_faults_given_at_start_as_json_are_checked_like_a_put() -> None:
    config = server.SimCloudConfig(insecure_no_auth=True)

    started = config.with_faults({"capacity": [{"zone": "sim-1a", "maxVms": 0}]})

    assert [c.offering.zone for c in started.capacity] == ["sim-1a"]
    assert started.faults().capacity == started.capacity
    with pytest.raises(ValueError, match="maxVms"):
        config.with_faults({"capacity": [{"zone": "sim-1a"}]})
