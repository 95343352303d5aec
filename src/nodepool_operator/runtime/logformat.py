"""Log lines for people (``key=value``) and for log pipelines (one JSON object per line).

Every message the operator logs is already ``event=... name=value ...``; the reconcile's
controller, key and id are bound once per reconcile (``controller.ReconcileLogContext``).
The JSON form lifts those pairs into fields, so a pipeline can filter on ``event`` or
``key`` without parsing text, and keeps the whole message as ``msg``.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from typing import Any, Final

__all__ = ["JsonFormatter", "LogFormat", "TextFormatter", "formatter"]


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


#: ``name=value`` where value is a bare word or a quoted repr (``%r`` of a string).
_PAIR: Final = re.compile(r"""(\w+)=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""")
_CONTEXT_FIELDS: Final = ("controller", "key", "reconcile_id")


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(
            "time=%(asctime)s level=%(levelname)s logger=%(name)s %(context)s%(message)s"
        )

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "context"):  # a handler without ReconcileLogContext
            record.context = ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
        }
        for name in _CONTEXT_FIELDS:
            value = getattr(record, name, "-")
            if value != "-":
                entry[name] = value
        for name, value in _PAIR.findall(message):
            entry.setdefault(name, _unquoted(value))
        entry["msg"] = message
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def formatter(kind: LogFormat) -> logging.Formatter:
    return JsonFormatter() if kind is LogFormat.JSON else TextFormatter()
