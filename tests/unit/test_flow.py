"""Flow control (kale.flow, kale.worker.flow): the parsing, the bucket's
arithmetic on a FakeClock, the gate's
error line. The buckets and leases on every store:
tests/contract/test_flow_store.py. Workers under limits: tests/integration/test_flow_limits.py."""
import bisect
import collections
import heapq
import itertools
import logging
import random
import time
import types

import pytest

from kale import records
from kale.app import default_app
from kale.exceptions import RecordsUnavailableError, TaskDefinitionError
from kale.flow.bucket import MAX_DELAY_SEC, Bucket, most_starts
from kale.flow.spec import Rate, parse_rate, spec_of
from kale.hooks import WorkerHooks
from kale.task import Task
from kale.worker import Worker
from kale.worker.flow import UNGATED_DELAY_SEC, FlowGate
from tests import flow_tasks as ft
from tests.support.clock import FakeClock
from tests.support.flow import take_slot

# --- what a class asks for ------------------------------------------------------------


@pytest.mark.parametrize('text,rate', [
    ('5/s', Rate(5, 1.0)), ('20/sec', Rate(20, 1.0)), ('2/second', Rate(2, 1.0)),
    ('3/seconds', Rate(3, 1.0)),
    ('100/m', Rate(100, 60.0)), ('100/min', Rate(100, 60.0)), ('100/mins', Rate(100, 60.0)),
    ('100/minute', Rate(100, 60.0)), ('100/minutes', Rate(100, 60.0)),
    ('10/h', Rate(10, 3600.0)), ('10/hr', Rate(10, 3600.0)), ('10/hrs', Rate(10, 3600.0)),
    ('10/hour', Rate(10, 3600.0)), ('10/hours', Rate(10, 3600.0)),
    ('1000/d', Rate(1000, 86400.0)), ('1000/day', Rate(1000, 86400.0)),
    ('1000/days', Rate(1000, 86400.0)),
    (' 3 / h ', Rate(3, 3600.0)), ('7 /minute', Rate(7, 60.0))])
def test_the_rate_spellings_people_write_parse(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize('rate,shown', [(Rate(100, 60.0), '100/m'), (Rate(5, 86400.0), '5/d')])
def test_a_rate_is_shown_in_its_short_form(rate, shown):
    assert str(rate) == shown


@pytest.mark.parametrize('text,problem', [
    ('100', "'100' is not <count>/<unit>"), ('0/s', "the count '0' is not a whole number above 0"),
    ('-1/s', "the count '-1' is not a whole number above 0"),
    ('1.5/s', "the count '1.5' is not a whole number above 0"),
    ('1e3/s', "the count '1e3' is not a whole number above 0"),
    ('10/fortnight', "the unit 'fortnight' is not one Kale knows"),
    ('10/M', "the unit 'M' is not one Kale knows"), ('10/', "the unit '' is not one Kale knows"),
    ('1/s/s', "'1/s/s' is not <count>/<unit>"), ('', "'' is not <count>/<unit>"),
    (10, '10 is not a string'), (None, 'None is not a string'), (b'1/s', "b'1/s' is not a string")])
def test_bad_rates_are_refused_saying_what_is_wrong_and_what_is_accepted(text, problem):
    with pytest.raises(ValueError) as caught:
        parse_rate(text)
    assert problem in str(caught.value)
    assert str(caught.value).endswith(": write a whole count above 0 per second, minute, hour or "
                                      "day, such as '5/s', '100/m', '100/min', '100/minute', "
                                      "'10/h' or '1000/day'")


def test_a_limit_made_bad_after_definition_is_refused_by_the_spec_in_the_same_words():
    class ChangedRate(Task):
        rate_limit = '5/s'

    class ChangedConcurrency(Task):
        concurrency_limit = 2

    ChangedRate.rate_limit = 'fast'
    ChangedConcurrency.concurrency_limit = 0
    for cls, attribute in ((ChangedRate, 'rate_limit'), (ChangedConcurrency, 'concurrency_limit')):
        with pytest.raises(TaskDefinitionError) as info:
            spec_of(cls)
        text = str(info.value)
        assert '\n' not in text and text.startswith('task %s: %s ' % (cls.task_path(), attribute))


def test_a_class_without_limits_has_no_spec():
    assert spec_of(ft.runs.__class__) is None
    spec = spec_of(ft.PerCustomerTask)
    assert spec.rate == Rate(2, 1.0) and spec.rate_keyed and spec.keyed
    assert spec.name == 'tests.flow_tasks.PerCustomerTask'


# --- the bucket's arithmetic ----------------------------------------------------------


def test_the_bucket_holds_a_second_or_a_twentieth_of_a_period():
    assert Rate(100, 60.0).capacity == 5.0 and Rate(20, 1.0).capacity == 20.0
    assert Rate(10, 60.0).capacity == 1.0 and Rate(7200, 3600.0).capacity == 360.0


def runs_of_a_minute(arrivals_per_sec, late_share=0.0, seed=7):
    """Messages arrive at random at ``arrivals_per_sec`` on a FakeClock for a
    minute and ask a 20/s bucket; a refused one comes back when told (or,
    ``late_share`` of the times, up to ten seconds later: a backlog received
    slowly, a copy a killed worker held) and takes its token ahead of the
    new runs, or is told again. The start times, in the minute."""
    clock = FakeClock()
    rate = Rate(20, 1.0)
    bucket = Bucket(rate.capacity, clock.time())
    start = clock.time()
    rng = random.Random(seed)
    comebacks = []                              # (time, n): a reserved run due back
    runs = []
    arrival = start
    for n in itertools.count():
        arrival += rng.expovariate(arrivals_per_sec)
        while comebacks and comebacks[0][0] <= arrival:
            when, _ = heapq.heappop(comebacks)
            wait = bucket.take_reserved(rate, when)
            if not wait:
                runs.append(when)
            else:
                heapq.heappush(comebacks, (when + wait, n))
        if arrival >= start + 60:
            break
        wait, reserved = bucket.take(rate, arrival)
        if not wait:
            runs.append(arrival)
        elif reserved:
            late = rng.uniform(0, 10) if rng.random() < late_share else 0.0
            heapq.heappush(comebacks, (arrival + wait + late, n))
    return runs


@pytest.mark.parametrize('arrivals_per_sec', [25, 200, 2000])
def test_a_minute_of_many_takers_stays_within_five_percent(arrivals_per_sec):
    runs = runs_of_a_minute(arrivals_per_sec)
    assert 1200 * 0.95 <= len(runs) <= 1200 * 1.05 + 1


def most_in_a_second(runs):
    runs = sorted(runs)
    return max(bisect.bisect_left(runs, t + 1.0) - i for i, t in enumerate(runs))


@pytest.mark.parametrize('arrivals_per_sec', [25, 200, 2000])
def test_runs_coming_back_late_never_start_beside_the_fresh_tokens(arrivals_per_sec):
    """A third of the refused runs come back up to ten seconds late: no
    second holds more than the bucket's burst and a second of the rate, and
    the minute stays within five percent."""
    runs = runs_of_a_minute(arrivals_per_sec, late_share=0.3)
    assert most_in_a_second(runs) <= 20 + 20
    assert len(runs) <= 1200 * 1.05 + 20
    # the late still run: the bucket is not left idle for them
    assert len(runs) >= 1200 * 0.9


def test_reserved_runs_coming_back_together_late_start_at_the_rate():
    """A hundred runs refused at 10/s are due back over ten seconds; a killed
    worker held their copies, and they all come back together 30 s late,
    beside new runs: the bucket's burst starts, the others are told to come
    back, each keeping its place ahead of the new runs, and start at the
    rate: no second holds more than the burst and a second of the rate."""
    clock = FakeClock()
    rate = Rate(10, 1.0)
    bucket = Bucket(rate.capacity, clock.time())
    assert [bucket.take(rate, clock.time()) for _ in range(10)] == [(0.0, False)] * 10
    assert all(reserved for _, reserved in (bucket.take(rate, clock.time()) for _ in range(100)))
    clock.advance(30.0)
    back = {n: clock.time() for n in range(100)}           # when each comes back
    starts = []
    while back:
        now = clock.time()
        for n in [n for n, when in back.items() if when <= now]:
            wait = bucket.take_reserved(rate, now)
            if wait:
                back[n] = now + wait
            else:
                starts.append(now)
                del back[n]
        # five new runs a second meanwhile: behind the places, none starts
        assert all(bucket.take(rate, now)[0] for _ in range(5))
        clock.advance(1.0)
    per_second = collections.Counter(int(t) for t in starts)
    assert sum(per_second.values()) == 100
    first = min(per_second)
    assert per_second[first] == most_starts(rate, 0) == 10
    assert max(n for second, n in per_second.items() if second != first) == 10
    assert most_in_a_second(starts) <= most_starts(rate, 1)


def test_late_reserved_runs_start_ahead_of_new_ones_until_the_bucket_is_full():
    """Two places due in 1 s: a new run waits behind them while the bucket
    refills; once it is full (they are late), a token that the bucket would
    lose goes to a new run instead, and the bucket never holds more than its
    burst: no window holds more starts than the burst and its rate."""
    clock = FakeClock()
    rate = Rate(2, 1.0)
    bucket = Bucket(0.0, clock.time())
    assert [bucket.take(rate, clock.time()) for _ in range(2)] == [(1.0, True)] * 2
    clock.advance(0.6)
    assert bucket.take(rate, clock.time()) == (1.0, True)      # behind the two places
    clock.advance(5.0)              # they were due in 1 s, and come in 5 s
    bucket.refill(rate, clock.time())
    assert bucket.tokens == rate.capacity == 2.0                 # full, whoever is late
    assert bucket.take(rate, clock.time()) == (0.0, False)      # a token it would lose
    assert bucket.take(rate, clock.time())[1]                   # and no more
    assert bucket.take_reserved(rate, clock.time()) == 0.0
    assert bucket.take_reserved(rate, clock.time()) > 0.0       # late: to the end of the line
    assert bucket.tokens == 0.0


def test_a_reserved_run_finding_no_token_keeps_its_place_at_the_end_of_the_line():
    clock = FakeClock()
    rate = Rate(2, 1.0)
    bucket = Bucket(0.0, clock.time())
    waits = [bucket.take(rate, clock.time())[0] for _ in range(10)]
    assert waits == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0]
    # the first comes back early (or late, after others took its token):
    # behind the ten places, five seconds on; it still holds its place
    assert bucket.take_reserved(rate, clock.time()) == 5.0
    assert bucket.reserved == 10


def test_refused_runs_are_told_to_come_back_in_turn_each_once():
    clock = FakeClock()
    rate = Rate(20, 1.0)
    bucket = Bucket(0.0, clock.time())
    answers = [bucket.take(rate, clock.time()) for _ in range(100)]
    assert all(reserved for _, reserved in answers)
    delays = [wait for wait, _ in answers]
    # 100 refused at 20/s: back over five seconds, 20 a second, not all at once
    assert collections.Counter(delays) == {1.0: 20, 2.0: 20, 3.0: 20, 4.0: 20, 5.0: 20}


def test_a_delay_is_at_most_fifteen_minutes_and_reserves_nothing_further():
    clock = FakeClock()
    bucket = Bucket(0.0, clock.time())
    answers = [bucket.take(Rate(1, 3600.0), clock.time()) for _ in range(3)]
    assert answers == [(MAX_DELAY_SEC, False)] * 3 and bucket.tokens == 0.0
    assert bucket.reserved == 0


# --- the worker's step ----------------------------------------------------------------


def gate_of(**values):
    """A worker's flow gate for settings ``values`` (with the test settings' codec)."""
    return FlowGate(types.SimpleNamespace(**values), default_app().codec)


def test_without_records_a_limited_task_is_held_back_with_one_error_line(caplog):
    gate = gate_of(RECORDS_URL='', CONCURRENCY_LEASE_SEC=60)
    opened = types.SimpleNamespace(task_class=ft.RatedTask)
    with caplog.at_level(logging.ERROR, logger='kale.flow'):
        for _ in range(3):
            refusal = gate._ask_of(None, opened)
            assert refusal.delay_sec == UNGATED_DELAY_SEC
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and 'RatedTask' in lines[0]
    assert 'needs RATE_LIMIT_URL or RECORDS_URL' in lines[0]


class StopAtFirstSettled(WorkerHooks):
    """Stops the worker once a message is released or dead-lettered (a
    worker that released a bad limit's message would go on for ever)."""

    def on_worker_startup(self, worker):
        self.worker = worker

    def on_task_released(self, settlement):
        self.worker.stop()

    on_task_dead_lettered = on_task_released


@pytest.mark.usefixtures('pool')
def test_a_rate_limit_made_bad_at_run_time_dead_letters_its_message_with_the_reason(
        pool_app, monkeypatch, caplog):
    monkeypatch.setattr(ft.ChangedRateTask, 'rate_limit', '5/fortnight')
    ft.runs.clear()
    task_id = pool_app.publish(ft.ChangedRateTask, None, 1)
    with caplog.at_level(logging.ERROR, logger='kale.flow'):
        worker = Worker(queue_names=['default'], burst=True, app=pool_app,
                        hooks=[StopAtFirstSettled()])
        assert worker.run() == 0
    assert dict(worker.stats) == {'dead_letter': 1} and ft.runs.items == []
    reason = ("task tests.flow_tasks.ChangedRateTask: rate_limit '5/fortnight': the unit "
              "'fortnight' is not one Kale knows: write a whole count above 0 per second, "
              "minute, hour or day, such as '5/s', '100/m', '100/min', '100/minute', '10/h' or "
              "'1000/day'")
    queue = pool_app.queues['default']
    [dead] = pool_app.transport.receive(pool_app.broker.dead_letter_name(queue), 10, 0, 30)
    assert dead.attributes['kale_dead_letter_reason'] == reason
    assert dead.attributes['kale_task_id'] == task_id
    assert [r.getMessage() for r in caplog.records if r.name == 'kale.flow'] == [
        reason + '; its tasks are dead-lettered unrun']


def test_rate_limit_url_keeps_the_limits_apart_from_the_records(tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'flow.db')
    gate = gate_of(RATE_LIMIT_URL=url, RECORDS_URL='sqlite:///other.db',
                   CONCURRENCY_LEASE_SEC=60)
    assert gate.url == url and gate.store.url == url
    assert gate_of(RECORDS_URL=url, CONCURRENCY_LEASE_SEC=60).url == url


@pytest.fixture
def flow(memory_broker, records_url):
    yield memory_broker


def test_the_gate_renews_the_leases_it_holds_and_no_other(flow, monkeypatch):
    gate = gate_of(RECORDS_URL=records.store().url,
                   CONCURRENCY_LEASE_SEC=30)
    monkeypatch.setattr(gate, '_renew_while_held', lambda: None)    # renewed by hand here
    state = gate.state
    now = time.time()
    held, lost = object(), object()
    for message, received in (('m1', held), ('m2', lost)):
        assert take_slot(state, 'k', 2, gate.worker + '/' + message, gate.worker, now - 29, 30)
        gate._hold(received, ('k', gate.worker + '/' + message))
    # the give-back of m2's slot fails: the slot is no longer held, and is
    # left to expire, not renewed for as long as the worker holds others
    monkeypatch.setattr(state, 'give_back', lambda slots: (_ for _ in ()).throw(
        RecordsUnavailableError('records store: down')))
    gate.settled(types.SimpleNamespace(settlements=[types.SimpleNamespace(received=lost)]))
    assert gate.held == 1
    assert gate.renew() == 1
    assert state.holders('k', now + 5) == [gate.worker + '/m1']
    assert take_slot(state, 'k', 2, 'other/m3', 'other', now + 5, 30)


def test_a_worker_opens_rate_limit_url_at_start_and_only_that(tmp_path, caplog):
    url = 'sqlite:///%s' % (tmp_path / 'flow.db')
    gate = gate_of(RATE_LIMIT_URL=url, CONCURRENCY_LEASE_SEC=60)
    gate.start()
    with gate.store.begin() as conn:       # migrated before any limited batch
        assert conn.exec_driver_sql('SELECT count(*) FROM kale_rate_buckets').scalar() == 0
    records_only = gate_of(RECORDS_URL=url, CONCURRENCY_LEASE_SEC=60)
    records_only.start()
    assert records_only._store is None                # opened by the first limited batch
    unreachable = gate_of(
        RATE_LIMIT_URL='sqlite:///%s' % (tmp_path / 'missing' / 'flow.db'),
        CONCURRENCY_LEASE_SEC=60)
    with caplog.at_level(logging.WARNING, logger='kale.flow'):
        unreachable.start()                           # a warning, and the worker goes on
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith('flow control: ')]
