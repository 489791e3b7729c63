"""The speed tricks of Kale's domain types, in one place (what they are
worth, measured: docs/explanation/internals-top.md, "The speed tricks of the
domain types")."""
from __future__ import annotations

from typing import Any, Mapping, TypeVar

T = TypeVar('T')

#: For an Enum whose members compare by identity: hashing by identity as well
#: keeps dict lookups keyed by its members in C (Enum's own hash is Python).
identity_hash = object.__hash__


def build(cls: type[T], fields: Mapping[str, Any]) -> T:
    """An instance of the (frozen) dataclass ``cls`` holding ``fields``, made
    without its generated ``__init__`` (a setattr per field). Only for fields
    that are complete and already checked."""
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance
