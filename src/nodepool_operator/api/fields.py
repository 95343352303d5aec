"""Typed readers and writers for the plain dicts that API objects travel as.

Objects arrive from kubernetes_asyncio as JSON-shaped dicts. Every ``from_dict`` in this
package reads them through these helpers, so that a wrong type anywhere surfaces as one
``ValueError`` whose message names the path of the field (``template.pods: expected
integer, got str``) instead of an ``AttributeError`` deep inside a controller.

Conventions shared by all readers:

* a missing key and a JSON ``null`` mean the same thing, "absent", because the API server
  also defaults a non-nullable ``null`` as if the field were missing;
* unknown keys are ignored: a newer CRD may add fields, and an older operator reading
  such an object must keep working;
* ``bool`` is never accepted where an integer or a number is expected, even though Python
  makes ``True`` an ``int``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "FieldError",
    "boolean",
    "choice",
    "compact",
    "integer",
    "nested",
    "nested_list",
    "number",
    "optional_integer",
    "optional_nested",
    "optional_number",
    "optional_quantity",
    "optional_string",
    "quantity",
    "quantity_map",
    "required_boolean",
    "required_integer",
    "required_number",
    "required_string",
    "string",
    "string_list",
    "string_map",
]

_T = TypeVar("_T")
_S = TypeVar("_S", bound=str)


class FieldError(ValueError):
    """A field of an API object is missing or has the wrong type or value."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def under(self, parent: str) -> FieldError:
        """The same error, with its path prefixed by the enclosing field."""
        separator = "" if self.path.startswith("[") else "."
        return FieldError(f"{parent}{separator}{self.path}", self.problem)


def _type_name(value: object) -> str:
    return type(value).__name__


def _present(d: Mapping[str, Any], key: str) -> Any:
    return d.get(key)


def _as_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(key, f"expected integer, got {_type_name(value)}")
    return value


def _as_str(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise FieldError(key, f"expected string, got {_type_name(value)}")
    return value


def _as_mapping(value: object, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldError(key, f"expected object, got {_type_name(value)}")
    return value


def _as_list(value: object, key: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise FieldError(key, f"expected array, got {_type_name(value)}")
    return value


def integer(d: Mapping[str, Any], key: str, *, default: int) -> int:
    value = _present(d, key)
    return default if value is None else _as_int(value, key)


def optional_integer(d: Mapping[str, Any], key: str) -> int | None:
    value = _present(d, key)
    return None if value is None else _as_int(value, key)


def required_integer(d: Mapping[str, Any], key: str) -> int:
    return _as_int(_required(d, key), key)


def _as_number(value: object, key: str) -> float:
    # bool is an int subclass; true/false as a number is a client bug, not a value.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(key, f"expected number, got {_type_name(value)}")
    return float(value)


def _as_bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(key, f"expected boolean, got {_type_name(value)}")
    return value


def _required(d: Mapping[str, Any], key: str) -> object:
    value = _present(d, key)
    if value is None:
        raise FieldError(key, "required field is missing")
    return value


def number(d: Mapping[str, Any], key: str, *, default: float) -> float:
    value = _present(d, key)
    return default if value is None else _as_number(value, key)


def optional_number(d: Mapping[str, Any], key: str) -> float | None:
    value = _present(d, key)
    return None if value is None else _as_number(value, key)


def required_number(d: Mapping[str, Any], key: str) -> float:
    return _as_number(_required(d, key), key)


def boolean(d: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = _present(d, key)
    return default if value is None else _as_bool(value, key)


def required_boolean(d: Mapping[str, Any], key: str) -> bool:
    return _as_bool(_required(d, key), key)


def string(d: Mapping[str, Any], key: str, *, default: str) -> str:
    value = _present(d, key)
    return default if value is None else _as_str(value, key)


def optional_string(d: Mapping[str, Any], key: str) -> str | None:
    value = _present(d, key)
    return None if value is None else _as_str(value, key)


def required_string(d: Mapping[str, Any], key: str) -> str:
    return _as_str(_required(d, key), key)


def _as_quantity_text(value: object, key: str) -> str:
    # Kubernetes takes a quantity as a string or a JSON integer (``cpu: 4``, as every Pod
    # spec writes it; the CRD says x-kubernetes-int-or-string). The operator keeps the
    # text: an integer's decimal digits are that quantity's text.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise FieldError(key, f"expected a quantity (string or integer), got {_type_name(value)}")
    return value


def quantity(d: Mapping[str, Any], key: str, *, default: str) -> str:
    """A quantity's text; an integer (``4``) reads as its digits (``"4"``)."""
    value = _present(d, key)
    return default if value is None else _as_quantity_text(value, key)


def optional_quantity(d: Mapping[str, Any], key: str) -> str | None:
    value = _present(d, key)
    return None if value is None else _as_quantity_text(value, key)


def quantity_map(d: Mapping[str, Any], key: str) -> dict[str, str]:
    """A map of name to quantity text, each value read as ``quantity`` reads one."""
    value = _present(d, key)
    if value is None:
        return {}
    return {
        _as_str(k, key): _as_quantity_text(v, f"{key}.{k}")
        for k, v in _as_mapping(value, key).items()
    }


def _as_choice(value: object, key: str, *, choices: tuple[_S, ...]) -> _S:
    for candidate in choices:
        if value == candidate:
            return candidate
    allowed = ", ".join(choices)
    raise FieldError(key, f"expected one of {allowed}, got {value!r}")


def choice(d: Mapping[str, Any], key: str, *, choices: tuple[_S, ...], default: _S | None) -> _S:
    """One of ``choices``; a missing value gives ``default``, or an error when it is None."""
    value = _present(d, key)
    if value is None:
        if default is None:
            raise FieldError(key, "required field is missing")
        return default
    return _as_choice(value, key, choices=choices)


def string_map(d: Mapping[str, Any], key: str) -> dict[str, str]:
    value = _present(d, key)
    if value is None:
        return {}
    result: dict[str, str] = {}
    for k, v in _as_mapping(value, key).items():
        result[_as_str(k, key)] = _as_str(v, f"{key}.{k}")
    return result


def integer_map(d: Mapping[str, Any], key: str) -> dict[str, int]:
    value = _present(d, key)
    if value is None:
        return {}
    return {_as_str(k, key): _as_int(v, f"{key}.{k}") for k, v in _as_mapping(value, key).items()}


def string_list(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = _present(d, key)
    if value is None:
        return ()
    return tuple(_as_str(item, f"{key}[{i}]") for i, item in enumerate(_as_list(value, key)))


def _parse_under(value: object, path: str, *, parse: Callable[[Mapping[str, Any]], _T]) -> _T:
    mapping = _as_mapping(value, path)
    try:
        return parse(mapping)
    except FieldError as e:
        raise e.under(path) from e


def nested(d: Mapping[str, Any], key: str, *, parse: Callable[[Mapping[str, Any]], _T]) -> _T:
    """A sub-object; a missing one is parsed from ``{}`` so that its own defaults apply."""
    value = _present(d, key)
    return _parse_under({} if value is None else value, key, parse=parse)


def optional_nested(
    d: Mapping[str, Any], key: str, *, parse: Callable[[Mapping[str, Any]], _T]
) -> _T | None:
    value = _present(d, key)
    return None if value is None else _parse_under(value, key, parse=parse)


def nested_list(
    d: Mapping[str, Any], key: str, *, parse: Callable[[Mapping[str, Any]], _T]
) -> tuple[_T, ...]:
    value = _present(d, key)
    if value is None:
        return ()
    items = _as_list(value, key)
    return tuple(_parse_under(item, f"{key}[{i}]", parse=parse) for i, item in enumerate(items))


def compact(d: dict[str, Any]) -> dict[str, Any]:
    """Drop None and empty collections, as Go's ``omitempty`` does for these types.

    Writing exactly what a Go client would write keeps a status write byte-for-byte
    comparable with what the server returns, so an unchanged status compares equal and
    costs no request; and with server-side apply, leaving an empty list out releases
    the field instead of claiming ownership of an empty value.
    """
    return {
        k: v
        for k, v in d.items()
        if v is not None and not (isinstance(v, list | tuple | dict) and len(v) == 0)
    }
