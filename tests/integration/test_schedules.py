"""Periodic tasks end to end in this process, with task records on SQLite
and PostgreSQL and the in-memory broker: ticks published under their ids
and run by a worker, schedulers racing for the lease and for a tick, a
leader handing over to another, ``kale schedules``, ``kale scheduler``'s
refusals, ``/api/schedules`` and ``kale worker --scheduler``'s scheduler."""
import json
import logging
import threading

import pytest

from kale import records
from kale.app import default_app
from kale.cli import main
from kale.conf import settings
from kale.events import process_identity
from kale.schedules.scheduler import Scheduler, SchedulerHooks, make_scheduler
from kale.schedules.spec import SCHEDULE_LABEL, tick_id
from kale.store.sql.records import RecordStore
from kale.web import create_app
from tests.support.clock import FakeClock
from tests.support.records import read_records
from tests.support.schedules import run_until
from tests.support.web import api_client
from tests.support.work import work

TICKS = {'ticks': {'task': 'tests.schedule_tasks.Tick', 'schedule': 60, 'args': ['hello'],
                   'catch_up': 'all'}}


@pytest.fixture
def scheduled(monkeypatch, settings_env):
    monkeypatch.setenv('KALE_TEST_SCHEDULES', json.dumps(TICKS))
    settings_env()


def queued(broker, queue='default'):
    name = broker.prefix + queue
    return broker.transport.counts(name).total if broker.transport.queue_exists(name) else 0




def test_ticks_are_published_under_their_ids_and_run(any_records_url, memory_broker, scheduled,
                                                      record):
    clock = FakeClock()
    start = clock.time()
    scheduler = make_scheduler(default_app(), clock=clock, holder='one')
    run_until(clock, start + 300, scheduler)
    schedule = default_app().schedules.get('ticks')
    ticks = schedule.ticks_between(start, start + 300, 100)
    ids = [tick_id('ticks', tick) for tick in ticks]
    assert [task_id for _, _, task_id in scheduler.published] == ids and len(ids) == 5
    assert queued(memory_broker) == 5
    work(memory_broker)
    assert sorted(r[1] for r in read_records(record)) == sorted(ids)
    assert all(r[2] == 'hello' for r in read_records(record))
    for task_id in ids:
        found = records.get(task_id)
        assert (found.status, found.task, found.labels) == (
            'succeeded', 'tests.schedule_tasks.Tick', {SCHEDULE_LABEL: 'ticks'})


#: One good schedule and two broken ones.
WITH_BROKEN = {**TICKS, 'typo': {'task': 'tests.schedule_tasks.Tick', 'schedule': '61 * * * *'},
               'zone': {'task': 'tests.schedule_tasks.Tick', 'schedule': 60,
                        'tz': 'Mars/Olympus'}}
TYPO = "schedule 'typo': schedule '61 * * * *' is not a valid cron expression: Bad minute"
ZONE = ("schedule 'zone': tz 'Mars/Olympus' is not a known IANA time zone name (e.g. "
        "'Europe/Paris'; pip install tzdata where the system has no zone database)")


def test_broken_schedules_stop_only_themselves_and_are_each_reported(
        any_records_url, memory_broker, monkeypatch, settings_env, caplog, capsys, record):
    monkeypatch.setenv('KALE_TEST_SCHEDULES', json.dumps(WITH_BROKEN))
    settings_env()
    clock = FakeClock()
    start = clock.time()

    def wait(seconds):          # the scheduler's sleeps move the clock, for two minutes
        clock.now += seconds
        return clock.time() > start + 125

    with caplog.at_level(logging.INFO, logger='kale.schedules'):
        scheduler = make_scheduler(default_app(), clock=clock, holder='one', wait=wait)
        scheduler.run()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ['scheduler one: broken, not run (the other schedules run): ' + TYPO,
                      'scheduler one: broken, not run (the other schedules run): ' + ZONE]
    ticks = default_app().schedules.get('ticks').ticks_between(start, start + 125, 10)
    assert [(name, task_id) for name, _, task_id in scheduler.published] == [
        ('ticks', tick_id('ticks', tick)) for tick in ticks] and len(ticks) == 2
    work(memory_broker)
    assert sorted(r[1] for r in read_records(record)) == sorted(tick_id('ticks', t) for t in ticks)
    default_app().recorder.flush(timeout=60)
    assert main(['schedules', 'list']) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ['ticks', 'tests.schedule_tasks.Tick']
    assert out[2:4] == ['BROKEN (not run): ' + TYPO, 'BROKEN (not run): ' + ZONE]
    assert main(['schedules', 'list', '--json']) == 1
    answer = json.loads(capsys.readouterr().out)
    assert [row['name'] for row in answer['schedules']] == ['ticks']
    assert answer['broken'] == [
        {'name': 'typo', 'task': 'tests.schedule_tasks.Tick', 'error': TYPO},
        {'name': 'zone', 'task': 'tests.schedule_tasks.Tick', 'error': ZONE}]
    assert main(['schedules', 'run', 'typo']) == 1
    assert capsys.readouterr().err.strip() == 'kale: error: ' + TYPO


def test_a_scheduler_whose_schedules_are_all_broken_says_each_in_one_line(
        records_url, monkeypatch, settings_env, capsys):
    monkeypatch.setenv('KALE_TEST_SCHEDULES', json.dumps(
        {name: WITH_BROKEN[name] for name in ('typo', 'zone')}))
    settings_env()
    assert main(['scheduler']) == 1
    assert capsys.readouterr().err.strip() == (
        'kale: error: no schedule can run: 2 broken: %s; %s' % (TYPO, ZONE))


def test_schedulers_racing_get_one_lease_and_claim_a_tick_once(any_records_url):
    stores = [RecordStore(any_records_url, settings.config) for _ in range(6)]
    states = [store.schedules for store in stores]
    now = 1_800_000_000.0
    states[0].start([('ticks', 'tests.schedule_tasks.Tick')], now)
    barrier = threading.Barrier(len(states))
    leads, claims = [], []

    def race(number, state):
        barrier.wait()
        leads.append(state.acquire('holder-%d' % number, now, 10.0)[0])
        barrier.wait()
        holder = states[0].lease().holder
        claims.append(state.claim('ticks', holder, now + 60, tick_id('ticks', now + 60), now))

    threads = [threading.Thread(target=race, args=pair) for pair in enumerate(states)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert sorted(leads) == [False] * 5 + [True]
        assert sorted(claims) == [False] * 5 + [True]
        assert states[0].progress()['ticks'].last_tick == now + 60
    finally:
        for store in stores:
            store.dispose()


def test_a_leader_that_stops_renewing_is_replaced_and_no_tick_is_lost_or_doubled(
        any_records_url, memory_broker, scheduled):
    """Two schedulers, each on a store of its own, share one records
    database: the first leads; it stops (a process killed mid-lease); the
    second leads within SCHEDULER_LEASE_SEC and publishes what came meanwhile."""
    clock = FakeClock()
    start = clock.time()
    stores = [RecordStore(any_records_url, settings.config) for _ in range(2)]
    schedules = default_app().schedules
    first, second = [Scheduler(schedules, store.schedules, 15, default_app().publisher,
                               clock=clock, holder=holder)
                     for store, holder in zip(stores, ('first', 'second'), strict=True)]
    try:
        run_until(clock, start + 130, first, second)
        assert first.leading and not second.leading and len(first.published) == 2
        died = clock.time()
        run_until(clock, start + 600, second)
        assert second.leading
        assert died < stores[1].schedules.lease().acquired_at <= died + 15
    finally:
        for store in stores:
            store.dispose()
    ticks = schedules.get('ticks').ticks_between(start, start + 600, 100)
    published = [task_id for _, _, task_id in [*first.published, *second.published]]
    assert published == [tick_id('ticks', tick) for tick in ticks]
    assert queued(memory_broker) == len(ticks) == 10


def test_schedules_list_shows_next_runs_last_tick_and_its_state(any_records_url, memory_broker,
                                                                scheduled, capsys):
    clock = FakeClock()
    scheduler = make_scheduler(default_app(), clock=clock, holder='lister')
    run_until(clock, clock.time() + 61, scheduler)
    default_app().recorder.flush(timeout=60)                  # the scheduler's records, written
    assert main(['schedules', 'list', '--json']) == 0
    answer = json.loads(capsys.readouterr().out)
    [row] = answer['schedules']
    assert row['name'] == 'ticks' and row['task'] == 'tests.schedule_tasks.Tick'
    assert row['schedule'] == 'every 60 s' and len(row['next_runs']) == 3
    assert row['last_task_id'] == scheduler.published[-1][2]
    assert row['last_task_status'] == 'queued'
    assert answer['leader'] is None                  # its lease is on the fake clock's time
    assert main(['schedules', 'list']) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ['NAME', 'TASK', 'SCHEDULE', 'TZ', 'NEXT', 'RUNS',
                                           'LAST', 'TICK', 'ITS', 'TASK']
    assert 'ticks' in out and '%s queued' % row['last_task_id'][:8] in out


def test_schedules_run_publishes_one_run_now(any_records_url, memory_broker, scheduled, capsys,
                                             record):
    assert main(['schedules', 'run', 'ticks']) == 0
    task_id = capsys.readouterr().out.strip()
    assert len(task_id) == 32 and queued(memory_broker) == 1
    work(memory_broker)
    assert read_records(record) == [['ran', task_id, 'hello']]
    assert records.get(task_id).labels == {SCHEDULE_LABEL: 'ticks'}
    assert main(['schedules', 'run', 'nope']) == 1
    assert "no schedule is called 'nope'" in capsys.readouterr().err


def test_the_scheduler_refuses_to_start_without_schedules_or_records(records_url, capsys,
                                                                     monkeypatch, settings_env):
    nothing = ('kale: error: no schedules: TASK_MODULES and SCHEDULES are both empty (name the '
               'modules of your task classes that say schedule = ... in TASK_MODULES, or list '
               'schedules in SCHEDULES)')
    assert main(['scheduler']) == 1
    assert capsys.readouterr().err.strip() == nothing
    assert main(['worker', '--scheduler', '--burst']) == 1
    assert capsys.readouterr().err.strip() == nothing
    monkeypatch.setenv('KALE_TEST_SCHEDULES', json.dumps(TICKS))
    monkeypatch.setenv('KALE_TEST_RECORDS_URL', '')
    settings_env()
    assert main(['scheduler']) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kale: error: the scheduler keeps its lease and each schedule's last "
                          'tick in the task records: set RECORDS_URL') and '\n' not in err


def test_the_api_lists_schedules_and_runs_one(records_url, memory_broker, scheduled):
    client = api_client(create_app(broker=lambda: memory_broker))
    answer = client.get('/api/schedules').json()
    assert [row['name'] for row in answer['schedules']] == ['ticks']
    assert answer['schedules'][0]['last_tick'] is None and answer['records'] is True
    assert answer['broken'] == []
    refused = client.post('/api/schedules/ticks/run', headers={'X-Kale-Request': ''})
    assert refused.status_code == 403 and queued(memory_broker) == 0
    ran = client.post('/api/schedules/ticks/run')
    assert ran.status_code == 200 and ran.json()['schedule'] == 'ticks'
    assert records.get(ran.json()['task_id']).status == 'queued'
    missing = client.post('/api/schedules/nope/run')
    assert missing.status_code == 404 and "no schedule is called 'nope'" in missing.json()['error']
    paths = client.get('/api/openapi.json').json()['paths']
    assert 'get' in paths['/api/schedules'] and 'post' in paths['/api/schedules/{name}/run']


def test_a_worker_runs_a_scheduler_that_leads_and_gives_its_lease_up(records_url, memory_broker,
                                                                     scheduled):
    """kale worker --scheduler: the scheduler starts with the worker (its first
    round takes the lease) and stops with it, giving the lease up."""
    hooks = SchedulerHooks()
    work(memory_broker, [hooks])
    assert hooks.scheduler is None
    lease = records.store().schedules.lease()
    assert lease.holder == process_identity()[0]
    # Given up: it ended when the worker stopped, not 3/4 of a lease after its last renewal.
    assert lease.expires_at < lease.acquired_at + settings.SCHEDULER_LEASE_SEC * 3 / 4 - 1
