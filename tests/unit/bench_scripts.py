"""The bench scripts (``bench/*.py``), loaded as modules for their unit tests: they are
scripts, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    """``bench/<name>.py`` as module ``name``, loaded once: it is kept in ``sys.modules``,
    where its dataclasses look their module up by name (and ``peers`` finds
    ``cost_bound``, which is loaded before it)."""
    if name in sys.modules:
        return sys.modules[name]
    if name == "peers":
        load("cost_bound")
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
