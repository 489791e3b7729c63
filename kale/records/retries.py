"""Retrying a task from its record, once: a second retry of the same task
answers with the task the first one published (a claim on ``retried_as``;
docs/explanation/internals-records.md)."""
from __future__ import annotations

import time
from typing import Callable

from kale.exceptions import RecordConflictError
from kale.ids import random_id
from kale.store.records import RecordsStore

#: Marks a claim whose publish is under way (a task id never starts so).
CLAIM_PREFIX = 'retrying:'
#: Seconds a second caller waits for the first one's publish.
CLAIM_WAIT_SEC = 5.0


def retry_once(store: RecordsStore, task_id: str, publish: Callable[[], str]) -> tuple[str, bool]:
    """The id of the task that retries ``task_id`` and whether this call
    published it (False: an earlier retry did)."""
    claim = CLAIM_PREFIX + random_id()
    if not store.claim_retry(task_id, claim):
        return _earlier(store, task_id), False
    try:
        new_id = publish()
    except BaseException:
        store.replace_retry(task_id, claim, None)
        raise
    store.replace_retry(task_id, claim, new_id)
    return new_id, True


def _earlier(store: RecordsStore, task_id: str) -> str:
    deadline = time.monotonic() + CLAIM_WAIT_SEC
    while True:
        found = store.retried_as(task_id)
        if found and not found.startswith(CLAIM_PREFIX):
            return str(found)
        if found is None:          # the other publish failed and gave its claim back
            raise RecordConflictError('task %s: another retry of it failed just now; try again'
                                      % task_id)
        if time.monotonic() >= deadline:
            raise RecordConflictError('task %s is being retried by another request' % task_id)
        time.sleep(0.05)
