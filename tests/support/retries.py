"""Time for tests of retries that wait long (``Retry(after=...)`` past SQS's
15 minutes): a memory broker on a clock the test moves, and workers that
deliver its messages at each of their arrivals."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from kale.conf import settings
from kale.hooks import WorkerHooks
from kale.worker import Worker
from tests import retry_tasks as rt
from tests.support.clock import ShiftedClock


@contextlib.contextmanager
def shifted_broker() -> Iterator[tuple[Any, ShiftedClock]]:
    """A memory broker on a ShiftedClock that the publisher (Task.publish
    sends through it), the workers given it and LaterTask read."""
    from kale import publisher
    from kale.broker import Broker
    from kale.queue_config import build_queue_config
    from kale.transport.memory import MemoryTransport
    clock = ShiftedClock()
    broker = Broker(MemoryTransport(clock=clock), build_queue_config(settings.config), config=settings.config)
    previous = publisher.set_publisher(publisher.Publisher(broker, clock=clock))
    rt.LaterTask.clock, rt.LaterTask.runs = clock, []
    try:
        yield broker, clock
    finally:
        publisher.set_publisher(previous)


def run_first(broker: Any, clock: ShiftedClock) -> Worker:
    """A worker on the default queue that stops once it retried a task: a
    burst worker would wait for the retry's copy, delayed 15 minutes, as for
    any delayed message."""
    class StopAtRetry(WorkerHooks):
        def on_task_retried(self, settlement: Any) -> None:
            worker.stop()
    worker = Worker(queue_names=['default'], broker=broker, clock=clock, hooks=[StopAtRetry()])
    assert worker.run() == 0
    return worker


def run_until_it_ran(broker: Any, clock: ShiftedClock, max_arrivals: int = 10) -> int:
    """Move the clock to each arrival of the default queue's message and run
    a burst worker, until LaterTask has run; the number of arrivals."""
    queue = broker.sqs_name(broker.queues['default'])
    for arrival in range(1, max_arrivals + 1):
        waiting = list(broker.transport._queues[queue].messages.values())
        clock.offset += max(0.0, min(m.visible_at for m in waiting) - clock.monotonic()) + 0.001
        assert Worker(queue_names=['default'], burst=True, broker=broker, clock=clock).run() == 0
        if rt.LaterTask.runs:
            return arrival
    raise AssertionError('LaterTask did not run in %d arrivals' % max_arrivals)
