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

#: The hooks asked, in this order (a task both hooks name is cancelled), and
#: how each settles the tasks it names.
_ASKED = ((WorkerHooks.succeeded_tasks, Outcome.SKIPPED, ALREADY_SUCCEEDED),
          (WorkerHooks.cancelled_tasks, Outcome.CANCELLED, 'cancelled'))


def skip_cancelled(hooks: HookDispatcher, batch: Batch) -> None:
    """Ask the hooks, once for the whole batch, which of its verified tasks
    were cancelled or already succeeded, and settle each of those unrun."""
    if not batch.opened:
        return
    opened_by_id = batch.opened
    unrun = _unrun(hooks, batch, [opened.task_id for opened in opened_by_id.values()])
    if not unrun:
        return
    for received in batch.messages:
        opened = opened_by_id.get(received.message_id)
        if opened is not None and opened.task_id in unrun:
            outcome, reason = unrun[opened.task_id]
            batch.settlements.append(Settlement(
                received, outcome, message=opened.message, reason=reason,
                envelope=opened.envelope))


def _unrun(hooks: HookDispatcher, batch: Batch,
           task_ids: list[str]) -> dict[str, tuple[Outcome, str]]:
    """The tasks the hooks name, each with its outcome and reason."""
    unrun: dict[str, tuple[Outcome, str]] = {}
    for hook, outcome, reason in _ASKED:
        if hooks.overridden(hook):
            for answer in hooks.collect(hook, batch.queue, task_ids):
                unrun.update((task_id, (outcome, reason)) for task_id in answer or ())
    return unrun
