"""The batch budget: a task starts only if its whole time limit fits."""
import pytest

from kale.queue_config import TaskQueue
from kale.worker.batch import (
    RECEIVE_CLOCK_SLACK_SEC,
    SETTLE_MARGIN_SEC,
    Batch,
    fits_budget,
    settle_margin,
    visibility_clock_start,
)


def queue(visibility_timeout_sec=30):
    return TaskQueue(name='q', priority=1, batch_size=10, visibility_timeout_sec=visibility_timeout_sec,
                     long_poll_time_sec=0, num_iterations=1)


def test_deadline_is_received_at_plus_the_visibility_timeout():
    batch = Batch(queue(30), [], received_at=100.0)
    assert batch.deadline == 130.0
    assert batch.time_left(110.0) == 20.0


def test_a_task_fits_while_its_limit_and_the_margin_fit():
    batch = Batch(queue(30), [], received_at=100.0)
    assert batch.fits(5, now=100.0 + 30 - 5 - SETTLE_MARGIN_SEC)
    assert not batch.fits(5, now=100.0 + 30 - 5 - SETTLE_MARGIN_SEC + 0.01)


def test_a_task_that_fits_its_queue_always_fits_a_fresh_batch():
    for limit in (1, 10, 29, 29.5, 29.99):
        assert fits_budget(limit, time_left=30 - 0.005, visibility_timeout_sec=30)


def test_margin_shrinks_for_tasks_close_to_the_visibility_timeout():
    assert settle_margin(5, 30) == SETTLE_MARGIN_SEC
    assert settle_margin(29, 30) == 0.5
    assert settle_margin(30, 30) == 0.0


@pytest.mark.parametrize('elapsed,limit,fits', [(0, 3, True), (1, 3, True), (1.01, 3, False),
                                                (2, 2, True), (2.01, 2, False)])
def test_budget_arithmetic_for_a_five_second_batch(elapsed, limit, fits):
    batch = Batch(queue(5), [], received_at=0.0)
    assert batch.fits(limit, now=elapsed) is fits


def test_visibility_clock_starts_no_earlier_than_just_before_the_answer():
    assert visibility_clock_start(10.0, 10.2) == 10.0           # quick call: its start
    assert visibility_clock_start(10.0, 29.0) == 29.0 - RECEIVE_CLOCK_SLACK_SEC   # long poll


def test_unsettled_lists_messages_not_reached():
    from kale.events import Outcome, Settlement
    from kale.transport import ReceivedMessage
    first, second = ReceivedMessage('1', 'h1', 'b', {}), ReceivedMessage('2', 'h2', 'b', {})
    batch = Batch(queue(), [first, second], 0.0)
    batch.settlements.append(Settlement(first, Outcome.SUCCEEDED))
    assert batch.unsettled() == [second]
