"""Every class under src/ has a name of its own: a reader who meets ``Decision`` or
``PoolView`` in a traceback, a review or a grep finds one class, not three."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def classes_by_name(root: Path) -> dict[str, list[str]]:
    """Class name -> where each class of that name is defined (``path:line``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_source_tree_is_read() -> None:
    found = classes_by_name(SRC)
    assert "AutoscalerConfig" in found
    assert len(found) > 100


def test_no_two_classes_under_src_share_a_name() -> None:
    shared = {name: where for name, where in classes_by_name(SRC).items() if len(where) > 1}
    assert shared == {}
