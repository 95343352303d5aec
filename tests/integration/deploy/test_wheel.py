"""The package as `pip install` gives it to a user: a wheel built from what the image is
built from (.dockerignore's allowlist), installed with the locked runtime dependencies
(requirements/runtime.txt, hashes checked) into a clean virtualenv, and run from a
directory outside the source tree.

Needs PyPI (or pip's cache) for the locked dependencies and setuptools, as CI's
`scripts/setup-env.sh` does.

The wheel holds the product package, nodepool_operator, and nothing else: the development
tools (nodepool_devtools: the local control plane, the demo, the pytest plugin) stay in the
checkout, and no file of tools/ or deploy/ is bundled (only those tools read them).
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

REPO = Path(__file__).resolve().parents[3]
# The build context of the Dockerfile: everything a wheel is made from.
SOURCES = ("pyproject.toml", "README.md", "src")


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


def test_the_wheel_holds_the_product_package_alone(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
    assert "nodepool_operator/cli.py" in names
    assert "nodepool_operator/py.typed" in names
    assert "nodepool_operator/api/wellknown.py" in names
    # Every file is the product's or the wheel's metadata: no development tools, no bundle.
    [dist_info] = {name.split("/")[0] for name in names if ".dist-info/" in name}
    assert {name.split("/")[0] for name in names} == {"nodepool_operator", dist_info}
    assert not any(name.startswith("nodepool_operator/_bundled/") for name in names)
    [metadata] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(installed.wheel) as archive:
        entry_points = archive.read(metadata).decode()
    assert "nodepool-operator = nodepool_operator.cli:main" in entry_points


def test_the_installed_cli_runs_outside_the_source_tree(installed: Installed) -> None:
    for args in (["--help"], ["run", "--help"], ["cluster", "--help"], ["demo", "--help"]):
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
    # The development tools and test-only dependencies are absent, not merely unused.
    for module in ("nodepool_devtools", "nodepool_operator.cluster", "pytest"):
        missing = _run(installed.python, "-c", f"import {module}", cwd=installed.outside)
        assert missing.returncode != 0
        assert "ModuleNotFoundError" in missing.stderr, module
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    shown = _run(installed.python, "-m", "pip", "show", "nodepool-operator", cwd=installed.outside)
    assert f"Version: {version}" in shown.stdout


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["cluster", "up"], "cluster"),
        (["cluster", "build"], "cluster"),
        (["demo"], "demo"),
        (["simcloud", "--kubelets", "hollow"], "simcloud --kubelets hollow"),
    ],
    ids=["cluster-up", "cluster-build", "demo", "simcloud-hollow"],
)
def test_the_installed_cli_says_in_one_line_that_a_development_command_needs_a_checkout(
    installed: Installed, args: list[str], command: str
) -> None:
    if args[0] == "simcloud":
        kubeconfig = installed.outside / "kubeconfig"
        kubeconfig.write_text("{}")
        args = [*args, "--kubelet-kubeconfig", str(kubeconfig), "--insecure-no-auth"]
    done = _run(installed.cli, *args, cwd=installed.outside)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"error: '{command}' is a development tool, not in the installed package: run it "
        "from a source checkout ('source scripts/setup-env.sh', docs/development.md)"
    ]
    assert "Traceback" not in done.stdout + done.stderr
