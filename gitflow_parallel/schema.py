"""One checker for every declared shape: a value is checked against the
TypedDict that declares it (``shapes``, ``config``), so a shape is written
once and mypy and the loaders read the same declaration.

:func:`check` walks a TypedDict's annotations (``typing.get_type_hints``)
and understands what the declarations use: ``int``, ``float``, ``str``,
``bool``, ``None``, ``Any``, ``Literal``, ``list[...]``, ``dict[str, ...]``,
unions, nested TypedDicts, ``Required``/``NotRequired`` and ``total=False``.
A field says more through ``Annotated`` markers:

- :class:`Range` bounds a number (``Annotated[int, Range(1, 64)]``);
- :class:`Check` is a named predicate (``Check(valid_task, "a task name")``);
- :class:`Convert` turns what a reader gave into the declared form before
  the check (``on`` read by YAML as ``True`` into ``"on"``; a command
  string into its argv);
- :class:`Default` fills a missing key (the value is checked like a given one).

A failure raises :class:`ShapeError` with the key path (``instances[0].status``)
and what was expected; each loader words it for its file.  Unknown keys are
kept as they are (a record written by a newer version still loads) unless the
check is ``closed`` (the config file, where an unknown key is a typo).

(Python 3.11's ``__required_keys__`` is wrong under ``from __future__ import
annotations``, so requiredness is read from the hints and ``__total__``.)
"""

from __future__ import annotations

import copy
import functools
import math
import types
from dataclasses import dataclass
from typing import (Annotated, Any, Callable, cast, Literal, NotRequired, Required, Union, get_args, get_origin,
                    get_type_hints, is_typeddict)


class ShapeError(ValueError):
    """``path`` (dotted, ``[i]`` for list items; empty for the whole value)
    does not hold what its declaration says: ``problem``."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


class Invalid(ValueError):
    """Raised by a :class:`Convert` function: the value cannot be read (the message says why)."""


@dataclass(frozen=True)
class Range:
    """A number from ``lo`` to ``hi`` (inclusive; ``None``: unbounded)."""
    lo: float | None = None
    hi: float | None = None

    def ok(self, value: Any) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def words(self) -> str:
        if self.hi is None:
            return f">= {self.lo}"
        return f"{self.lo}..{self.hi}" if self.lo is not None else f"<= {self.hi}"


@dataclass(frozen=True)
class Check:
    """A predicate the value must pass once its type holds; ``expected``
    says what passes (and replaces the type's words in the message)."""
    test: Callable[[Any], bool]
    expected: str


@dataclass(frozen=True)
class Convert:
    """Applied to the value before it is checked; may raise :class:`Invalid`."""
    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class Default:
    """The value of a missing key (checked, and converted, like a given one)."""
    value: Any


@dataclass(frozen=True)
class Expect:
    """What the message says is expected, in place of the words made from the type."""
    words: str


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null",
          dict: "a mapping", list: "a list"}


@dataclass(frozen=True)
class Field:
    hint: Any
    required: bool
    default: Default | None


@functools.cache
def fields(shape: type) -> dict[str, Field]:
    """The declared keys of a TypedDict, with whether each is required and its default."""
    out = {}
    for key, hint in get_type_hints(shape, include_extras=True).items():
        required = bool(getattr(shape, "__total__", True))
        if get_origin(hint) in (Required, NotRequired):
            required = get_origin(hint) is Required
            hint = get_args(hint)[0]
        default = None
        if get_origin(hint) is Annotated:
            default = next((m for m in hint.__metadata__ if isinstance(m, Default)), None)
        out[key] = Field(hint, required and default is None, default)
    return out


def defaults(shape: type) -> dict[str, Any]:
    """The value every key with a :class:`Default` gets when the input is empty."""
    return cast(dict[str, Any], check(shape, {}, closed=True))


def expected(hint: Any) -> str:
    """Words for what ``hint`` accepts: "an integer 1..64", "one of a, b"."""
    origin = get_origin(hint)
    if origin is Annotated:
        marks = hint.__metadata__
        for mark in marks:
            if isinstance(mark, (Check, Expect)):
                return mark.expected if isinstance(mark, Check) else mark.words
        base = expected(get_args(hint)[0])
        return " ".join([base, *(m.words() for m in marks if isinstance(m, Range))])
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(expected(a) for a in get_args(hint))
    if is_typeddict(hint) or origin is dict:
        return "a mapping"
    if origin is list:
        return "a list"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def _fail(path: str, hint: Any, value: Any) -> ShapeError:
    return ShapeError(path, f"must be {expected(hint)}, got {value!r}")


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def check(hint: Any, value: Any, path: str = "", *, closed: bool = False) -> Any:
    """``value`` checked against ``hint`` (converted where a :class:`Convert`
    says, defaults filled); raises :class:`ShapeError` at the first mismatch."""
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin is Annotated:
        return _annotated(hint, value, path, closed)
    if is_typeddict(hint):
        return _mapping(hint, value, path, closed)
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in get_args(hint)):
            raise _fail(path, hint, value)
        return value
    if origin in (Union, types.UnionType):
        return _union(hint, value, path, closed)
    if origin is list:
        if not isinstance(value, list):
            raise _fail(path, hint, value)
        (item,) = get_args(hint)
        return [check(item, v, f"{path}[{i}]", closed=closed) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(path, hint, value)
        key_hint, item = get_args(hint)
        return {check(key_hint, k, path, closed=closed): check(item, v, _join(path, k), closed=closed)
                for k, v in value.items()}
    return _scalar(hint, value, path)


def _scalar(hint: Any, value: Any, path: str) -> Any:
    if hint is None or hint is type(None):
        ok = value is None
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
    if not ok:
        raise _fail(path, hint, value)
    return value


def _annotated(hint: Any, value: Any, path: str, closed: bool) -> Any:
    marks = hint.__metadata__
    for mark in marks:
        if isinstance(mark, Convert):
            try:
                value = mark.fn(value)
            except Invalid as exc:
                raise ShapeError(path, str(exc)) from None
    base = get_args(hint)[0]
    try:
        value = check(base, value, path, closed=closed)
    except ShapeError as exc:
        if exc.path != path:
            raise  # a nested key's own message
        raise _fail(path, hint, value) from None
    for mark in marks:
        if isinstance(mark, Range) and not mark.ok(value) or isinstance(mark, Check) and not mark.test(value):
            raise _fail(path, hint, value)
    return value


def _union(hint: Any, value: Any, path: str, closed: bool) -> Any:
    members = get_args(hint)
    if value is None and type(None) in members:
        return None
    nested: list[ShapeError] = []
    for member in members:
        try:
            return check(member, value, path, closed=closed)
        except ShapeError as exc:
            if exc.path != path:
                nested.append(exc)  # the value had this member's form; its own key was wrong
    if len(nested) == 1:
        raise nested[0]
    raise _fail(path, hint, value)


def _mapping(shape: type, value: Any, path: str, closed: bool) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, shape, value)
    declared = fields(shape)
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = declared.get(key) if isinstance(key, str) else None
        if field is None:
            if closed:
                raise ShapeError(_join(path, key), f"unknown key (known: {', '.join(sorted(declared))})")
            out[key] = item  # a newer version's key: kept as it is
            continue
        out[key] = check(field.hint, item, _join(path, key), closed=closed)
    for key, field in declared.items():
        if key in value:
            continue
        if field.default is not None:
            out[key] = check(field.hint, copy.deepcopy(field.default.value), _join(path, key), closed=closed)
        elif field.required:
            raise ShapeError(_join(path, key), f"is missing: it must be {expected(field.hint)}")
    return out
