"""No module or package under controllers/autoscaler is named like another with a suffix
(``observe``/``observer``, ``plan``/``planner``): two names a reader cannot tell apart
without opening both."""

from __future__ import annotations

from pathlib import Path

AUTOSCALER = (
    Path(__file__).resolve().parents[3] / "src" / "nodepool_operator" / "controllers" / "autoscaler"
)


def names_under(root: Path) -> set[str]:
    """The names of the modules and packages under ``root`` (``__init__`` left out)."""
    found = {p.stem for p in root.rglob("*.py") if p.name != "__init__.py"}
    found |= {p.name for p in root.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    return found


def suffixed_pairs(names: set[str]) -> list[tuple[str, str]]:
    return sorted((a, b) for a in names for b in names if a != b and b.startswith(a))


def test_the_rule_finds_a_name_that_is_another_with_a_suffix() -> None:
    assert suffixed_pairs({"observe", "observer", "plan", "planner", "gather"}) == [
        ("observe", "observer"),
        ("plan", "planner"),
    ]


def test_no_autoscaler_module_is_named_like_another_with_a_suffix() -> None:
    names = names_under(AUTOSCALER)
    assert {"planner", "snapshot", "decide", "act", "simulation"} <= names
    assert suffixed_pairs(names) == []
