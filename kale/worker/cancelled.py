"""Tasks cancelled before they ran: asked once per batch, settled unrun.

A hook's ``cancelled_tasks(queue, task_ids)`` (the records' one, for
example) names the tasks of a batch that must not run; each is settled as
cancelled: its message is deleted and ``on_task_cancelled`` follows. A hook
that raises counts as naming none (the dispatcher logs it).
"""
from __future__ import annotations

from kale.events import Outcome, Settlement
from kale.hooks import HookDispatcher, WorkerHooks
from kale.worker.batch import Batch


def skip_cancelled(hooks: HookDispatcher, batch: Batch) -> None:
    """Ask the hooks, once for the whole batch, which of its verified tasks
    were cancelled, and settle each of those as cancelled."""
    if not batch.opened or not hooks.overridden(WorkerHooks.cancelled_tasks):
        return
    opened_by_id = batch.opened
    cancelled: set[str] = set()
    for answer in hooks.collect(WorkerHooks.cancelled_tasks, batch.queue,
                                [opened.task_id for opened in opened_by_id.values()]):
        cancelled.update(answer or ())
    if not cancelled:
        return
    for received in batch.messages:
        opened = opened_by_id.get(received.message_id)
        if opened is not None and opened.task_id in cancelled:
            batch.settlements.append(Settlement(
                received, Outcome.CANCELLED, message=opened.message, reason='cancelled',
                envelope=opened.envelope))
