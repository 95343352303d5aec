"""The lock files cover what pyproject.toml asks for, and the installs use them.

scripts/lock.sh exports requirements/runtime.txt and one requirements/<extra>.txt per
extra from uv.lock. A dependency added to pyproject.toml without running it fails here
(and scripts/setup-env.sh stops), rather than being resolved afresh on some machine.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]
REQUIREMENTS = REPO / "requirements"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT.get("optional-dependencies", {})
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def pinned(name: str) -> dict[str, str]:
    """Package -> exact version, from requirements/<name>.txt."""
    text = (REQUIREMENTS / name).read_text()
    return {canonicalize_name(m.group(1)): m.group(2) for m in PIN.finditer(text)}


def unpinned_or_out_of_range(requirements: list[str], lock: dict[str, str]) -> list[str]:
    wrong = []
    for line in requirements:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = lock.get(canonicalize_name(requirement.name))
        if version is None:
            wrong.append(f"{requirement.name} is not locked")
        elif not requirement.specifier.contains(version, prereleases=True):
            wrong.append(f"{requirement.name}=={version} is outside {requirement.specifier}")
    return wrong


def test_there_is_one_lock_for_the_runtime_and_one_per_extra() -> None:
    expected = {"runtime.txt", *(f"{extra}.txt" for extra in EXTRAS)}
    assert {p.name for p in REQUIREMENTS.glob("*.txt")} == expected
    assert (REPO / "uv.lock").is_file()


def test_the_runtime_lock_pins_every_dependency_within_its_range() -> None:
    assert unpinned_or_out_of_range(PROJECT["dependencies"], pinned("runtime.txt")) == []


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extras_lock_pins_the_runtime_and_the_extra_at_the_same_versions(extra: str) -> None:
    lock = pinned(f"{extra}.txt")
    assert unpinned_or_out_of_range([*PROJECT["dependencies"], *EXTRAS[extra]], lock) == []
    runtime = pinned("runtime.txt")
    assert {name: lock[name] for name in runtime if name in lock} == runtime


@pytest.mark.parametrize("name", ["runtime.txt", *(f"{extra}.txt" for extra in sorted(EXTRAS))])
def test_every_locked_package_has_hashes(name: str) -> None:
    text = (REQUIREMENTS / name).read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    assert entries
    for entry in entries:
        assert PIN.match(entry), entry[:80]
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry[:80]


def test_the_image_and_the_dev_setup_install_from_the_locks_with_hashes_checked() -> None:
    dockerfile = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())
    assert re.search(r"pip wheel .*--require-hashes .*-r requirements/runtime\.txt", dockerfile)
    setup = (REPO / "scripts" / "setup-env.sh").read_text()
    assert "--require-hashes --no-deps -r requirements/dev.txt" in setup
    assert "--no-deps -e ." in setup
