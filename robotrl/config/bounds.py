"""Bounds and choices declared beside each config field, checked by one walk over every group.

A field says what it accepts where it is defined::

    gamma: float = field(default=0.99, metadata=bounds(gt=0, le=1))

and :func:`bound_problems` checks every declared field of a config, naming it by its dotted
path (``learner.gamma: must be in (0, 1], got 2.0``). Rules that relate two fields stay in
:func:`robotrl.config.schema.problems`. ``None`` always passes: whether a field may be null is
its type's business, which OmegaConf checks.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, fields, is_dataclass
from typing import Any, NamedTuple, Union, get_args, get_origin, get_type_hints

BOUNDS = "bounds"
"""The key of a :class:`Bounds` in a dataclass field's metadata."""


@dataclass(frozen=True)
class Bounds:
    """What one field accepts; every constraint given must hold. On a list the value constraints
    (range, choices) hold for each item; ``each`` checks list items or a dict's values."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str = ""
    """A regular expression the whole string must match."""
    shape: str = ""
    """What ``pattern`` asks for, in words: the message says "must be {shape}"."""
    nonblank: bool = False
    """A string must hold more than whitespace."""
    nonempty: bool = False
    """A list must hold something."""
    distinct: bool = False
    """A list must not hold a value twice."""
    low_high: bool = False
    """A list must be a range: two numbers, ``[low, high]`` with low <= high."""
    each: Callable[[Any], object] | None = None
    """Called with every list item or dict value; its ValueError's message is the problem."""
    note: str = ""
    """What an edge value means, shown in parentheses after the range (e.g. "0: off")."""

    def numeric(self) -> bool:
        """Whether a range is declared (``ge``, ``gt``, ``le`` or ``lt``)."""
        return any(b is not None for b in (self.ge, self.gt, self.le, self.lt))

    def admits(self, x: float) -> bool:
        """Whether the number ``x`` lies in the declared range."""
        return (
            (self.ge is None or x >= self.ge)
            and (self.gt is None or x > self.gt)
            and (self.le is None or x <= self.le)
            and (self.lt is None or x < self.lt)
        )

    def range_text(self) -> str:
        """The range in words: ``> 0``, ``>= 0``, ``in (0, 1]``, ..."""
        low = (">=", self.ge) if self.ge is not None else (">", self.gt) if self.gt is not None else None
        high = ("<=", self.le) if self.le is not None else ("<", self.lt) if self.lt is not None else None
        if low and high:
            opening = "[" if low[0] == ">=" else "("
            closing = "]" if high[0] == "<=" else ")"
            return f"in {opening}{low[1]}, {high[1]}{closing}"
        op, edge = low or high or ("", "")
        return f"{op} {edge}"


def bounds(**constraints: Any) -> Mapping[str, Bounds]:
    """Field metadata declaring :class:`Bounds`: ``field(default=..., metadata=bounds(ge=0))``."""
    return {BOUNDS: Bounds(**constraints)}


DEVICE = bounds(pattern=r"auto|cpu|cuda(:.*)?", shape="'auto', 'cpu', 'cuda' or 'cuda:N'")
"""A torch device as the config names it; 'auto' is CUDA when present."""


class Declared(NamedTuple):
    """A field with declared bounds, found by :func:`declared_fields`."""

    name: str
    """Dotted path from the root, e.g. ``learner.rapi.beta``."""
    owner: Any
    """The dataclass instance that holds the field."""
    field: Field[Any]
    bounds: Bounds


def declared_fields(cfg: Any, prefix: str = "") -> Iterator[Declared]:
    """Every field with declared bounds in ``cfg`` and its nested groups, depth first."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            yield from declared_fields(value, f"{prefix}{f.name}.")
        elif BOUNDS in f.metadata:
            yield Declared(f"{prefix}{f.name}", cfg, f, f.metadata[BOUNDS])


def bound_problems(cfg: Any) -> list[tuple[str, str]]:
    """Every (dotted field, message) whose value is outside its declared bounds."""
    out: list[tuple[str, str]] = []
    for d in declared_fields(cfg):
        value = getattr(d.owner, d.field.name)
        if value is not None:
            out += _value_problems(d.name, value, d.bounds, _nullable(type(d.owner), d.field.name))
    return out


_HINTS: dict[type[Any], dict[str, Any]] = {}
"""Each dataclass's resolved field types (its annotations are strings until resolved)."""


def _nullable(cls: type[Any], name: str) -> bool:
    """Whether field ``name`` of dataclass ``cls`` is typed ``... | None``."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    hint = hints[name]
    return get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)


def _value_problems(name: str, value: Any, b: Bounds, may_be_null: bool) -> list[tuple[str, str]]:
    """The problems of one non-null ``value`` of field ``name`` against ``b``."""
    if isinstance(value, list):
        return [(name, msg) for msg in _list_problems(value, b)]
    if isinstance(value, dict):
        return _dict_problems(name, value, b)
    msg = _scalar_problem(value, b, may_be_null)
    return [(name, msg)] if msg else []


def _scalar_problem(value: Any, b: Bounds, may_be_null: bool) -> str | None:
    or_null = " or null" if may_be_null else ""
    note = f" ({b.note})" if b.note else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if b.numeric() and not b.admits(value):
            return f"must be {b.range_text()}{note}{or_null}, got {value}"
        return None
    if not isinstance(value, str):
        return None
    if b.nonblank and not value.strip():
        return f"must be {'null or ' if may_be_null else ''}not blank, got {value!r}"
    if b.choices and value not in b.choices:
        return f"must be one of {list(b.choices)}, got {value!r}"
    if b.pattern and not re.fullmatch(b.pattern, value, re.DOTALL):
        return f"must be {b.shape or b.pattern}{or_null}, got {value!r}"
    return None


def _list_problems(value: list[Any], b: Bounds) -> list[str]:
    out: list[str] = []
    if b.nonempty and not value:
        out.append("must not be empty")
    if b.choices and any(v not in b.choices for v in value):
        out.append(f"must list values of {list(b.choices)}, got {value}")
    if b.numeric() and not all(b.admits(v) for v in value):
        note = f" ({b.note})" if b.note else ""
        out.append(f"must hold values {b.range_text()}{note}, got {value}")
    if b.distinct and len(set(value)) != len(value):
        out.append(f"lists a value twice: {value}")
    if b.low_high and (len(value) != 2 or value[0] > value[1]):
        within = f", each {b.range_text()}" if b.numeric() else ""
        out.append(f"must be a range [low, high], low <= high{within}, got {value}")
    for item in value:
        out += _each_problem(item, b)
    return out


def _dict_problems(name: str, value: dict[str, Any], b: Bounds) -> list[tuple[str, str]]:
    return [(f"{name}.{key}", msg) for key, item in value.items() for msg in _each_problem(item, b)]


def _each_problem(item: Any, b: Bounds) -> list[str]:
    if b.each is None:
        return []
    try:
        b.each(item)
    except ValueError as exc:
        return [str(exc)]
    return []
