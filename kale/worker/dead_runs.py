"""Dead runs: a dead-lettered task whose class handles its dead letters
(``on_dead_letter``) has a run of that handler sent to its queue's dead-run
queue, in place of its dead-letter copy. A dead run that cannot be made or
sent is dropped, and its task's dead-letter copy is sent instead, as for any
other task."""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Collection, Sequence

from kale.events import Settlement
from kale.exceptions import BatchSendError, KaleError, SQSError
from kale.publish_checks import keep_tenant
from kale.transport import OutgoingMessage
from kale.worker.batch import COPY_MIN_SEC, Batch

if TYPE_CHECKING:
    from kale.worker.consumer import Consumer

logger = logging.getLogger('kale.worker.consumer')


def send_dead_runs(consumer: 'Consumer', batch: Batch, dead_letters: Sequence[Settlement],
                   retry: bool = True) -> None:
    """Send the dead runs of ``dead_letters`` (see the module docstring)."""
    pending = [s for s in dead_letters if s.dead_run is not None and not s.copied]
    if not pending or batch.deadline - consumer.clock.monotonic() < COPY_MIN_SEC:
        return          # the dead-letter copies' send says what became of them
    sent, copies = _dead_run_copies(consumer, batch, pending)
    if not copies:
        return
    failed = _failed_dead_runs(consumer, batch, copies, retry)
    for i, settlement in enumerate(sent):
        if i in failed:
            logger.error('task %s (%s): its dead run was not sent, so it is dead-lettered '
                         'instead', settlement.task_id, settlement.task_name)
            settlement.dead_run = None
        else:
            settlement.copied = True

def _dead_run_copies(consumer: 'Consumer', batch: Batch, pending: Sequence[Settlement]
                     ) -> tuple[list[Settlement], list[OutgoingMessage]]:
    """The settlements whose dead run could be made, and its message; others drop theirs."""
    sent: list[Settlement] = []
    copies: list[OutgoingMessage] = []
    for settlement in pending:
        dead_run = settlement.dead_run
        assert dead_run is not None
        try:
            name = consumer.broker.dead_run_name(batch.queue)
            if name is None:        # no dead-letter queues: the task is dropped
                settlement.dead_run = None
                continue
            copy = consumer.codec.to_outgoing(dead_run, name)
        except KaleError as exc:
            logger.error('task %s (%s): its dead run could not be made, so it is '
                         'dead-lettered instead: %s', settlement.task_id,
                         settlement.task_name, exc)
            settlement.dead_run = None
            continue
        if batch.fifo:      # in the message's group; a second send of it is dropped
            copy = dataclasses.replace(copy, group_id=settlement.received.group_id or 'kale',
                                       dedup_id=dead_run.task_id)
        elif batch.queue.fair:
            copy = keep_tenant(copy, settlement.received.group_id)
        sent.append(settlement)
        copies.append(copy)
    return sent, copies

def _failed_dead_runs(consumer: 'Consumer', batch: Batch, copies: list[OutgoingMessage],
                      retry: bool) -> Collection[int]:
    """Send the dead runs in one request; the indexes of those not sent."""
    try:
        consumer._attempt(batch, 'dead run', lambda: consumer.broker.send_dead_runs(
            batch.queue, copies), retry, COPY_MIN_SEC)
    except SQSError as exc:     # a refusal, or an outage until the budget's end (not SettleDeferred)
        failed = exc.failed if isinstance(exc, BatchSendError) else range(len(copies))
        logger.error('%d of %d dead runs not sent from queue %s: %s', len(failed),
                     len(copies), batch.queue.name, exc)
        return failed
    return ()
