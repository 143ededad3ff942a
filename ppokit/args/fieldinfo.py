"""Small helpers that read a field's type annotation (for CLI conversion, errors and ``explain``)."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union


def _args(annotation: Any) -> tuple:
    return typing.get_args(annotation)


def is_union(annotation: Any) -> bool:
    """True for ``X | Y`` and ``Optional[X]``."""
    return typing.get_origin(annotation) in (Union, types.UnionType)


def allows_none(annotation: Any) -> bool:
    """True when ``None`` is a valid value of the annotation."""
    return annotation is type(None) or (is_union(annotation) and type(None) in _args(annotation))


def non_none(annotation: Any) -> list:
    """The members of a union other than ``None`` (or ``[annotation]`` for a plain type)."""
    if is_union(annotation):
        return [a for a in _args(annotation) if a is not type(None)]
    return [annotation]


def is_list(annotation: Any) -> bool:
    """True when one member of the annotation is a ``list[...]`` or a ``tuple[...]`` (given the same way)."""
    return any(typing.get_origin(a) in (list, tuple) for a in non_none(annotation))


def type_name(annotation: Any) -> str:
    """A short human name: ``int``, ``float or null``, ``list of str``, ``one of 'a', 'b'``."""
    parts = [_one_name(a) for a in non_none(annotation)]
    if allows_none(annotation):
        parts.append("null")
    return " or ".join(parts)


def _one_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in _args(annotation))
    if origin is list:
        return "list of " + _one_name(_args(annotation)[0])
    if origin is tuple:
        return "[" + ", ".join(_one_name(a) for a in _args(annotation)) + "]"
    return getattr(annotation, "__name__", str(annotation))
