"""The suite's shape (DESIGN convention 12): a test double is defined once, beside what it
fakes (``runtime/testing.py``, ``cloud/testing.py``) or in a tests' support module, and no
test module imports another (what two test modules share lives in a support module)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = (ROOT / "src", ROOT / "tests")

# Known to break the rules in files other work is moving (issue 46, item 1: the Autoscaler
# tests; the inspection tests). Each entry must still break them: when one is fixed, the
# test below fails until it is taken off this list, so the list only shrinks.
FAKES_NOT_YET_SHARED: set[str] = set()
TEST_IMPORTS_NOT_YET_MOVED: set[str] = set()


def python_files() -> list[Path]:
    return sorted(
        path for tree in TREES for path in tree.rglob("*.py") if ".venv" not in path.parts
    )


def fake_classes(source: str) -> list[str]:
    """The names of the ``Fake…`` classes ``source`` defines, at any depth."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name.startswith("Fake")
    ]


def names_of_test_modules(paths: list[str]) -> set[str]:
    """The dotted names (as tests import them: ``tests/`` is on the path) of the test
    modules among ``paths``."""
    return {
        ".".join(Path(path).relative_to("tests").with_suffix("").parts)
        for path in paths
        if path.startswith("tests/") and Path(path).name.startswith("test_")
    }


def imported_test_modules(source: str, test_modules: set[str]) -> list[str]:
    """The test modules of the suite that ``source`` imports, by dotted name."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in found if name in test_modules]


def defined_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each ``Fake…`` class name defined in more than one place, with where."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, source in sources.items():
        for name in fake_classes(source):
            where[name].append(path)
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def importing_test_modules(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each file that imports a test module, with what it imports."""
    test_modules = names_of_test_modules(list(sources))
    found = {path: imported_test_modules(source, test_modules) for path, source in sources.items()}
    return {path: names for path, names in found.items() if names}


def read_suite() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in python_files()}


def test_no_fake_class_is_defined_twice() -> None:
    twice = defined_twice(read_suite())
    assert {n: p for n, p in twice.items() if n not in FAKES_NOT_YET_SHARED} == {}
    assert set(twice) >= FAKES_NOT_YET_SHARED, "shared now: take it off FAKES_NOT_YET_SHARED"


def test_no_test_module_imports_another() -> None:
    importing = importing_test_modules(read_suite())
    assert {p: n for p, n in importing.items() if p not in TEST_IMPORTS_NOT_YET_MOVED} == {}
    assert set(importing) >= TEST_IMPORTS_NOT_YET_MOVED, (
        "moved now: take it off TEST_IMPORTS_NOT_YET_MOVED"
    )


# --- the checks themselves catch what they are for -----------------------------------------


def test_a_fake_defined_in_two_files_or_nested_is_found_once_per_place() -> None:
    sources = {
        "tests/a.py": "class FakeCloud:\n    pass\n",
        "tests/b.py": "def f():\n    class FakeCloud:\n        pass\n",
        "src/c.py": "class FakeApiServer:\n    pass\nclass Cloud:\n    pass\n",
    }
    assert defined_twice(sources) == {"FakeCloud": ["tests/a.py", "tests/b.py"]}


def test_every_form_of_importing_a_test_module_is_found() -> None:
    sources = {
        "tests/a.py": "from unit.nodepool import test_nodepool_drain as fakes\n",
        "tests/b.py": "from unit.nodepool.test_nodepool_drain import node\n",
        "tests/c.py": "import unit.nodepool.test_nodepool_drain\n",
        "tests/d.py": "from unit.nodepool.drain_world import node\nimport pytest\n",
        "tests/e.py": "from aiohttp.test_utils import TestServer\n",
        "tests/unit/nodepool/test_nodepool_drain.py": "",
    }
    assert importing_test_modules(sources) == {
        "tests/a.py": ["unit.nodepool.test_nodepool_drain"],
        "tests/b.py": ["unit.nodepool.test_nodepool_drain"],
        "tests/c.py": ["unit.nodepool.test_nodepool_drain"],
    }
