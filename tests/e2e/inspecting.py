"""Running the inspection CLI as a user does, and reading its JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from harness import CLI


def run_cli(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    found = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    # Tables are as wide as the terminal; without one rich assumes 80 columns and wraps.
    wide = {**os.environ, "COLUMNS": "160"}
    return subprocess.run(
        [*CLI, *args, *found], capture_output=True, text=True, timeout=180, check=False, env=wide
    )


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
