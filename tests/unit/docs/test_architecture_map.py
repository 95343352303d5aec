"""docs/architecture.md's module map names every module under src/nodepool_operator, and
nothing that is not there: a module added, moved or renamed without its line on the map
fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "nodepool_operator"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAP_HEADING = "## Module map"
MODULE = re.compile(r"`([a-z0-9_/]+\.py)`")


def modules_in_tree() -> set[str]:
    """Every module's path under the package, package ``__init__`` files left out."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }


def modules_on_the_map(text: str) -> set[str]:
    """The module paths the map's section names, as written (relative to the package)."""
    start = text.index(MAP_HEADING)
    end = text.find("\n## ", start + len(MAP_HEADING))
    section = text[start : end if end != -1 else len(text)]
    return set(MODULE.findall(section))


def test_the_map_reader_finds_paths_only_in_the_map_section() -> None:
    text = "# T\n`a.py`\n## Module map\n| `b/c.py` | x |\n## Next\n`d.py`\n"
    assert modules_on_the_map(text) == {"b/c.py"}


def test_every_module_under_src_is_on_the_architecture_map() -> None:
    missing = modules_in_tree() - modules_on_the_map(ARCHITECTURE.read_text())
    assert sorted(missing) == []


def test_the_architecture_map_names_no_module_that_is_gone() -> None:
    gone = modules_on_the_map(ARCHITECTURE.read_text()) - modules_in_tree()
    assert sorted(gone) == []
