"""Periodic tasks, one part at a time: the ticks of cron and interval
schedules (time zones, daylight-saving changes as cron treats them), the
checks of a schedule, and the scheduler's lease and catch-up policies on a
SQLite state file and a FakeClock (no real minutes pass)."""
import datetime
from zoneinfo import ZoneInfo

import pytest

from kale.conf import settings
from kale.exceptions import ScheduleError, ScheduleNotFoundError
from kale.schedules.discovery import Schedules, find_schedules
from kale.schedules.scheduler import Scheduler
from kale.schedules.spec import CATCH_UP_ALL_MAX, Schedule, check_fields, tick_id
from kale.store.sql.records import RecordStore
from tests import schedule_tasks as st
from tests.support.clock import FakeClock
from tests.support.schedules import run_until

PARIS = ZoneInfo('Europe/Paris')
NEW_YORK = ZoneInfo('America/New_York')


def at(*parts, tz=datetime.timezone.utc):
    return datetime.datetime(*parts, tzinfo=tz).timestamp()


def local(tick, tz):
    return datetime.datetime.fromtimestamp(tick, tz).isoformat()


def cron(expr, tz='UTC', **fields):
    return Schedule('s', st.Tick, expr, tz=tz, **fields)


# --- ticks -------------------------------------------------------------------------------

def test_an_interval_ticks_at_the_multiples_of_its_seconds_since_the_epoch():
    every = Schedule('s', st.Tick, 300)
    assert every.next_after(at(2026, 1, 1, 10, 2)) == at(2026, 1, 1, 10, 5)
    assert every.next_after(at(2026, 1, 1, 10, 5)) == at(2026, 1, 1, 10, 10)
    assert every.ticks_between(at(2026, 1, 1, 10, 0), at(2026, 1, 1, 10, 15), 10) == [
        at(2026, 1, 1, 10, 5), at(2026, 1, 1, 10, 10), at(2026, 1, 1, 10, 15)]
    assert every.ticks_between(0, at(2026, 1, 1, 10, 15), 2) == [
        at(2026, 1, 1, 10, 10), at(2026, 1, 1, 10, 15)]          # the latest two
    assert every.describe() == 'every 300 s'


def test_a_cron_schedule_ticks_in_its_time_zone():
    utc = cron('0 3 * * *')
    assert utc.upcoming(at(2026, 1, 10, 12), 2) == [at(2026, 1, 11, 3), at(2026, 1, 12, 3)]
    paris = cron('0 3 * * *', 'Europe/Paris')
    assert paris.next_after(at(2026, 1, 10, 12)) == at(2026, 1, 11, 2)     # CET, UTC+1
    assert paris.next_after(at(2026, 7, 10, 12)) == at(2026, 7, 11, 1)     # CEST, UTC+2
    weekdays = cron('30 9 * * 1-5', 'America/New_York')
    assert [local(t, NEW_YORK) for t in weekdays.upcoming(at(2026, 1, 9, 20), 2)] == [
        '2026-01-12T09:30:00-05:00', '2026-01-13T09:30:00-05:00']    # Friday night: Monday


def test_spring_forward_a_fixed_time_in_the_skipped_hour_runs_once_at_the_first_valid_minute():
    # Europe/Paris, 2026-03-29: 02:00 CET jumps to 03:00 CEST.
    nightly = cron('30 2 * * *', 'Europe/Paris')
    assert [local(t, PARIS) for t in nightly.upcoming(at(2026, 3, 27, 12), 4)] == [
        '2026-03-28T02:30:00+01:00', '2026-03-29T03:00:00+02:00',
        '2026-03-30T02:30:00+02:00', '2026-03-31T02:30:00+02:00']


def test_spring_forward_a_wildcard_hour_runs_at_every_real_hour():
    hourly = cron('30 * * * *', 'Europe/Paris')
    day = hourly.ticks_between(at(2026, 3, 29, tz=PARIS), at(2026, 3, 30, tz=PARIS) - 1, 100)
    assert len(day) == 23                                        # a 23-hour day
    assert [local(t, PARIS) for t in day[1:3]] == ['2026-03-29T01:30:00+01:00',
                                                   '2026-03-29T03:30:00+02:00']
    assert day[2] - day[1] == 3600


def test_fall_back_a_fixed_time_in_the_repeated_hour_runs_once_at_its_first_occurrence():
    # Europe/Paris, 2026-10-25: 03:00 CEST falls back to 02:00 CET, 02:xx happens twice.
    nightly = cron('30 2 * * *', 'Europe/Paris')
    assert [local(t, PARIS) for t in nightly.upcoming(at(2026, 10, 24, 12), 2)] == [
        '2026-10-25T02:30:00+02:00', '2026-10-26T02:30:00+01:00']
    # America/New_York, 2026-11-01: 01:xx happens twice.
    early = cron('15 1 * * *', 'America/New_York')
    assert [local(t, NEW_YORK) for t in early.upcoming(at(2026, 10, 31, 12), 2)] == [
        '2026-11-01T01:15:00-04:00', '2026-11-02T01:15:00-05:00']


def test_fall_back_a_wildcard_hour_runs_at_both_occurrences_of_the_repeated_hour():
    hourly = cron('30 * * * *', 'Europe/Paris')
    day = hourly.ticks_between(at(2026, 10, 25, tz=PARIS), at(2026, 10, 26, tz=PARIS) - 1, 100)
    assert len(day) == 25                                        # a 25-hour day
    assert [local(t, PARIS) for t in day[2:4]] == ['2026-10-25T02:30:00+02:00',
                                                   '2026-10-25T02:30:00+01:00']


@pytest.mark.parametrize('expr', ['30 2 * * *', '0 3 * * *', '30 * * * *', '*/20 * * * *',
                                  '0 */2 * * *', '59 1 * * *', '0 0 * * 0'])
@pytest.mark.parametrize('tz', ['UTC', 'Europe/Paris', 'America/New_York', 'Australia/Sydney'])
def test_the_latest_ticks_are_those_counted_forward(expr, tz):
    """ticks_between counts back from its end (bounded work after a long
    outage); it finds what counting forward finds, across each change."""
    schedule = cron(expr, tz)
    for start in (at(2026, 3, 27), at(2026, 10, 23), at(2026, 3, 6), at(2026, 10, 30),
                  at(2026, 4, 3)):
        end = start + 4 * 86400
        forward = []
        moment = start
        while (moment := schedule.next_after(moment)) <= end:
            forward.append(moment)
        assert schedule.ticks_between(start, end, 1000) == forward
        assert schedule.ticks_between(start, end, 3) == forward[-3:]


def test_a_ticks_task_id_is_the_same_everywhere_and_differs_by_schedule_and_tick():
    assert tick_id('nightly', 1800000000.0) == tick_id('nightly', 1800000000.0)
    assert len(tick_id('nightly', 1800000000.0)) == 32
    assert len({tick_id('nightly', 1800000000.0), tick_id('nightly', 1800000300.0),
                tick_id('weekly', 1800000000.0)}) == 3


# --- checks ---------------------------------------------------------------------------------

@pytest.mark.parametrize('every, tz, catch_up, message', [
    ('61 * * * *', 'UTC', 'last', "schedule 'n': schedule '61 * * * *' is not a valid cron "
                                  'expression: Bad minute'),
    ('0 3 * * * *', 'UTC', 'last', "schedule 'n': schedule '0 3 * * * *' is not a five-field "
                                   'cron expression'),
    (0, 'UTC', 'last', "schedule 'n': schedule must be a five-field cron string or whole seconds "
                       'of at least 1, got 0'),
    (-5, 'UTC', 'last', 'got -5'),
    (2.5, 'UTC', 'last', 'got 2.5'),
    (True, 'UTC', 'last', 'got True'),
    ('0 3 * * *', 'Mars/Olympus', 'last', "schedule 'n': tz 'Mars/Olympus' is not a known IANA "
                                          'time zone name'),
    ('0 3 * * *', 'UTC', 'sometimes', "schedule 'n': catch_up must be one of 'last', 'all', "
                                      "'none', got 'sometimes'"),
])
def test_a_bad_field_is_one_line_naming_the_schedule_and_the_field(every, tz, catch_up, message):
    with pytest.raises(ScheduleError) as caught:
        check_fields('n', every, tz, (), {}, catch_up)
    assert message in str(caught.value) and '\n' not in str(caught.value)


def config(**values):
    """An app of the test settings with ``values`` over them."""
    from kale.app import App
    return App(settings.config, **values)


def test_task_modules_classes_and_schedules_entries_are_found_and_checked():
    found = find_schedules(config(TASK_MODULES=('tests.schedule_tasks',), SCHEDULES={
        'ticks': {'task': 'tests.schedule_tasks.Tick', 'schedule': 1, 'args': [1, 2],
                  'catch_up': 'none', 'queue': 'high'}}))
    assert [s.name for s in found] == ['tests.schedule_tasks.EveryFiveSeconds',
                                       'tests.schedule_tasks.NightlyReport', 'ticks']
    nightly = found.get('tests.schedule_tasks.NightlyReport')
    assert (nightly.every, nightly.tz, nightly.args, nightly.kwargs, nightly.catch_up) == (
        '0 3 * * *', 'Europe/Paris', ('eu',), {'full': True}, 'last')
    ticks = found.get('ticks')
    assert (ticks.task_class, ticks.every, ticks.args, ticks.catch_up, ticks.queue) == (
        st.Tick, 1, (1, 2), 'none', 'high')
    with pytest.raises(ScheduleNotFoundError, match="no schedule is called 'nope'"):
        found.get('nope')


@pytest.mark.parametrize('entry, message', [
    ({'task': 'tests.schedule_tasks.Tick'}, "schedule 'x': schedule is missing"),
    ({'task': 'tests.schedule_tasks.Nope', 'schedule': 5},
     "schedule 'x': task 'tests.schedule_tasks.Nope' cannot be imported"),
    ({'task': 'tests.schedule_tasks._note', 'schedule': 5}, 'is not a kale Task class'),
    ({'task': 'tests.schedule_tasks.Tick', 'schedule': 5, 'queue': 'nowhere'},
     "schedule 'x': queue: task tests.schedule_tasks.Tick: queue 'nowhere' is not in the queue"),
    ({'task': 'tests.schedule_tasks.NightlyReport', 'schedule': 5},
     "schedule 'x': args and kwargs: task tests.schedule_tasks.NightlyReport: arguments do not "
     'match run_task'),
    ({'task': 'tests.schedule_tasks.Tick', 'schedule': 5, 'every': 3},
     "schedule 'x': unknown field 'every'"),
])
def test_a_bad_schedules_entry_is_broken_with_one_line(entry, message):
    found = find_schedules(config(SCHEDULES={'x': entry, 'good': {
        'task': 'tests.schedule_tasks.Tick', 'schedule': 5}}))
    assert [s.name for s in found] == ['good']
    [broken] = found.broken
    assert broken.name == 'x' and message in broken.error and '\n' not in broken.error
    with pytest.raises(ScheduleError) as caught:        # `kale schedules run x`
        found.get('x')
    assert str(caught.value) == broken.error


def test_every_bad_schedule_is_found_at_once_and_the_good_ones_kept():
    found = find_schedules(config(TASK_MODULES=('tests.schedule_tasks',), SCHEDULES={
        'typo': {'task': 'tests.schedule_tasks.Tick', 'schedule': '61 * * * *'},
        'zone': {'task': 'tests.schedule_tasks.Tick', 'schedule': 60, 'tz': 'Mars/Olympus'},
        'ticks': {'task': 'tests.schedule_tasks.Tick', 'schedule': 60}}))
    assert [s.name for s in found] == ['tests.schedule_tasks.EveryFiveSeconds',
                                       'tests.schedule_tasks.NightlyReport', 'ticks']
    assert [(b.name, b.task, b.error) for b in found.broken] == [
        ('typo', 'tests.schedule_tasks.Tick', "schedule 'typo': schedule '61 * * * *' is not a "
                                              'valid cron expression: Bad minute'),
        ('zone', 'tests.schedule_tasks.Tick', "schedule 'zone': tz 'Mars/Olympus' is not a known "
                                              "IANA time zone name (e.g. 'Europe/Paris'; pip "
                                              'install tzdata where the system has no zone '
                                              'database)')]


def test_a_task_module_that_cannot_be_imported_breaks_its_schedules_only(tmp_path,
                                                                          monkeypatch):
    """A class whose schedule has a typo is refused when defined: its module
    cannot be imported, and is the broken one; the other modules' schedules run."""
    (tmp_path / 'typo_schedules.py').write_text(
        'from kale import task\n\n\n'
        'class Typo(task.Task):\n'
        "    schedule = '0 25 * * *'\n\n"
        '    def run_task(self):\n'
        '        pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    found = find_schedules(config(TASK_MODULES=('typo_schedules', 'tests.schedule_tasks')))
    assert [s.name for s in found] == ['tests.schedule_tasks.EveryFiveSeconds',
                                       'tests.schedule_tasks.NightlyReport']
    [broken] = found.broken
    assert (broken.name, broken.error) == (
        'typo_schedules', "TASK_MODULES entry 'typo_schedules' cannot be imported: "
                          "TaskDefinitionError: task typo_schedules.Typo: schedule '0 25 * * *' "
                          'is not a valid cron expression: Bad hour (its schedules do not run)')


def test_a_class_that_says_schedule_none_has_no_schedule(tmp_path, monkeypatch):
    (tmp_path / 'unscheduled.py').write_text(
        'from tests.schedule_tasks import EveryFiveSeconds\n\n\n'
        'class Manual(EveryFiveSeconds):\n'
        '    schedule = None\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    found = find_schedules(config(TASK_MODULES=('unscheduled',)))
    assert (len(found), found.broken) == (0, ())


def test_a_schedule_defined_twice_is_broken():
    found = find_schedules(config(TASK_MODULES=('tests.schedule_tasks',), SCHEDULES={
        'tests.schedule_tasks.NightlyReport': {'task': 'tests.schedule_tasks.Tick',
                                               'schedule': 5}}))
    assert [s.name for s in found] == ['tests.schedule_tasks.EveryFiveSeconds']
    [broken] = found.broken
    assert broken.error.startswith("schedule 'tests.schedule_tasks.NightlyReport' is defined "
                                   'twice')


def test_a_bad_schedules_setting_is_one_line():
    from kale.exceptions import ImproperlyConfigured
    with pytest.raises(ImproperlyConfigured, match='setting SCHEDULES must be a dict of schedule '
                                                   'names to dicts'):
        config(SCHEDULES=[{'task': 'x'}])


# --- the scheduler ---------------------------------------------------------------------------

class Published:
    """Stands in for the publisher: what was published, in order."""

    def __init__(self, clock, fail=0):
        self.clock = clock
        self.calls = []
        self.fail = fail

    def queue_of(self, task_class, queue_name=None):
        from kale.publisher import task_queue
        from kale.queue_config import build_queue_config
        return task_queue(task_class, build_queue_config(settings.config), queue_name)

    def publish_batch(self, task_class, app_data, calls, labels=None, queue_name=None,
                      group_id=None, task_ids=None):
        if self.fail:
            self.fail -= 1
            raise RuntimeError('SQS said no')
        self.calls.append((labels['kale.schedule'], task_ids[0], self.clock.time()))
        return list(task_ids)


@pytest.fixture
def state(tmp_path):
    store = RecordStore('sqlite:///%s' % (tmp_path / 'records.db'), settings.config)
    yield store.schedules
    store.dispose()


def schedulers(state, clock, schedule, *holders, lease_sec=15):
    published = Published(clock)
    return published, [Scheduler(Schedules((schedule,), True), state, lease_sec,
                                 publisher=published, clock=clock, holder=holder)
                       for holder in holders]




def ticks_of(published, name='s'):
    return [task_id for schedule, task_id, _ in published.calls if schedule == name]


def test_the_leader_publishes_each_tick_at_its_time(state):
    clock = FakeClock()
    start = clock.time()
    every = Schedule('s', st.Tick, 60)
    published, [scheduler] = schedulers(state, clock, every, 'a')
    run_until(clock, start + 600, scheduler)
    expected = every.ticks_between(start, start + 600, 100)
    assert len(expected) == 10
    assert ticks_of(published) == [tick_id('s', t) for t in expected]
    assert all(when - tick == 0 for (_, _, when), tick in zip(published.calls, expected, strict=True))
    row = state.progress()['s']
    assert (row.last_tick, row.last_task_id) == (expected[-1], tick_id('s', expected[-1]))


def test_a_cron_schedule_over_a_daylight_saving_change(state):
    clock = FakeClock(at(2026, 3, 27, 12) - FakeClock.EPOCH)
    nightly = Schedule('s', st.Tick, '30 2 * * *', tz='Europe/Paris')
    published, [scheduler] = schedulers(state, clock, nightly, 'a', lease_sec=3600)
    run_until(clock, at(2026, 3, 31, 12), scheduler)
    assert [local(when, PARIS) for _, _, when in published.calls] == [
        '2026-03-28T02:30:00+01:00', '2026-03-29T03:00:00+02:00',
        '2026-03-30T02:30:00+02:00', '2026-03-31T02:30:00+02:00']


@pytest.mark.parametrize('catch_up, published_after_outage', [
    ('all', [2, 3, 4]), ('last', [4]), ('none', [])])
def test_catch_up_after_a_three_tick_outage(state, catch_up, published_after_outage):
    """A scheduler publishes tick 1 and stops; ticks 2, 3 and 4 come while
    none runs; the next one starts between ticks 4 and 5."""
    clock = FakeClock()
    every = Schedule('s', st.Tick, 60, catch_up=catch_up)
    first = every.next_after(clock.time())
    ticks = [first + 60 * n for n in range(6)]               # ticks[1] is tick 1
    published, [before] = schedulers(state, clock, every, 'before')
    run_until(clock, ticks[1] + 1, before)
    assert ticks_of(published) == [tick_id('s', ticks[0]), tick_id('s', ticks[1])]
    clock.now += ticks[4] + 20 - clock.time()                 # the outage
    published.calls.clear()
    _, [after] = schedulers(state, clock, every, 'after')
    after.publisher = published
    run_until(clock, ticks[5] + 1, after)
    assert ticks_of(published) == [tick_id('s', ticks[n]) for n in published_after_outage] + [
        tick_id('s', ticks[5])]
    assert published.calls[-1][2] == ticks[5]                 # then on time again


def test_catch_up_all_publishes_at_most_the_latest_hundred(state):
    clock = FakeClock()
    every = Schedule('s', st.Tick, 60, catch_up='all')
    published, [before] = schedulers(state, clock, every, 'before')
    run_until(clock, clock.time() + 1, before)
    clock.now += 150 * 60
    _, [after] = schedulers(state, clock, every, 'after')
    after.publisher = published
    after.step()
    assert len(published.calls) == CATCH_UP_ALL_MAX
    assert published.calls[-1][1] == tick_id('s', every.ticks_between(0, clock.time(), 1)[0])


def test_a_new_schedule_starts_with_its_next_tick(state):
    clock = FakeClock()
    every = Schedule('s', st.Tick, 60, catch_up='all')
    published, [scheduler] = schedulers(state, clock, every, 'a')
    clock.now -= 3600                       # its ticks before this scheduler: none is due
    first = every.next_after(clock.time() + 3600)
    clock.now += 3600
    run_until(clock, first - 0.5, scheduler)
    assert published.calls == []
    run_until(clock, first, scheduler)
    assert ticks_of(published) == [tick_id('s', first)]


def test_two_schedulers_one_leads_and_the_other_takes_over_within_the_lease(state):
    """a leads; b follows; a stops renewing (dies) mid-lease: b leads within
    SCHEDULER_LEASE_SEC, and every tick is published once, none twice."""
    clock = FakeClock()
    start = clock.time()
    every = Schedule('s', st.Tick, 5, catch_up='all')
    published, [a, b] = schedulers(state, clock, every, 'a', 'b', lease_sec=15)
    run_until(clock, start + 62, a, b)
    assert a.leading and not b.leading
    assert [holder for holder in ('a', 'b') if state.lease().holder == holder] == ['a']
    died = clock.time()
    run_until(clock, start + 200, b)                          # a is gone: only b steps
    assert b.leading
    taken = state.lease().acquired_at
    assert died < taken <= died + 15
    expected = [tick_id('s', t) for t in every.ticks_between(start, start + 200, 1000)]
    assert ticks_of(published) == expected                    # none lost, none doubled


def test_a_leader_that_lost_its_lease_publishes_nothing_more(state):
    """a leads, then stalls past its lease; b takes over. a wakes: its
    renewal fails, and a tick it still thought due is not published twice."""
    clock = FakeClock()
    every = Schedule('s', st.Tick, 5, catch_up='all')
    published, [a, b] = schedulers(state, clock, every, 'a', 'b', lease_sec=4)
    run_until(clock, clock.time() + 20, a, b)
    assert a.leading
    clock.now += 10                                           # a stalls
    run_until(clock, clock.time() + 12, b)
    assert b.leading
    a.step()
    assert not a.leading
    assert len(ticks_of(published)) == len(set(ticks_of(published)))
    assert not state.claim('s', 'a', every.next_after(clock.time()), 'x', clock.time())


def test_a_failed_publish_is_given_back_and_published_at_the_next_try(state):
    clock = FakeClock()
    every = Schedule('s', st.Tick, 60)
    published, [scheduler] = schedulers(state, clock, every, 'a')
    published.fail = 1
    tick = every.next_after(clock.time())
    run_until(clock, tick + 5, scheduler)
    assert ticks_of(published) == [tick_id('s', tick)]
    assert published.calls[0][2] == tick + 1                  # tried again a second later


def test_a_stopping_leader_gives_its_lease_up(state):
    clock = FakeClock()
    every = Schedule('s', st.Tick, 60)
    waits = []

    def wait(seconds):
        waits.append(seconds)
        clock.advance(seconds)
        return len(waits) >= 3                                # then stopped

    scheduler = Scheduler(Schedules((every,), True), state, 15, publisher=Published(clock),
                          clock=clock, holder='a', wait=wait)
    scheduler.run()
    assert state.lease().expires_at <= clock.time()
    _, [other] = schedulers(state, clock, every, 'b')
    other.step()
    assert other.leading
