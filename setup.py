"""The packaging steps pyproject.toml cannot declare.

1. Leave test-only modules out. setuptools excludes packages and data files
   declaratively, not single modules; the pytest plugin
   (``nodepool_operator.cluster.pytest_plugin``) lives next to the control plane it starts,
   but it is a test helper (it needs pytest, which the operator does not): importable from
   the source tree (editable installs, the tests), absent from wheels.
2. Bundle what the CLI reads from outside ``src/``: the Go wrapper modules of ``tools/``
   (``cluster build`` builds the control plane from them) and the RBAC of ``deploy/rbac``
   (``cluster``/``demo`` grant it to the operator's user), copied into
   ``nodepool_operator/_bundled/`` (``cluster.binaries.source_path`` finds them there).

tests/integration/deploy/test_wheel.py checks what a built wheel holds and runs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEST_ONLY_MODULES = frozenset({("nodepool_operator.cluster", "pytest_plugin")})
BUNDLED = ("tools", "deploy/rbac")
BUNDLE = Path("nodepool_operator") / "_bundled"


class BuildPyWithoutTestHelpers(build_py):
    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) not in TEST_ONLY_MODULES]

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the checkout itself
        root = Path(__file__).resolve().parent
        for relative in BUNDLED:
            source = root / relative
            if not source.is_dir():
                raise FileNotFoundError(f"{relative}/ is missing: the wheel needs it ({__doc__})")
            target = Path(self.build_lib) / BUNDLE / relative
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target)


setup(cmdclass={"build_py": BuildPyWithoutTestHelpers})
