"""One checker for every declared shape: a value is checked against the
TypedDict that declares it (``shapes``, ``config_schema``), so a shape is
written once and mypy and the loaders read the same declaration.

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
- :class:`Default` fills a missing key (the value is checked like a given one);
- :class:`Expect` words what is expected, where the type's own words would not help;
- :class:`Outline` checks a field against a looser type than the declared
  one (a record's frozen config: checked in full when it is frozen).

A failure raises :class:`ShapeError` with the key path (``instances[0].status``)
and what was expected; each loader words it for its file.  Unknown keys are
kept as they are (a record written by a newer version still loads) unless the
check is ``closed`` (the config file, where an unknown key is a typo).

Each declared type is compiled once into a checker (a closure); a mapping
with nothing to convert is checked in place and returned as it is, so a
loaded record costs a walk, not a copy.

(Python 3.11's ``__required_keys__`` is wrong under ``from __future__ import
annotations``, so requiredness is read from the hints and ``__total__``; a
TypedDict extending another has one ``total`` for all its keys.)
"""

from __future__ import annotations

import copy
import functools
import math
import types
from dataclasses import dataclass
from typing import (Annotated, Any, Callable, Literal, NotRequired, Required, Union, get_args, get_origin,
                    get_type_hints, is_typeddict)


class ShapeError(ValueError):
    """``path`` (dotted, ``[i]`` for list items; empty for the whole value)
    does not hold what its declaration says: ``problem``."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem

    def within(self, key: object) -> ShapeError:
        """The same error seen from the mapping (``key``: str) or list (``key``: int) holding it."""
        prefix = f"[{key}]" if isinstance(key, int) else str(key)
        path = prefix if not self.path else prefix + self.path if self.path.startswith("[") else f"{prefix}.{self.path}"
        return ShapeError(path, self.problem)


class Invalid(ValueError):
    """Raised by a :class:`Convert` function: the value cannot be read (the message says why)."""


# The markers compare by identity (a Default may hold a list), so that the
# Annotated types holding them can key the cache of compiled checkers.
@dataclass(frozen=True, eq=False)
class Range:
    """A number from ``lo`` to ``hi`` (inclusive; ``None``: unbounded)."""
    lo: float | None = None
    hi: float | None = None

    def ok(self, value: object) -> bool:
        if not isinstance(value, (int, float)):
            return False  # (the declared type, checked first, is a number)
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def words(self) -> str:
        if self.hi is None:
            return f">= {self.lo}"
        return f"{self.lo}..{self.hi}" if self.lo is not None else f"<= {self.hi}"


@dataclass(frozen=True, eq=False)
class Check:
    """A predicate the value must pass once its type holds; ``expected``
    says what passes (and replaces the type's words in the message)."""
    test: Callable[[Any], bool]
    expected: str


@dataclass(frozen=True, eq=False)
class Convert:
    """Applied to the value before it is checked; may raise :class:`Invalid`."""
    fn: Callable[[Any], Any]


@dataclass(frozen=True, eq=False)
class Default:
    """The value of a missing key (checked, and converted, like a given one)."""
    value: object


@dataclass(frozen=True, eq=False)
class Outline:
    """Check the value against ``hint`` in place of the declared type: for a
    field whose full declaration is checked where the value is made (a run
    record's frozen config, by ``config.validate`` at spawn), so that reading
    it back checks only its outline, as it always has."""
    hint: object


def _outline(hint: object) -> object:
    """The type a field is checked against: its :class:`Outline`'s, else its own."""
    if get_origin(hint) is Annotated:
        return next((m.hint for m in _marks(hint) if isinstance(m, Outline)), hint)
    return hint


@dataclass(frozen=True, eq=False)
class Expect:
    """What the message says is expected, in place of the words made from the type."""
    words: str


_NAMES: dict[object, str] = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null",
          dict: "a mapping", list: "a list"}


@dataclass(frozen=True)
class Field:
    hint: object
    required: bool
    default: Default | None


def _marks(hint: object) -> tuple[object, ...]:
    """The markers of an ``Annotated`` hint (none for any other)."""
    return tuple(getattr(hint, "__metadata__", ()))


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


def defaults(shape: type) -> dict[str, object]:
    """What an empty input becomes: every key with a :class:`Default`, a
    section defaulted to ``{}`` filled with its own defaults.  Made from the
    declarations alone, running no check (so, cheap at import)."""
    out: dict[str, object] = {}
    for key, field in fields(shape).items():
        if field.default is None:
            continue
        base = get_args(field.hint)[0]
        if field.default.value == {} and is_typeddict(base):
            out[key] = defaults(base)
        else:
            out[key] = copy.deepcopy(field.default.value)
    return out


def expected(hint: object) -> str:
    """Words for what ``hint`` accepts: "an integer 1..64", "one of a, b"."""
    hint = _outline(hint)
    origin = get_origin(hint)
    if origin is Annotated:
        marks = _marks(hint)
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
    name = _NAMES.get(hint)
    return name if name is not None else str(getattr(hint, "__name__", hint))


def _fail(hint: object, value: object) -> ShapeError:
    return ShapeError("", f"must be {expected(hint)}, got {value!r}")


def check(hint: object, value: object, path: str = "", *, closed: bool = False) -> Any:
    """``value`` checked against ``hint`` (converted where a :class:`Convert`
    says, defaults filled); raises :class:`ShapeError` at the first mismatch,
    its path starting at ``path``.  (Any: it holds whatever ``hint`` declares,
    which the caller names, as ``intent: Intent = check(Intent, data)``.)"""
    try:
        return _compiled(hint)(value, closed)
    except ShapeError as exc:
        raise (exc.within(path) if path else exc) from None


# -- compiled checkers: one closure per declared type, made once ------------------------
Checker = Callable[[object, bool], object]


@functools.cache
def _compiled(hint: object) -> Checker:
    hint = _outline(hint)
    origin = get_origin(hint)
    if hint is Any:
        return lambda value, closed: value
    if origin is Annotated:
        return _annotated(hint)
    if isinstance(hint, type) and is_typeddict(hint):
        return _mapping(hint)
    if origin is Literal:
        return _literal(hint)
    if origin in (Union, types.UnionType):
        return _union(hint)
    if origin is list:
        return _list(hint)
    if origin is dict:
        return _dict(hint)
    return _scalar(hint)


@functools.cache
def _transforms(hint: object) -> bool:
    """Can checking ``hint`` change the value (a Convert, a Default)?  If not,
    containers are checked in place and returned as they are."""
    hint = _outline(hint)
    if get_origin(hint) is Annotated and any(isinstance(m, (Convert, Default)) for m in _marks(hint)):
        return True
    if is_typeddict(hint):
        return any(_transforms(f.hint) for f in fields(hint).values())
    return any(_transforms(a) for a in get_args(hint) if not isinstance(a, (str, int, bool)))


def _scalar(hint: object) -> Checker:
    if hint is None or hint is type(None):
        def ok(v: object) -> bool:
            return v is None
    elif hint is float:
        def ok(v: object) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    elif hint is bool:
        def ok(v: object) -> bool:
            return isinstance(v, bool)
    else:
        kind = hint if isinstance(hint, type) else None

        def ok(v: object) -> bool:
            if kind is None:
                raise TypeError(f"{hint!r} is not a type the checker knows")
            return isinstance(v, kind) and not isinstance(v, bool)

    def scalar(value: object, closed: bool) -> object:
        if not ok(value):
            raise _fail(hint, value)
        return value
    return scalar


def _literal(hint: object) -> Checker:
    allowed = get_args(hint)

    def literal(value: object, closed: bool) -> object:
        if not any(value == a and type(value) is type(a) for a in allowed):
            raise _fail(hint, value)
        return value
    return literal


def _list(hint: object) -> Checker:
    item = _compiled(get_args(hint)[0])
    keep = not _transforms(hint)

    def checked_list(value: object, closed: bool) -> object:
        if not isinstance(value, list):
            raise _fail(hint, value)
        out = []
        for i, v in enumerate(value):
            try:
                checked = item(v, closed)
            except ShapeError as exc:
                raise exc.within(i) from None
            if not keep:
                out.append(checked)
        return value if keep else out
    return checked_list


def _dict(hint: object) -> Checker:
    key_hint, item_hint = get_args(hint)
    key_check, item = _compiled(key_hint), _compiled(item_hint)
    keep = not _transforms(hint)

    def checked_dict(value: object, closed: bool) -> object:
        if not isinstance(value, dict):
            raise _fail(hint, value)
        out = {}
        for k, v in value.items():
            try:
                out[key_check(k, closed)] = item(v, closed)
            except ShapeError as exc:
                raise exc.within(k) from None
        return value if keep else out
    return checked_dict


def _annotated(hint: object) -> Checker:
    marks = _marks(hint)
    converts = [m.fn for m in marks if isinstance(m, Convert)]
    tests = [m.ok if isinstance(m, Range) else m.test for m in marks if isinstance(m, (Range, Check))]
    base = _compiled(get_args(hint)[0])

    def annotated(value: object, closed: bool) -> object:
        for fn in converts:
            try:
                value = fn(value)
            except Invalid as exc:
                raise ShapeError("", str(exc)) from None
        try:
            value = base(value, closed)
        except ShapeError as exc:
            if exc.path:
                raise  # a nested key's own message
            raise _fail(hint, value) from None
        if not all(test(value) for test in tests):
            raise _fail(hint, value)
        return value
    return annotated


def _union(hint: object) -> Checker:
    members = [_compiled(m) for m in get_args(hint)]
    nullable = type(None) in get_args(hint)

    def union(value: object, closed: bool) -> object:
        if value is None and nullable:
            return None
        nested: list[ShapeError] = []
        for member in members:
            try:
                return member(value, closed)
            except ShapeError as exc:
                if exc.path:
                    nested.append(exc)  # the value had this member's form; one of its keys was wrong
        if len(nested) == 1:
            raise nested[0]
        raise _fail(hint, value)
    return union


Wanted = list[tuple[str, Field, Checker]]  # the keys a mapping must have, or takes a default for


def _mapping(shape: type) -> Checker:
    declared = {key: (field, _compiled(field.hint)) for key, field in fields(shape).items()}
    checkers = {key: item for key, (_, item) in declared.items()}
    wanted = [(key, field, item) for key, (field, item) in declared.items() if field.required or field.default]
    keep = not _transforms(shape)

    def mapping(value: object, closed: bool) -> object:
        if not isinstance(value, dict):
            raise _fail(shape, value)
        if keep and not closed:
            return _in_place(value, checkers, wanted)
        return _converted(value, checkers, wanted, closed)
    return mapping


def _missing(key: str, field: Field) -> ShapeError:
    return ShapeError(key, f"is missing: it must be {expected(field.hint)}")


def _in_place(value: dict[object, object], checkers: dict[str, Checker], wanted: Wanted) -> object:
    """The common case (a record loaded): nothing to convert, unknown keys kept."""
    for key, v in value.items():
        item = checkers.get(key) if isinstance(key, str) else None
        if item is not None:
            try:
                item(v, False)
            except ShapeError as exc:
                raise exc.within(key) from None
    for key, field, _ in wanted:
        if key not in value:
            raise _missing(key, field)
    return value


def _converted(value: dict[object, object], checkers: dict[str, Checker], wanted: Wanted, closed: bool) -> object:
    """A new mapping: each value checked and converted, defaults filled."""
    unknown = [key for key in value if not isinstance(key, str) or key not in checkers]
    if closed and unknown:  # a typo is said first: it may be why other keys look wrong
        raise ShapeError(str(unknown[0]), f"unknown key (known: {', '.join(sorted(checkers))})")
    out: dict[object, object] = {key: value[key] for key in unknown}  # a newer version's keys: kept as they are
    for key, v in value.items():
        if key in out or not isinstance(key, str):  # (every key not a str is unknown, so in out)
            continue
        try:
            out[key] = checkers[key](v, closed)
        except ShapeError as exc:
            raise exc.within(key) from None
    for key, field, item in wanted:
        if key in value:
            continue
        if field.default is None:
            raise _missing(key, field)
        try:
            out[key] = item(copy.deepcopy(field.default.value), closed)
        except ShapeError as exc:
            raise exc.within(key) from None
    return out
