"""A worker declares its queues at once before it serves (Broker.declare_all)."""
import threading
import time

from kale.broker import Broker
from kale.exceptions import QueueNotFoundError
from kale.queue_config import TaskQueue
from kale.transport.memory import MemoryTransport

QUEUES = [TaskQueue(name=name, priority=1, batch_size=10, visibility_timeout_sec=30,
                    long_poll_time_sec=0, num_iterations=5) for name in ('a', 'b', 'c')]


class SlowTransport(MemoryTransport):
    """Each queue's declaration takes a round trip; records how many overlap."""

    def __init__(self, missing=()):
        super().__init__()
        self.missing = set(missing)
        self.at_once = self.most_at_once = 0
        self.lock = threading.Lock()

    def queue_exists(self, name):
        with self.lock:
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)
        time.sleep(0.05)
        with self.lock:
            self.at_once -= 1
        return name not in self.missing


def _broker(transport):
    return Broker(transport, {queue.name: queue for queue in QUEUES}, create_missing=False)


def test_the_queues_are_declared_together_not_one_after_another():
    transport = SlowTransport()
    broker = _broker(transport)
    broker.declare_all(QUEUES)
    assert transport.most_at_once == 3                  # one round trip for the three, not three
    assert {broker.sqs_name(q) for q in QUEUES} <= broker._declared


def test_a_queue_that_cannot_be_declared_says_so_on_first_use():
    transport = SlowTransport(missing={'b'})
    broker = _broker(transport)
    broker.declare_all(QUEUES)                          # no error at start
    assert broker.sqs_name(QUEUES[1]) not in broker._declared
    try:
        broker.declare(QUEUES[1])
    except QueueNotFoundError as exc:
        assert 'CREATE_MISSING_QUEUES is off' in str(exc)
    else:
        raise AssertionError('a missing queue was declared')
