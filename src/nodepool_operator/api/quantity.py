"""Kubernetes resource quantities ("4", "500m", "16Gi", "1e3") as exact integers.

The grammar is the one ``resource.Quantity`` documents::

    <quantity> ::= <sign>? <number> <suffix>?
    <number>   ::= <digits> | <digits>.<digits>? | .<digits>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei          (powers of 1024)
                 | n | u | m | k | M | G | T | P | E    (powers of 1000; "" is 1)
                 | e<sign>?<digits> | E<sign>?<digits>  (powers of ten)

Values are computed as exact fractions, never floats, and converted to integer units the
way Go's ``Quantity.MilliValue()`` and ``Value()`` do: rounded *up*. Rounding up is also
the safe side for capacity planning: a pod asking for 0.1 millicore still needs room.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

__all__ = [
    "MAX_EXPONENT",
    "NON_NEGATIVE_QUANTITY_PATTERN",
    "parse_cpu_millicores",
    "parse_memory_bytes",
    "parse_quantity",
]

# Real quantities span nano (1e-9) to exa (1e18). The bound only stops a text such as
# "1e999999999" from making a number with a billion digits.
MAX_EXPONENT: Final = 100

# Longer texts are not quantities anyone writes; the bound keeps parsing cheap.
_MAX_LENGTH: Final = 256

# The same grammar for the CRD's OpenAPI ``pattern`` (RE2 on the server), without the
# minus sign: a node's capacity is never negative. [0-9] rather than \d because Python's
# \d also matches non-ASCII digits, which RE2 and the Go parser refuse.
NON_NEGATIVE_QUANTITY_PATTERN: Final = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)

_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _invalid(text: str, why: str) -> ValueError:
    return ValueError(f"invalid quantity {text!r}: {why}")


def _multiplier(text: str, suffix: str) -> Fraction:
    if suffix == "":
        return Fraction(1)
    if suffix in _BINARY:
        return Fraction(1024 ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return Fraction(10) ** _DECIMAL[suffix]
    # Only "e<int>" / "E<int>" is left: a lone "E" is exa and was caught above.
    exponent = int(suffix[1:])
    if abs(exponent) > MAX_EXPONENT:
        raise _invalid(text, f"exponent {exponent} is out of range (at most {MAX_EXPONENT})")
    return Fraction(10) ** exponent


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity, e.g. ``Fraction(1, 2)`` for ``"500m"``.

    Raises ``ValueError`` naming the text and what is wrong with it.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid quantity {text!r}: expected a string")
    if len(text) > _MAX_LENGTH:
        raise _invalid(text[:32] + "...", f"longer than {_MAX_LENGTH} characters")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise _invalid(
            text,
            "expected a number with an optional suffix "
            "(m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)",
        )
    whole, fraction = match["whole"], match["fraction"] or ""
    if not whole and not fraction:
        raise _invalid(text, "no digits")
    mantissa = Fraction(int(whole or "0")) + Fraction(int(fraction or "0"), 10 ** len(fraction))
    value = mantissa * _multiplier(text, match["suffix"] or "")
    return -value if match["sign"] == "-" else value


def _non_negative(text: str, what: str) -> Fraction:
    value = parse_quantity(text)
    if value < 0:
        raise _invalid(text, f"{what} must not be negative")
    return value


def parse_cpu_millicores(text: str) -> int:
    """CPU in millicores, rounded up: ``"4"`` → 4000, ``"500m"`` → 500, ``"1.5"`` → 1500."""
    return math.ceil(_non_negative(text, "cpu") * 1000)


def parse_memory_bytes(text: str) -> int:
    """Memory in bytes, rounded up: ``"16Gi"`` → 17179869184, ``"1G"`` → 10**9."""
    return math.ceil(_non_negative(text, "memory"))
