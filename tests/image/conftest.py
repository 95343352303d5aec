"""The container image, built by scripts/build-image.sh and unpacked: fixtures.

Building needs root and the Debian tools the script uses; without them the tests skip and
say how to install them. The image is built once per session into a temporary directory
(the Debian base root filesystem is cached between runs, see docs/image.md), unless
NODEPOOL_IMAGE_ENV names the image.env of a build to test instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-image.sh"
DEBIAN_TOOLS = ("mmdebstrap", "buildah", "skopeo", "umoci")
BUILD_TIMEOUT = 1800
#: The image.env of an image build-image.sh has built: test that one instead of building.
BUILT_ENV = "NODEPOOL_IMAGE_ENV"
INSTALL = f"apt-get install -y {' '.join(DEBIAN_TOOLS)}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/image/" in str(item.path):
            item.add_marker(pytest.mark.image)
            item.add_marker(pytest.mark.integration)
            # The first test builds the image (minutes when the Debian bases are not cached).
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT))


def _why_not_buildable() -> str | None:
    if os.geteuid() != 0:
        return "the image is built and run as root (mmdebstrap --mode=root, chroot)"
    missing = [tool for tool in (*DEBIAN_TOOLS, "unshare", "setpriv") if shutil.which(tool) is None]
    if missing:
        return f"missing {' '.join(missing)}: {INSTALL}"
    if shutil.which("syft") is None and shutil.which("go") is None:
        return "neither syft nor go (to build it) is on PATH"
    return None


@dataclass(frozen=True)
class Image:
    """What build-image.sh printed (OUT/image.env), and the image unpacked."""

    facts: dict[str, str]
    out: Path
    rootfs: Path
    config: dict[str, Any]
    """The OCI image configuration (Entrypoint, Env, User, Labels ...)."""


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    reason = _why_not_buildable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("image")
    if os.environ.get(BUILT_ENV):
        out = Path(os.environ[BUILT_ENV]).parent
    else:
        out = work / "out"
        environment = {**os.environ, "OUT": str(out), "IMAGE": "localhost/nodepool-operator:test"}
        built = _run(["bash", str(BUILD_SCRIPT)], cwd=REPO, env=environment, timeout=BUILD_TIMEOUT)
        assert built.returncode == 0, f"{built.stdout}\n{built.stderr}"
    facts = dict(
        line.split("=", 1) for line in (out / "image.env").read_text().splitlines() if line
    )
    layout = work / "layout"
    with tarfile.open(facts["ARCHIVE"]) as archive:
        archive.extractall(layout, filter="tar")
    bundle = work / "bundle"
    tag = json.loads((layout / "index.json").read_text())["manifests"][0]["annotations"]
    reference = f"{layout}:{tag['org.opencontainers.image.ref.name']}"
    unpacked = _run(["umoci", "unpack", "--image", reference, str(bundle)])
    assert unpacked.returncode == 0, unpacked.stderr
    return Image(facts, out, bundle / "rootfs", _image_config(layout))


def _run(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    """``command``'s outcome, its output captured as text; the caller checks its code."""
    return subprocess.run(command, capture_output=True, text=True, check=False, **options)


def _image_config(layout: Path) -> dict[str, Any]:
    def blob(digest: str) -> Any:
        algorithm, value = digest.split(":")
        return json.loads((layout / "blobs" / algorithm / value).read_text())

    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = blob(entry["digest"])
    config: dict[str, Any] = blob(manifest["config"]["digest"])
    return config
