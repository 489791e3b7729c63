"""Tasks cancelled, or already done, before they ran: asked once per batch, settled unrun.

A hook's ``cancelled_tasks(queue, task_ids)`` (the records' one, for
example) names the tasks of a batch that must not run; each is settled as
cancelled: its message is deleted and ``on_task_cancelled`` follows. A hook's
``succeeded_tasks(queue, task_ids)`` names those that already succeeded (a
duplicate delivery); each is settled as skipped, unrun. A hook that raises
counts as naming none (the dispatcher logs it).
"""
from __future__ import annotations

from kale.events import Outcome, Settlement
from kale.hooks import HookDispatcher, WorkerHooks
from kale.worker.batch import Batch

#: The reason of a duplicate delivery settled unrun.
ALREADY_SUCCEEDED = 'already succeeded (a duplicate delivery)'


def skip_cancelled(hooks: HookDispatcher, batch: Batch) -> None:
    """Ask the hooks, once for the whole batch, which of its verified tasks
    were cancelled or already succeeded, and settle each of those unrun."""
    if not batch.opened:
        return
    opened_by_id = batch.opened
    task_ids = [opened.task_id for opened in opened_by_id.values()]
    unrun: dict[str, tuple[Outcome, str]] = {}
    if hooks.overridden(WorkerHooks.succeeded_tasks):
        for answer in hooks.collect(WorkerHooks.succeeded_tasks, batch.queue, task_ids):
            unrun.update((task_id, (Outcome.SKIPPED, ALREADY_SUCCEEDED))
                         for task_id in answer or ())
    if hooks.overridden(WorkerHooks.cancelled_tasks):
        for answer in hooks.collect(WorkerHooks.cancelled_tasks, batch.queue, task_ids):
            unrun.update((task_id, (Outcome.CANCELLED, 'cancelled')) for task_id in answer or ())
    if not unrun:
        return
    for received in batch.messages:
        opened = opened_by_id.get(received.message_id)
        if opened is not None and opened.task_id in unrun:
            outcome, reason = unrun[opened.task_id]
            batch.settlements.append(Settlement(
                received, outcome, message=opened.message, reason=reason,
                envelope=opened.envelope))
