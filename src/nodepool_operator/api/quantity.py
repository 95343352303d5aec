"""Kubernetes resource quantities ("4", "500m", "16Gi", "1e3") as exact integers.

The grammar is the one ``resource.Quantity`` documents::

    <quantity> ::= <sign>? <number> <suffix>?
    <number>   ::= <digits> | <digits>.<digits>? | .<digits>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei          (powers of 1024)
                 | n | u | m | k | M | G | T | P | E    (powers of 1000; "" is 1)
                 | e<sign>?<d><d>? | E<sign>?<d><d>?    (powers of ten, |exponent| <= 99)

and at most ``MAX_LENGTH`` characters. ``QUANTITY_PATTERN`` is that grammar as a regular
expression and the parser's own; ``NON_NEGATIVE_QUANTITY_PATTERN``, without the minus
sign, is what the CRDs' format rule matches a capacity written as a string against (CEL
``matches``, RE2), so the API server accepts exactly what ``parse_non_negative_quantity``
parses. (A capacity written as an integer, ``cpu: 4``, is its digits.)

Values are computed as exact fractions, never floats, and converted to integer units the
way Go's ``Quantity.MilliValue()`` and ``Value()`` do: rounded *up*. Rounding up is also
the safe side for capacity planning: a pod asking for 0.1 millicore still needs room.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Final

__all__ = [
    "MAX_EXPONENT",
    "MAX_LENGTH",
    "NON_NEGATIVE_QUANTITY_PATTERN",
    "QUANTITY_PATTERN",
    "parse_cpu_millicores",
    "parse_memory_bytes",
    "parse_non_negative_quantity",
    "parse_quantity",
]

# Real quantities span nano (1e-9) to exa (1e18). The bound (two exponent digits, in the
# grammar below) only stops a text such as "1e999999999" from making a number with a
# billion digits.
MAX_EXPONENT: Final = 99

# Longer texts are not quantities anyone writes (the server writes them back in canonical
# form, at most about twenty characters); the CRDs refuse them with ``maxLength``.
MAX_LENGTH: Final = 64

# The grammar, written once, in the syntax RE2 (the API server's CEL ``matches``) and
# Python's ``re`` read alike: the CRD's rule and the parser are the same text, so the
# server accepts exactly what the operator can parse. [0-9] rather than \d because
# Python's \d also matches non-ASCII digits, which RE2 and the Go parser refuse; "[.]"
# rather than an escaped dot, so the text needs no escaping inside a CEL string.
# Three groups, which the parser reads by number: the sign, the number, the suffix.
_NUMBER: Final = r"([0-9]+[.]?[0-9]*|[.][0-9]+)"
_SUFFIX: Final = r"([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?"

QUANTITY_PATTERN: Final = rf"^([+-]?){_NUMBER}{_SUFFIX}$"

# Without the minus sign: a node's capacity is never negative, and is not written "-0".
NON_NEGATIVE_QUANTITY_PATTERN: Final = rf"^([+]?){_NUMBER}{_SUFFIX}$"

_QUANTITY_RE: Final = re.compile(QUANTITY_PATTERN)
_NON_NEGATIVE_RE: Final = re.compile(NON_NEGATIVE_QUANTITY_PATTERN)

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _invalid(text: str, why: str) -> ValueError:
    return ValueError(f"invalid quantity {text!r}: {why}")


def _multiplier(suffix: str) -> Fraction:
    if suffix == "":
        return Fraction(1)
    if suffix in _BINARY:
        return Fraction(1024 ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return Fraction(10) ** _DECIMAL[suffix]
    # Only "e<int>" / "E<int>" is left: a lone "E" is exa and was caught above.
    return Fraction(10) ** int(suffix[1:])


def _parse(text: str, grammar: re.Pattern[str], expected: str) -> Fraction:
    if not isinstance(text, str):
        raise ValueError(f"invalid quantity {text!r}: expected a string")
    return _parse_text(text, grammar, expected)


# A cluster holds few distinct quantity texts and the Autoscaler reads them all again at
# every plan (each Node's allocatable, each pool's template): exact arithmetic on each is
# what a plan of a large cluster would spend its time on. The values are immutable; a
# text that does not parse raises every time (exceptions are not kept).
@functools.lru_cache(maxsize=4096)
def _parse_text(text: str, grammar: re.Pattern[str], expected: str) -> Fraction:
    if len(text) > MAX_LENGTH:
        raise _invalid(text[:32] + "...", f"longer than {MAX_LENGTH} characters")
    # fullmatch, so that "$" cannot match before a final newline as re.search lets it.
    match = grammar.fullmatch(text)
    if match is None:
        raise _invalid(text, expected)
    sign, number, suffix = match.groups(default="")
    whole, _, fraction = number.partition(".")
    mantissa = Fraction(int(whole or "0")) + Fraction(int(fraction or "0"), 10 ** len(fraction))
    value = mantissa * _multiplier(suffix)
    return -value if sign == "-" else value


_SUFFIXES: Final = (
    "an optional suffix (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei "
    f"or an exponent of at most two digits such as e3), at most {MAX_LENGTH} characters"
)


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity, e.g. ``Fraction(1, 2)`` for ``"500m"``.

    Accepts exactly the texts ``QUANTITY_PATTERN`` matches, at most ``MAX_LENGTH`` long.
    Raises ``ValueError`` naming the text and what is wrong with it.
    """
    return _parse(text, _QUANTITY_RE, f"expected a number with {_SUFFIXES}")


def parse_non_negative_quantity(text: str) -> Fraction:
    """The exact value of a quantity written without a minus sign.

    Accepts exactly what the CRDs accept for a capacity (``NON_NEGATIVE_QUANTITY_PATTERN``
    and ``maxLength: MAX_LENGTH``).
    """
    return _parse(
        text, _NON_NEGATIVE_RE, f"expected a number without a minus sign, with {_SUFFIXES}"
    )


def parse_cpu_millicores(text: str) -> int:
    """CPU in millicores, rounded up: ``"4"`` → 4000, ``"500m"`` → 500, ``"1.5"`` → 1500."""
    return _whole_units(text, 1000)


def parse_memory_bytes(text: str) -> int:
    """Memory in bytes, rounded up: ``"16Gi"`` → 17179869184, ``"1G"`` → 10**9."""
    return _whole_units(text, 1)


def _whole_units(text: str, per_unit: int) -> int:
    if not isinstance(text, str):
        parse_non_negative_quantity(text)  # raises the ValueError that says why
    return _whole_units_of_text(text, per_unit)


@functools.lru_cache(maxsize=4096)
def _whole_units_of_text(text: str, per_unit: int) -> int:
    return math.ceil(parse_non_negative_quantity(text) * per_unit)
