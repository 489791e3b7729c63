"""The schedules facet's contract (kale.store.schedules.ScheduleStore), on
every store: one leader at a time, a tick claimed once and only by the
leader, a failed send given back, ticks skipped, statuses read."""
from __future__ import annotations

from kale.statuses import TaskStatus
from kale.store.schedules import Lease, Progress
from tests.contract.conftest import set_status


def test_one_holder_leads_until_its_lease_expires_or_it_lets_go(store):
    facet = store.schedules
    assert facet.lease() is None
    assert facet.acquire('a', 100.0, 15) == (True, Lease('a', 100.0, 115.0))
    assert facet.acquire('b', 110.0, 15) == (False, Lease('a', 100.0, 115.0))
    assert facet.acquire('a', 110.0, 15) == (True, Lease('a', 100.0, 125.0))   # kept since 100
    assert facet.acquire('b', 125.0, 15) == (True, Lease('b', 125.0, 140.0))   # expired
    facet.release('a', 130.0)                           # not a's: nothing happens
    assert facet.lease() == Lease('b', 125.0, 140.0)
    facet.release('b', 130.0)
    assert facet.acquire('a', 130.5, 15) == (True, Lease('a', 130.5, 145.5))
    assert facet.lease().held_by('a', 140.0) and not facet.lease().held_by('a', 146.0)


def test_a_schedule_starts_done_up_to_now_and_keeps_its_row(store):
    facet = store.schedules
    facet.start([('daily', 'myapp.tasks.Report'), ('hourly', 'myapp.tasks.Ping')], 100.0)
    facet.start([('daily', 'myapp.tasks.Report')], 500.0)
    assert facet.progress() == {'daily': Progress('daily', 100.0),
                                'hourly': Progress('hourly', 100.0)}
    assert list(facet.progress(['hourly'])) == ['hourly']
    assert facet.progress([]) == {}


def test_a_tick_is_claimed_once_and_only_by_the_leader(store):
    facet = store.schedules
    facet.start([('daily', 'myapp.tasks.Report')], 100.0)
    facet.acquire('a', 100.0, 15)
    assert not facet.claim('daily', 'b', 200.0, 'task-1', 101.0)      # b does not lead
    assert facet.claim('daily', 'a', 200.0, 'task-1', 101.0)
    assert not facet.claim('daily', 'a', 200.0, 'task-2', 102.0)      # done already
    assert not facet.claim('daily', 'a', 150.0, 'task-3', 102.0)      # earlier: done too
    assert not facet.claim('daily', 'a', 300.0, 'task-4', 116.0)      # the lease expired
    assert not facet.claim('nothing', 'a', 300.0, 'task-5', 102.0)    # no such schedule
    assert facet.progress()['daily'] == Progress('daily', 200.0, 200.0, 'task-1', 101.0)


def test_a_failed_send_gives_its_tick_back_unless_another_claimed_since(store):
    facet = store.schedules
    facet.start([('daily', 'myapp.tasks.Report')], 100.0)
    facet.acquire('a', 100.0, 15)
    before = facet.progress()['daily']
    facet.claim('daily', 'a', 200.0, 'task-1', 101.0)
    facet.unclaim(before, 200.0, 'task-other')          # not the claim: nothing happens
    assert facet.progress()['daily'].last_task_id == 'task-1'
    facet.unclaim(before, 200.0, 'task-1')
    assert facet.progress()['daily'] == before
    assert facet.claim('daily', 'a', 200.0, 'task-1', 103.0)          # claimable again


def test_ticks_are_skipped_only_forward_and_by_the_leader(store):
    facet = store.schedules
    facet.start([('daily', 'myapp.tasks.Report')], 100.0)
    assert not facet.skip('daily', 'a', 500.0, 101.0)                 # nobody leads
    facet.acquire('a', 100.0, 15)
    assert facet.skip('daily', 'a', 500.0, 101.0)
    assert not facet.skip('daily', 'a', 400.0, 102.0)
    assert facet.progress()['daily'] == Progress('daily', 500.0)


def test_task_statuses_are_read_for_the_tasks_that_have_records(store):
    facet = store.schedules
    set_status(store, 'task-1', TaskStatus.SUCCEEDED)
    set_status(store, 'task-2', TaskStatus.QUEUED)
    assert facet.task_statuses(['task-1', 'task-2', 'task-none', '']) == {
        'task-1': 'succeeded', 'task-2': 'queued'}
    assert facet.task_statuses([]) == {}
