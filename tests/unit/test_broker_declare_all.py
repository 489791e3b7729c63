"""A worker declares its queues at once before it serves (Broker.declare_all)."""
import threading

from kale.broker import Broker
from kale.exceptions import QueueNotFoundError
from kale.queue_config import TaskQueue
from kale.transport.memory import MemoryTransport

QUEUES = [TaskQueue(name=name, priority=1, batch_size=10, visibility_timeout_sec=30,
                    long_poll_time_sec=0, num_iterations=5) for name in ('a', 'b', 'c')]


class SlowTransport(MemoryTransport):
    """Each queue's declaration waits until ``together`` declarations are
    under way at once (a barrier, not a clock: declarations one after
    another break it after 30 s instead)."""

    def __init__(self, missing=(), together=3):
        super().__init__()
        self.missing = set(missing)
        self.barrier = threading.Barrier(together, timeout=30)

    def queue_exists(self, name):
        self.barrier.wait()
        return name not in self.missing


def _broker(transport):
    return Broker(transport, {queue.name: queue for queue in QUEUES}, create_missing=False)


def test_the_queues_are_declared_together_not_one_after_another():
    transport = SlowTransport()
    broker = _broker(transport)
    broker.declare_all(QUEUES)                          # one after another: BrokenBarrierError
    assert not transport.barrier.broken
    assert {broker.sqs_name(q) for q in QUEUES} <= broker._declared


def test_a_queue_that_cannot_be_declared_says_so_on_first_use():
    transport = SlowTransport(missing={'b'})
    broker = _broker(transport)
    broker.declare_all(QUEUES)                          # no error at start
    assert broker.sqs_name(QUEUES[1]) not in broker._declared
    transport.barrier = threading.Barrier(1)            # alone now
    try:
        broker.declare(QUEUES[1])
    except QueueNotFoundError as exc:
        assert 'CREATE_MISSING_QUEUES is off' in str(exc)
    else:
        raise AssertionError('a missing queue was declared')
