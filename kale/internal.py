"""Kale's own tasks (``kale_internal = True``): published by Kale's own code
with a proof in the signed context, refused on the public paths, dead-lettered
without it (docs/explanation/internals-top.md, "Kale's own tasks")."""
from __future__ import annotations

import hashlib
import hmac
from typing import Any, Mapping, Optional

from kale.codec.keys import signing_keys
from kale.config import Config

#: The context key that carries the proof.
CONTEXT_KEY = 'kale-internal'


def is_internal(task_class: Any) -> bool:
    """Whether ``task_class`` is one of Kale's own tasks."""
    return bool(getattr(task_class, 'kale_internal', False))


def _digest(key: bytes, task_path: str) -> str:
    derived = hmac.new(key, b'kale-internal', hashlib.sha256).digest()
    return hmac.new(derived, task_path.encode(), hashlib.sha256).hexdigest()[:32]


def context(config: Config, task_class: Any) -> dict[str, str]:
    """The context that proves a message of ``task_class`` came from Kale's own path."""
    keys = signing_keys(config=config)
    assert keys.current is not None
    return {CONTEXT_KEY: '%s:%s' % (keys.current_id,
                                    _digest(keys.current, task_class.task_path()))}


def proven(config: Config, task_path: str, carried: Optional[Mapping[str, str]]) -> bool:
    """Whether ``carried`` (a message's context) holds the proof for ``task_path``
    (under the current signing key or an old one)."""
    kid, _, digest = str((carried or {}).get(CONTEXT_KEY, '')).partition(':')
    key = signing_keys(config=config).accepted.get(kid)
    return key is not None and hmac.compare_digest(digest, _digest(key, task_path))


def refuse(task_class: Any) -> Optional[str]:
    """Why a public path cannot publish ``task_class`` (None: it can)."""
    if not is_internal(task_class):
        return None
    return ('%s is one of Kale\'s own tasks: only Kale publishes it'
            % task_class.task_path())


__all__ = ['CONTEXT_KEY', 'context', 'is_internal', 'proven', 'refuse']
