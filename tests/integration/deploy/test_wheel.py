"""The package as `pip install` gives it to a user: a wheel built from what the image is
built from (.dockerignore's allowlist), installed with the locked runtime dependencies
(requirements/runtime.txt, hashes checked) into a clean virtualenv, and run from a
directory outside the source tree.

Needs PyPI (or pip's cache) for the locked dependencies and setuptools, as CI's
`scripts/setup-env.sh` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from nodepool_operator.api import crds
from nodepool_operator.cluster import binaries

REPO = Path(__file__).resolve().parents[3]
# The build context of the Dockerfile: everything a wheel is made from.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "src", "tools", "deploy/rbac")


def _run(
    *command: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH and a directory outside the tree: the source checkout cannot leak in.
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=clean | (env or {}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    cli: Path
    outside: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info"))  # fmt: skip
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    dist = work / "dist"
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", dist, source,
                 cwd=work)  # fmt: skip
    assert built.returncode == 0, built.stderr
    [wheel] = dist.glob("nodepool_operator-*.whl")

    environment = work / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(environment)
    python = environment / "bin" / "python"
    lock = REPO / "requirements" / "runtime.txt"
    for step in (
        ["install", "--quiet", "--require-hashes", "--no-deps", "-r", lock],
        ["install", "--quiet", "--no-deps", wheel],
        ["check"],
    ):
        done = _run(python, "-m", "pip", *step, cwd=work)
        assert done.returncode == 0, f"pip {step[0]}: {done.stdout}{done.stderr}"
    outside = work / "elsewhere"
    outside.mkdir()
    return Installed(wheel, python, environment / "bin" / "nodepool-operator", outside)


def test_the_wheel_holds_the_package_and_not_the_test_helpers(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
    assert "nodepool_operator/cli.py" in names
    assert "nodepool_operator/py.typed" in names
    assert "nodepool_operator/cluster/pytest_plugin.py" not in names
    # What `cluster build` and `demo` read from outside src/ in a checkout.
    bundled = "nodepool_operator/_bundled/"
    for tool in ("etcd", "kubernetes", "kwok", "helm"):
        assert f"{bundled}tools/{tool}/go.mod" in names
        assert f"{bundled}tools/{tool}/go.sum" in names
    for role in ("clusterrole.yaml", "leader-election-role.yaml"):
        assert f"{bundled}deploy/rbac/{role}" in names
    assert not any(name.startswith(("tests/", "bench/")) for name in names)
    [metadata] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(installed.wheel) as archive:
        entry_points = archive.read(metadata).decode()
    assert "nodepool-operator = nodepool_operator.cli:main" in entry_points


def test_the_installed_cli_runs_outside_the_source_tree(installed: Installed) -> None:
    for args in (["--help"], ["run", "--help"]):
        done = _run(installed.cli, *args, cwd=installed.outside)
        assert done.returncode == 0, done.stderr
        assert "Usage: nodepool-operator" in done.stdout
    printed = _run(installed.cli, "crds", cwd=installed.outside)
    assert printed.returncode == 0, printed.stderr
    assert [doc for doc in yaml.safe_load_all(printed.stdout) if doc] == crds.all_crds()


def test_the_installed_package_is_the_wheels_and_has_only_its_locked_dependencies(
    installed: Installed,
) -> None:
    location = "import nodepool_operator; print(nodepool_operator.__file__)"
    where = _run(installed.python, "-c", location, cwd=installed.outside)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.python.parents[1])
    # Test helpers and test-only dependencies are absent, not merely unused.
    for module in ("nodepool_operator.cluster.pytest_plugin", "pytest"):
        missing = _run(installed.python, "-c", f"import {module}", cwd=installed.outside)
        assert missing.returncode != 0
        assert "ModuleNotFoundError" in missing.stderr, module
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    shown = _run(installed.python, "-m", "pip", "show", "nodepool-operator", cwd=installed.outside)
    assert f"Version: {version}" in shown.stdout


def test_the_installed_cli_finds_the_pinned_binaries_and_the_rbac_without_a_checkout(
    installed: Installed,
) -> None:
    # The cache this machine's control plane uses, so nothing is built here; the pins are
    # read from the wheel's copy of tools/, and the cache keys must match them.
    cache = binaries.cache_root()
    built = _run(installed.cli, "cluster", "build", cwd=installed.outside,
                 env={binaries.CACHE_ENV: str(cache)})  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "[build]" not in built.stderr, "built again instead of using the cache"
    found = dict(line.split() for line in built.stdout.splitlines())
    assert set(found) == {*binaries.ALL_BINARIES, *binaries.KUBEMARK.commands, "helm"}
    for path in found.values():
        assert Path(path).is_relative_to(cache)
    code = (
        "from nodepool_operator.cluster import binaries, install; "
        "print(binaries.tools_directory()); print(install._deploy_directory())"
    )
    where = _run(installed.python, "-c", code, cwd=installed.outside)
    assert where.returncode == 0, where.stderr
    site = installed.python.parents[1]
    for line in where.stdout.splitlines():
        assert Path(line).is_relative_to(site), line
        assert Path(line).is_dir(), line
