"""Child processes started from the command line, each with its log in a file.

Used wherever the project runs its own commands as separate processes (the demo, tests,
benchmarks), so that a crash, a SIGKILL or a restart is the real thing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["CLI", "ChildProcess"]

#: The project's own command line, run with the current interpreter.
CLI = [sys.executable, "-m", "nodepool_operator.cli"]


class ChildProcess:
    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.args = args
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as handle:
            self.popen = subprocess.Popen(
                self.args,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                # Its own process group: a Ctrl-C in the terminal reaches only the parent,
                # which then stops its children in order.
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release; what a crash or an OOM kill looks like."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
