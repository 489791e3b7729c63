"""Unique tasks (``unique_for_sec``): the key of a run, and the claims a
publish makes. The task records' store decides who holds a key (its unique
facet, :mod:`kale.store.unique`), through the publish hook ``claim_unique``."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Optional, Sequence

from kale.config import Config
from kale.exceptions import PublishError
from kale.message import Message


def unique_key(task_name: str, args: tuple, kwargs: Mapping[str, Any]) -> str:
    """The key of a unique task's run: a SHA-256 of its path and arguments
    (as sorted JSON; what JSON cannot hold, by its repr)."""
    encoded = json.dumps([task_name, list(args), kwargs], sort_keys=True, default=repr,
                         separators=(',', ':'))
    return hashlib.sha256(encoded.encode('utf-8', 'surrogatepass')).hexdigest()


def unique_claims(config: Config, task_name: str, unique_sec: Optional[float],
                  pairs: Sequence[tuple[tuple, Mapping[str, Any]]],
                  messages: Sequence[Message]) -> Optional[list[tuple[str, str]]]:
    """(key, task id) of each run of a unique task; None for another task.
    PublishError without task records, or for a bad ``unique_for_sec``."""
    if unique_sec is None:
        return None
    if isinstance(unique_sec, bool) or not isinstance(unique_sec, (int, float)) or \
            not 0 < unique_sec <= 365 * 24 * 3600:
        raise PublishError('task %s: unique_for_sec must be seconds from 0 to a year, got %r'
                           % (task_name, unique_sec))
    if not config.RECORDS_URL:
        raise PublishError('task %s: unique_for_sec is decided in the task records: set '
                           'RECORDS_URL' % task_name)
    return [(unique_key(task_name, args, kwargs), m.task_id)
            for (args, kwargs), m in zip(pairs, messages, strict=True)]
