"""Publishing when Django's transaction commits.

``publish_on_commit(MyTask, app_data, *args, **kwargs)`` checks the call at
once, as ``MyTask.publish`` does (queue, arguments, delay, labels: the same
exceptions), fixes the task id, and returns it; the message is encoded and
sent by ``transaction.on_commit`` when the outermost ``atomic()`` block
commits, and never when it rolls back (nor when the savepoint of an inner
block it was called in rolls back). Outside a transaction it is sent at
once. A send that fails after the commit raises from the ``atomic`` block's
exit, the data committed: for a task that must exist if and only if the
data does, use the outbox (:mod:`kale.contrib.django.outbox`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Optional

from kale.app import App, default_app
from kale.publication import PublishCall


def publish_on_commit(task: Any, app_data: Any, *args: Any, using: Optional[str] = None,
                      delay_sec: float = 0, group_id: Optional[str] = None,
                      dedup_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      unique_for_sec: Optional[float] = None, eta: Any = None,
                      app: Optional[App] = None, **kwargs: Any) -> str:
    """Publish one run of ``task`` (a Task class, or ``Task.with_options(...)``)
    when the transaction of Django database ``using`` (default: 'default')
    commits; returns its task id now. The other keywords are ``publish``'s
    (``delay_sec`` counts from the commit); ``app``: publish through that
    app (default: the one ``KALE`` builds)."""
    return _on_commit(PublishCall(_task_class(task), app_data, [(args, kwargs)], delay_sec,
                                  group_id, dedup_id, labels, _queue(task),
                                  unique_for_sec=unique_for_sec, eta=eta), using, app)[0]


def publish_batch_on_commit(task: Any, app_data: Any, calls: Iterable[Any],
                            using: Optional[str] = None, delay_sec: float = 0,
                            group_id: Optional[str] = None,
                            labels: Optional[Mapping[str, str]] = None,
                            unique_for_sec: Optional[float] = None, eta: Any = None,
                            app: Optional[App] = None) -> list[str]:
    """Publish many runs (``[(args, kwargs), ...]``, as ``publish_batch``
    takes them) when the transaction commits; their task ids now, in order."""
    return _on_commit(PublishCall(_task_class(task), app_data, list(calls), delay_sec, group_id,
                                  None, labels, _queue(task), unique_for_sec=unique_for_sec,
                                  eta=eta), using, app)


def _task_class(task: Any) -> Any:
    return getattr(task, 'task_class', task)


def _queue(task: Any) -> Optional[str]:
    """The queue of ``Task.with_options(queue=...)`` (None: the task's own)."""
    return getattr(task, 'queue', None) if hasattr(task, 'task_class') else None


def _on_commit(call: PublishCall, using: Optional[str], app: Optional[App]) -> list[str]:
    """Check ``call`` and fix its ids now; publish it with those ids on commit."""
    from django.db import transaction
    getattr(call.task_class, '_check_importable', lambda: None)()
    publisher = (app or default_app()).publisher
    task_ids = [message.task_id for message in publisher.draft(call).messages]
    if not task_ids:
        return []

    def send() -> None:
        # The publisher of now: a test's eager mode set after the call holds too.
        (app or default_app()).publisher.run(dataclasses.replace(call, task_ids=task_ids))
    transaction.on_commit(send, using=using)
    return task_ids
