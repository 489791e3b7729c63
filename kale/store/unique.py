"""The unique keys' facet of a store: who holds each unique task's key, a
free key claimed atomically (docs/explanation/internals-store.md, "Unique keys")."""
from __future__ import annotations

from typing import Callable, Protocol, Sequence


class UniqueStore(Protocol):
    """Unique tasks' keys (``store.unique``)."""

    def claim(self, claims: Sequence[tuple[str, str]], now: float, for_sec: float) -> list[str]:
        """For each (key, task id): the task id that holds the key, this one
        if it was free (a key twice in ``claims``: the first holds it)."""

    def release(self, claims: Sequence[tuple[str, str]]) -> None:
        """Free the keys claimed for these tasks (their send failed)."""


def claim_each(claims: Sequence[tuple[str, str]], claim: Callable[[str, str], str]) -> list[str]:
    """:meth:`UniqueStore.claim` with ``claim(key, task_id)`` for each key's
    first claim (a key twice in one batch: the first holds it)."""
    taken: dict[str, str] = {}
    return [taken[key] if key in taken else taken.setdefault(key, claim(key, task_id))
            for key, task_id in claims]
