"""The one packaging step pyproject.toml cannot declare: leave test-only modules out.

setuptools can exclude packages and data files declaratively, not single modules; the
pytest plugin (``nodepool_operator.cluster.pytest_plugin``) lives next to the control plane
it starts, but it is a test helper (it needs pytest, which the operator does not): it is
importable from the source tree (editable installs, the tests) and absent from wheels.
tests/unit/deploy/test_wheel_contents.py checks what a built wheel holds.
"""

from __future__ import annotations

from setuptools import setup
from setuptools.command.build_py import build_py

TEST_ONLY_MODULES = frozenset({("nodepool_operator.cluster", "pytest_plugin")})


class BuildPyWithoutTestHelpers(build_py):
    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) not in TEST_ONLY_MODULES]


setup(cmdclass={"build_py": BuildPyWithoutTestHelpers})
