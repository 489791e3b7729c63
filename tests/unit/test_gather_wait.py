"""How long a pool's loop waits while settled messages are gathered
(kale.worker.gather), and how many messages it holds ready (kale.worker.prefetch)."""
from __future__ import annotations

from kale.queue_config import TaskQueue
from kale.worker import gather, prefetch
from kale.worker.batch import Batch
from kale.worker.gather import Gatherer
from tests.support.clock import FakeClock

QUEUE = TaskQueue(name='q', priority=1, batch_size=10, visibility_timeout_sec=30,
                  long_poll_time_sec=0, num_iterations=5)


def _gatherer(clock, busy):
    settled = []
    return Gatherer(settled.append, clock=clock, busy=lambda: busy[0]), settled


def test_a_part_is_due_after_its_hold():
    clock, busy = FakeClock(), [False]
    gatherer, settled = _gatherer(clock, busy)
    assert gatherer.due_in() is None
    gatherer.add(Batch(QUEUE, [], clock.monotonic(), 'q'))
    assert abs(gatherer.due_in() - gather.HOLD_SEC) < 1e-9
    clock.advance(gather.HOLD_SEC)
    gatherer.flush()
    assert len(settled) == 1 and gatherer.due_in() is None


def test_while_every_settling_thread_is_busy_the_loop_looks_again_shortly_not_at_once():
    """The loop waited 0 s here, turning thousands of times a second."""
    clock, busy = FakeClock(), [True]
    gatherer, settled = _gatherer(clock, busy)
    gatherer.add(Batch(QUEUE, [], clock.monotonic(), 'q'))
    clock.advance(gather.HOLD_SEC)
    gatherer.flush()
    assert settled == []                            # kept for the busy threads
    assert gatherer.due_in() == gather.BUSY_LOOK_SEC
    clock.advance(gather.BUSY_HOLD_SEC - gather.HOLD_SEC - 0.001)
    assert abs(gatherer.due_in() - 0.001) < 1e-9    # no later than the busy hold's end
    clock.advance(0.001)
    assert gatherer.due_in() == 0.0
    gatherer.flush()
    assert len(settled) == 1


def test_messages_held_ready_count_the_loops_own_time_on_a_fast_endpoint():
    fast = prefetch.read_ahead(200, 0.0001, 0.1)
    assert fast == -int(-200 * 2 * prefetch.READ_AHEAD_MIN_RECEIVE_SEC // 0.1) == 40
    assert prefetch.read_ahead(200, 0.012, 0.1) == 48           # a 12 ms endpoint
    assert prefetch.read_ahead(200, 0.5, 0.1) == 200            # never beyond the in-flight limit
