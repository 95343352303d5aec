"""The OCI archive goes to a registry as it is: skopeo pushes it to a local registry
(Debian's docker-registry, the CNCF distribution registry), and the registry serves the
manifest with the digest build-image.sh printed."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Process
from nodepool_devtools.cluster.controlplane import free_port

REGISTRY = "docker-registry"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    if shutil.which(REGISTRY) is None:
        pytest.skip(f"no {REGISTRY} to push to: apt-get install -y {REGISTRY}")
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "registry.yml"
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "storage")}},
                "http": {"addr": address},
            }
        )
    )
    process = Process("registry", [REGISTRY, "serve", str(config)], tmp_path / "registry.log")
    process.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2):
                break
        except OSError:
            assert process.running, process.output()
            assert time.monotonic() < deadline, "the registry did not start"
            time.sleep(0.2)
    yield address
    process.stop()


def _skopeo(*args: str) -> str:
    done = subprocess.run(
        ["skopeo", *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_skopeo_pushes_the_archive_and_the_registry_serves_the_same_digest(
    image: Any, registry: str
) -> None:
    reference = f"docker://{registry}/platform/nodepool-operator:0.1.0"
    _skopeo("copy", "--quiet", "--dest-tls-verify=false", f"oci-archive:{image.facts['ARCHIVE']}",
            reference)  # fmt: skip
    manifest = _skopeo("inspect", "--tls-verify=false", "--raw", reference)
    assert f"sha256:{hashlib.sha256(manifest.encode()).hexdigest()}" == image.facts["DIGEST"]
    pushed = json.loads(_skopeo("inspect", "--tls-verify=false", reference))
    assert pushed["Digest"] == image.facts["DIGEST"]
    assert pushed["Labels"]["org.opencontainers.image.title"] == "nodepool-operator"
