"""The one reader of the timestamps the API server writes (RFC 3339, ``metav1.Time``).

It sits in the bottom layer because the API types (``api``) and the runtime, which may
not import each other, both read timestamps: one parser, so that a timer counted by one
controller and the prediction another makes from the same fact agree.
"""

from __future__ import annotations

import datetime

__all__ = ["parse_rfc3339"]


def parse_rfc3339(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 text (``2026-12-02T11:40:44Z``, with or
    without fractions or an offset); None when ``text`` is absent or not one. A text
    without an offset is read as UTC, the only zone the API server writes."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
