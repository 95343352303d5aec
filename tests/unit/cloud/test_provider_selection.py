"""``run --cloud NAME``: the built-in providers, and one installed as a separate package
through the entry-point group (a real distribution's metadata on ``sys.path``)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodepool_operator.cloud import aws, credentials, selection
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


async def test_aws_is_the_ec2_provider() -> None:
    cloud = selection.create("aws", selection.ProviderOptions(endpoint="http://127.0.0.1:1"))

    assert isinstance(cloud, aws.Ec2Provider)
    await cloud.close()


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
    cloud = selection.create("aws", selection.ProviderOptions())

    assert isinstance(cloud, aws.Ec2Provider)
    await cloud.close()
