"""Queue selectors: priority-weighted, never starving, never failing, few requests."""
import collections
import random

import pytest

from kale import queue_selector
from kale.queue_config import TaskQueue
from kale.queue_selector import QueueInfo

ALL_SELECTORS = [queue_selector.Random, queue_selector.Lottery,
                 queue_selector.HighestPriorityFirst, queue_selector.HighestPriorityLottery,
                 queue_selector.LotteryLottery, queue_selector.ReducedLottery]


def make_queue(name, priority):
    return TaskQueue(name=name, priority=priority, batch_size=10, visibility_timeout_sec=30,
                     long_poll_time_sec=0, num_iterations=1)


HIGH, MID, LOW = make_queue('high', 100), make_queue('mid', 40), make_queue('low', 5)


def selector(cls, queues, non_empty, seed=7):
    info = QueueInfo(queues, lambda queue: queue.name in non_empty)
    return cls(info, rng=random.Random(seed)), info


def tally(cls, queues, non_empty, draws=20000, seed=7):
    chosen, _ = selector(cls, queues, non_empty, seed)
    return collections.Counter(chosen.select().name for _ in range(draws))


@pytest.mark.parametrize('cls', [queue_selector.Lottery, queue_selector.ReducedLottery,
                                 queue_selector.LotteryLottery])
def test_priority_100_is_picked_about_20_times_as_often_as_priority_5(cls):
    counts = tally(cls, [HIGH, LOW], non_empty={'high', 'low'}, draws=60000)
    assert 17 <= counts['high'] / counts['low'] <= 23


def test_lottery_never_starves_the_lowest_priority():
    counts = tally(queue_selector.Lottery, [HIGH, MID, LOW], non_empty={'high', 'mid', 'low'})
    assert counts['low'] > 500
    assert counts['high'] > counts['mid'] > counts['low']


def test_random_ignores_priority():
    counts = tally(queue_selector.Random, [HIGH, LOW], non_empty=set())
    assert 0.9 <= counts['high'] / counts['low'] <= 1.1


def test_reduced_lottery_never_returns_an_empty_queue_while_another_has_work():
    for non_empty in ({'low'}, {'mid'}, {'high'}, {'mid', 'low'}):
        counts = tally(queue_selector.ReducedLottery, [HIGH, MID, LOW], non_empty, draws=3000)
        assert set(counts) == non_empty


def test_reduced_lottery_draws_among_all_when_all_are_empty():
    counts = tally(queue_selector.ReducedLottery, [HIGH, MID, LOW], non_empty=set())
    assert set(counts) == {'high', 'mid', 'low'}
    assert counts['high'] > counts['mid'] > counts['low']


def test_empty_queues_are_skipped_by_the_work_aware_selectors():
    for cls in (queue_selector.HighestPriorityFirst, queue_selector.HighestPriorityLottery,
                queue_selector.ReducedLottery):
        assert set(tally(cls, [HIGH, MID, LOW], non_empty={'mid'}, draws=500)) == {'mid'}


def test_highest_priority_first_prefers_the_highest_queue_with_work():
    assert set(tally(queue_selector.HighestPriorityFirst, [LOW, MID, HIGH],
                     non_empty={'low', 'mid'}, draws=100)) == {'mid'}
    assert set(tally(queue_selector.HighestPriorityFirst, [LOW, MID, HIGH],
                     non_empty=set(), draws=100)) == {'high'}


def test_lottery_lottery_gives_up_after_ten_draws():
    """Only low has work: 10 draws find it with chance 1 - (100/105)**10, and the
    final draw adds 5/105 of the rest: about 0.415 in all."""
    counts = tally(queue_selector.LotteryLottery, [HIGH, LOW], non_empty={'low'}, draws=20000)
    assert 0.39 <= counts['low'] / 20000 <= 0.44


@pytest.mark.parametrize('cls', ALL_SELECTORS)
@pytest.mark.parametrize('priorities', [(0, -5), (1000, 3), (None, 'x'), (float('nan'), 2.5)])
def test_odd_priorities_never_break_a_draw(cls, priorities):
    queues = [make_queue('a', 1), make_queue('b', 1)]
    for queue, priority in zip(queues, priorities, strict=False):
        object.__setattr__(queue, 'priority', priority)
    for non_empty in (set(), {'a'}, {'a', 'b'}):
        counts = tally(cls, queues, non_empty, draws=200)
        assert sum(counts.values()) == 200


def test_tickets_clamp_priorities_into_range():
    assert [queue_selector.tickets(make_queue('q', p)) for p in (0, 1, 50, 100, 1000)] == \
        [1, 1, 50, 100, 100]


@pytest.mark.parametrize('cls,most', [(queue_selector.Random, 0), (queue_selector.Lottery, 0),
                                      (queue_selector.HighestPriorityFirst, 3),
                                      (queue_selector.HighestPriorityLottery, 3),
                                      (queue_selector.LotteryLottery, 3),
                                      (queue_selector.ReducedLottery, 3)])
def test_each_queue_is_asked_about_at_most_once_per_selection(cls, most):
    chosen, info = selector(cls, [HIGH, MID, LOW], non_empty=set())
    for _ in range(50):
        before = info.checks
        chosen.select()
        assert info.checks - before <= most


def test_reduced_lottery_asks_once_when_the_first_winner_has_work():
    chosen, info = selector(queue_selector.ReducedLottery, [HIGH, MID, LOW],
                            non_empty={'high', 'mid', 'low'})
    for _ in range(20):
        before = info.checks
        chosen.select()
        assert info.checks - before == 1
