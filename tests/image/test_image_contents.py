"""What a user checks before running the image: what is in it (no compiler, no package
manager, no tests, no secrets), who it runs as, its labels, and its SBOM."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

# Executables that would make the image a build machine.
COMPILERS = ("gcc", "cc", "c++", "g++", "cpp", "clang", "tcc", "as", "ld", "make", "cc1")
PACKAGE_MANAGERS = ("apt", "apt-get", "aptitude", "pip", "pip3")
# A whole PEM block of a private key; the texts that merely name one (cryptography's
# serialisation code, botocore's API examples) are not keys, so each block is loaded.
PRIVATE_KEY = re.compile(
    rb"-----BEGIN ((?:[A-Z]+ )?PRIVATE KEY)-----[A-Za-z0-9+/=\s:,-]+?-----END \1-----"
)
SECRET_NAMES = re.compile(
    r"(^|/)(\.git|\.venv|kubeconfig|\.kube|\.aws|id_rsa|id_ed25519|\.netrc|\.pypirc)$"
)


def _files(rootfs: Path) -> list[Path]:
    found = []
    for directory, subdirectories, names in os.walk(rootfs):
        subdirectories[:] = [d for d in subdirectories if not Path(directory, d).is_symlink()]
        found += [Path(directory, name) for name in names]
    return found


def _installed_debian_packages(rootfs: Path) -> set[str]:
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text()
    return set(re.findall(r"^Package: (\S+)", status, re.MULTILINE))


def test_the_image_holds_no_compiler_no_package_manager_and_no_tests(image: Any) -> None:
    rootfs: Path = image.rootfs
    paths = {"/" + str(path.relative_to(rootfs)) for path in _files(rootfs)}
    executables = {
        Path(path).name
        for path in paths
        if path.startswith(("/usr/bin/", "/usr/sbin/", "/usr/local/bin/", "/opt/venv/bin/"))
    }
    assert "nodepool-operator" in executables, "the entrypoint is missing"
    assert "python3" in executables
    assert executables.isdisjoint(COMPILERS), executables & set(COMPILERS)
    assert executables.isdisjoint(PACKAGE_MANAGERS), executables & set(PACKAGE_MANAGERS)
    assert not any(path.startswith("/usr/include/") for path in paths), "C headers"
    packages = _installed_debian_packages(rootfs)
    assert "python3.11" in packages
    for absent in ("apt", "gcc-12", "cpp-12", "binutils", "libc6-dev", "python3.11-dev",
                   "python3-venv", "python3-pip-whl"):  # fmt: skip
        assert absent not in packages, absent
    # The build stage's sources, wheels and pip stay in the build stage.
    for absent in ("/src", "/wheels", "/opt/build", "/root/.cache/pip"):
        assert not (rootfs / absent.lstrip("/")).exists(), absent
    site = next((rootfs / "opt" / "venv" / "lib").glob("python3*/site-packages"))
    assert (site / "nodepool_operator" / "cli.py").is_file()
    # The test helpers and test-only dependencies are not installed.
    assert not (site / "nodepool_operator" / "cluster" / "pytest_plugin.py").exists()
    for test_only in ("pytest", "_pytest", "hypothesis", "moto", "pip", "setuptools"):
        assert not (site / test_only).exists(), test_only
    assert not [p for p in paths if p.endswith(("/conftest.py", "/harness.py"))]


def _is_private_key(block: bytes) -> bool:
    try:
        serialization.load_pem_private_key(block, password=None)
    except TypeError:
        return True  # encrypted: a key all the same
    except (ValueError, UnsupportedAlgorithm):
        return False
    return True


def test_the_image_holds_no_secrets(image: Any) -> None:
    rootfs: Path = image.rootfs
    suspicious, keys = [], []
    for path in _files(rootfs):
        relative = "/" + str(path.relative_to(rootfs))
        if SECRET_NAMES.search(relative) or relative.startswith("/run/secrets/"):
            suspicious.append(relative)
        facts = path.lstat()
        small_file = stat.S_ISREG(facts.st_mode) and facts.st_size < 4_000_000
        if small_file and any(
            _is_private_key(m[0]) for m in PRIVATE_KEY.finditer(path.read_bytes())
        ):
            keys.append(relative)
    assert suspicious == []
    assert keys == []
    environment = " ".join(image.config["config"].get("Env", []))
    assert not re.search(r"(?i)token|secret|password|_KEY=", environment), environment
    # The build's pip-cert secret is mounted for its steps only.
    assert not any("pip-cert" in json.dumps(step) for step in image.config.get("history", []))


def test_the_image_runs_as_its_non_root_user_and_carries_its_labels(image: Any) -> None:
    config = image.config["config"]
    assert config["User"] == "65532:65532"  # deploy/manager/deployment.yaml: runAsUser
    assert config["Entrypoint"] == ["nodepool-operator"]
    assert config["Cmd"] == ["run"]
    passwd = (image.rootfs / "etc" / "passwd").read_text()
    assert "nodepool:x:65532:65532:" in passwd
    home = (image.rootfs / "home" / "nodepool").stat()
    assert (home.st_uid, home.st_gid) == (65532, 65532)
    labels = config["Labels"]
    for name in ("title", "description", "licenses", "version", "revision", "created"):
        assert labels.get(f"org.opencontainers.image.{name}"), name
    assert labels["org.opencontainers.image.revision"].startswith(
        image.facts["REVISION"].removesuffix("-dirty")
    )
    assert image.config["created"] == labels["org.opencontainers.image.created"]


def test_the_sbom_lists_the_debian_and_the_python_packages(image: Any) -> None:
    sbom = json.loads(Path(image.facts["SBOM"]).read_text())
    assert sbom["spdxVersion"].startswith("SPDX-2.")
    purls = {
        reference["referenceLocator"].split("@")[0]
        for package in sbom["packages"]
        for reference in package.get("externalRefs", [])
        if reference.get("referenceType") == "purl"
    }
    for expected in ("pkg:deb/debian/python3.11", "pkg:deb/debian/libssl3",
                     "pkg:pypi/kubernetes-asyncio", "pkg:pypi/aiohttp",
                     "pkg:pypi/nodepool-operator"):  # fmt: skip
        assert expected in purls, expected
    locked = (image.out / "python-packages.txt").read_text().split()
    assert "kubernetes-asyncio==36.1.0" in locked
    debian = (image.out / "debian-packages.txt").read_text().split()
    assert any(line.startswith("python3.11=3.11.") for line in debian)


@pytest.mark.parametrize("fact", ["DIGEST", "COMPRESSED_BYTES", "UNCOMPRESSED_BYTES"])
def test_the_build_reports_its_digest_and_size(image: Any, fact: str) -> None:
    value = image.facts[fact]
    if fact == "DIGEST":
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", value)
    else:
        assert int(value) > 10_000_000
