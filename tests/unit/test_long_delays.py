"""Long delays and ETAs (kale.delays): a task due later than SQS's 15-minute
delay carries its signed due time and is sent on, unrun, each time it
arrives early, until it runs on time; the replay window still holds; its
record says ``scheduled`` with its due time; it can be cancelled while it
waits. Time moves on a clock the tests move (the transport's, the
publisher's and the workers' one ShiftedClock), never by sleeping."""
from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import time

import pytest

from kale import outbox, records, workflow
from kale.app import default_app
from kale.codec.pipeline import DUE_AT
from kale.conf import settings
from kale.exceptions import DecodeError, InvalidDelayError, InvalidFlowError
from kale.message import Message
from kale.records.queries import TaskFilter
from kale.store.record import iso
from kale.worker import Worker
from tests import tasks
from tests import workflow_tasks as wt
from tests.support.clock import ShiftedClock

QUEUE = 'tq-default'
UTC = datetime.timezone.utc


@pytest.fixture
def timeline():
    """A memory broker on a ShiftedClock, which the publisher (Task.publish
    sends through it) and each worker read too; DueTask notes its runs by it."""
    from kale import publisher
    from kale.broker import Broker
    from kale.queue_config import build_queue_config
    from kale.transport.memory import MemoryTransport
    clock = ShiftedClock()
    broker = Broker(MemoryTransport(clock=clock), build_queue_config(settings.config), config=settings.config)
    previous = publisher.set_publisher(publisher.Publisher(broker, clock=clock))
    tasks.DueTask.clock, tasks.DueTask.runs = clock, []
    yield broker, clock
    publisher.set_publisher(previous)


def waiting_copies(broker):
    """The messages of the default queue, as the memory transport holds them."""
    found = broker.transport._queues.get(broker.sqs_name(broker.queues['default']))
    return list(found.messages.values()) if found is not None else []


def opened(broker, stored):
    """A waiting message's verified envelope."""
    return default_app().codec.open(stored.body, broker.sqs_name(broker.queues['default']))


def next_arrival(broker, clock):
    """Move the clock to when the default queue's next message becomes visible
    (SQS delivers it to a worker waiting on the queue then)."""
    visible_at = min(stored.visible_at for stored in waiting_copies(broker))
    clock.offset += max(0.0, visible_at - clock.monotonic()) + 0.001


def run_worker(broker, clock, queue='default'):
    """A new burst worker on the clock (each call is a restart): it runs what
    is due, sends on what arrived early, and does not wait for those."""
    worker = Worker(queue_names=[queue], burst=True, broker=broker, clock=clock)
    assert worker.run() == 0
    return worker


def run_until_it_ran(broker, clock, due_at, max_arrivals=10):
    """Deliver the task at each of its arrivals until it runs; how many
    arrivals it took. Asserts it never runs before its due time."""
    for arrival in range(1, max_arrivals + 1):
        next_arrival(broker, clock)
        run_worker(broker, clock)
        if tasks.DueTask.runs:
            return arrival
        assert clock.time() < due_at              # sent on only while early
        assert len(waiting_copies(broker)) == 1    # one copy waits: never lost, never doubled
    raise AssertionError('the task did not run in %d arrivals' % max_arrivals)


def timed(call, *args):
    """``call(*args)`` and the real seconds it took: a run on the shifted
    clock comes as long after the arrival that brought it as the workers
    take to get to it (on a loaded machine, seconds)."""
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


def sends(broker):
    requests = broker.transport.requests
    return requests['SendMessage'] + requests['SendMessageBatch']


# --- publishing ------------------------------------------------------------------------

def test_a_wait_past_15_minutes_is_sqs_longest_delay_and_a_signed_due_time(timeline):
    broker, clock = timeline
    now, sent = clock.time(), clock.monotonic()
    tasks.DueTask.publish(None, delay_sec=2400)
    later, sent_by = clock.time(), clock.monotonic()
    [stored] = waiting_copies(broker)
    assert sent + 900 <= stored.visible_at <= sent_by + 900
    envelope = opened(broker, stored)
    # (2400 s from its publish, between those clock reads; the envelope keeps milliseconds)
    assert now + 2400 - 0.001 <= envelope.due_at <= later + 2400 + 0.001


def test_a_short_wait_is_sqs_own_delay_and_carries_no_due_time(timeline, monkeypatch):
    broker, clock = timeline
    # The clock stands still for these publishes, so each delay is read
    # exactly however long they take (the ETA's 0.2 s was one pause from 30).
    frozen = clock.monotonic(), clock.time()
    monkeypatch.setattr(clock, 'monotonic', lambda: frozen[0])
    monkeypatch.setattr(clock, 'time', lambda: frozen[1])
    tasks.DueTask.publish(None, delay_sec=900)
    tasks.DueTask.publish(None, eta=datetime.datetime.fromtimestamp(clock.time() + 30.2, UTC))
    tasks.DueTask.publish(None, eta=datetime.datetime(2001, 1, 1, tzinfo=UTC))   # past: now
    delays = sorted(round(stored.visible_at - clock.monotonic()) for stored in
                    waiting_copies(broker))
    assert delays == [0, 31, 900]          # an ETA within 15 minutes: rounded up
    assert all(DUE_AT not in opened(broker, stored).headers
               for stored in waiting_copies(broker))


@pytest.mark.parametrize('options, refused', [
    ({'delay_sec': 366 * 86400}, 'task tests.tasks.DueTask: delay_sec must be a number of '
                                 'seconds within 0..31536000 (365 days), got 31622400'),
    ({'eta': datetime.datetime(2030, 1, 1)}, 'task tests.tasks.DueTask: eta must be a '
                                             'timezone-aware datetime'),
    ({'eta': '2030-01-01T00:00:00Z'}, 'eta must be a timezone-aware datetime'),
    ({'delay_sec': 60, 'eta': datetime.datetime(2030, 1, 1, tzinfo=UTC)},
     'give delay_sec or eta, not both'),
])
def test_a_wait_that_cannot_be_is_refused_in_one_line(timeline, options, refused):
    with pytest.raises(InvalidDelayError) as raised:
        tasks.DueTask.publish(None, **options)
    assert refused in str(raised.value) and '\n' not in str(raised.value)
    assert waiting_copies(timeline[0]) == []


def test_an_eta_more_than_365_days_away_is_refused(timeline):
    eta = datetime.datetime.fromtimestamp(timeline[1].time() + 366 * 86400, UTC)
    with pytest.raises(InvalidDelayError, match='eta .* is more than 365 days away'):
        tasks.DueTask.publish(None, eta=eta)


def test_a_fifo_queue_refuses_a_long_wait_as_any_delay(memory_broker):
    eta = datetime.datetime.now(UTC) + datetime.timedelta(hours=2)
    with pytest.raises(InvalidDelayError, match="queue 'ordered' is a FIFO queue, which cannot "
                                                'delay a message; got eta='):
        tasks.OrderedTask.publish(None, 'x', group_id='g', eta=eta)
    with pytest.raises(InvalidDelayError, match='got delay_sec=7200'):
        tasks.OrderedTask.publish(None, 'x', group_id='g', delay_sec=7200)


def run(coroutine):
    """``asyncio.run`` on a thread of its own: a session fixture of this
    process (Playwright's sync API) may hold an event loop on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_publish_batch_and_apublish_take_the_wait_too(timeline):
    broker, clock = timeline
    started = clock.time()
    tasks.DueTask.publish_batch(None, [((1,), {}), ((2,), {})], delay_sec=86400)
    eta = datetime.datetime.fromtimestamp(clock.time() + 7200, UTC)
    run(tasks.DueTask.apublish(None, 3, eta=eta))
    run(tasks.DueTask.with_options(queue='default').apublish_batch(None, [((4,), {})], eta=eta))
    dues = sorted(opened(broker, stored).due_at - clock.time()
                  for stored in waiting_copies(broker))
    # (each due time is now less the seconds spent since its publish)
    assert dues == pytest.approx([7200, 7200, 86400, 86400], abs=1 + clock.time() - started)


# --- the replay window ----------------------------------------------------------------

def sealed(published_at, due_at):
    message = Message('t-window', 'tests.tasks.DueTask', published_at=published_at,
                      due_at=due_at)
    return default_app().codec.encode(message, QUEUE).body


def test_the_replay_window_counts_from_15_minutes_before_the_due_time():
    import time
    now = time.time()
    with settings.override(MESSAGE_MAX_AGE_SEC=3600):
        codec = default_app().codec
        # Waiting for a year, published long before the window: never expired while it waits.
        assert codec.open(sealed(now - 30 * 86400, now + 300 * 86400), QUEUE).due_at > now
        # Due a little while ago: within the window, counted from its due time less 900 s.
        assert codec.open(sealed(now - 30 * 86400, now - 2000), QUEUE).due_at < now
        # Due longer ago than the window: refused, as an old body is.
        with pytest.raises(DecodeError) as refused:
            codec.open(sealed(now - 30 * 86400, now - 3600), QUEUE)
        assert refused.value.reason == DecodeError.EXPIRED
        assert 'due 3600 s ago' in str(refused.value)
        # Without a due time, the publish time alone counts, as before.
        with pytest.raises(DecodeError, match='published'):
            codec.open(sealed(now - 4000, 0.0), QUEUE)


# --- on time, through early arrivals -------------------------------------------------------

@pytest.mark.real_time("a run comes the workers' real time after the arrival that brought it")
@pytest.mark.usefixtures('pool')
def test_a_40_minute_delay_runs_on_time_after_arriving_early_twice(timeline):
    broker, clock = timeline
    due_at = clock.time() + 2400
    task_id = tasks.DueTask.publish(None, 'forty', delay_sec=2400)
    due_by = clock.time() + 2400
    arrivals, took = timed(run_until_it_ran, broker, clock, due_at)
    assert arrivals == 3                                      # at 15 and 30 minutes: sent on
    [(ran_id, ran_at, retry_num, failure_num, carried_due)] = tasks.DueTask.runs
    # On time: at the arrival its last delay (whole seconds) brought, and
    # the workers' time, not an SQS delay (15 minutes) later.
    assert ran_id == task_id and due_at <= ran_at <= due_by + 2 + took
    assert (retry_num, failure_num) == (0, 0)                 # no arrival counted as a retry
    assert due_at - 0.001 <= carried_due <= due_by + 0.001     # its publish's, to the millisecond
    assert waiting_copies(broker) == []
    # The publish, then one send and one delete per early arrival.
    assert sends(broker) == 3
    assert broker.transport.requests['DeleteMessageBatch'] == 3


@pytest.mark.real_time("a run comes the workers' real time after the arrival that brought it")
@pytest.mark.usefixtures('pool')
def test_an_eta_runs_on_time(timeline):
    broker, clock = timeline
    eta = datetime.datetime.fromtimestamp(clock.time() + 3000.4, UTC)
    tasks.DueTask.publish(None, 'eta', eta=eta)
    arrivals, took = timed(run_until_it_ran, broker, clock, eta.timestamp())
    assert arrivals == 4                                      # 900 + 900 + 900 + 300.4
    [(_, ran_at, retry_num, failure_num, _)] = tasks.DueTask.runs
    assert eta.timestamp() <= ran_at <= eta.timestamp() + 2 + took
    assert (retry_num, failure_num) == (0, 0)


@pytest.mark.real_time("a run comes the workers' real time after the arrival that brought it")
@pytest.mark.usefixtures('pool')
def test_a_worker_that_dies_holding_an_early_copy_loses_nothing_and_runs_nothing_early(
        timeline):
    broker, clock = timeline
    due_at = clock.time() + 2400
    tasks.DueTask.publish(None, delay_sec=2400)
    due_by = clock.time() + 2400
    next_arrival(broker, clock)
    queue = broker.queues['default']
    assert len(broker.receive(queue)) == 1      # a worker received it, then died
    clock.offset += queue.visibility_timeout_sec + 1
    run_worker(broker, clock)                   # a new worker: sent on, not run
    assert tasks.DueTask.runs == [] and len(waiting_copies(broker)) == 1
    copy = opened(broker, waiting_copies(broker)[0])
    assert copy.unsettled == 1                  # the death is remembered, as a release's is
    _, took = timed(run_until_it_ran, broker, clock, due_at)
    [(_, ran_at, retry_num, _, _)] = tasks.DueTask.runs
    assert due_at <= ran_at <= due_by + 2 + took and retry_num == 0


def test_a_burst_worker_does_not_wait_for_a_task_it_sent_on_but_waits_for_others(timeline):
    """A burst worker ends once the only delayed messages left are the tasks
    it sent on (they may wait for days); a delayed task it knows nothing of
    keeps it when the records say it is due within 15 minutes, and is left
    behind, said in one line, when there are no records to ask."""
    broker, clock = timeline
    tasks.DueTask.publish(None, delay_sec=5 * 86400)
    next_arrival(broker, clock)
    worker = run_worker(broker, clock)           # returns: the copy waits four days more
    assert worker.stats['waiting'] == 1 and len(waiting_copies(broker)) == 1
    counts = {broker.queues['default']: broker.counts(broker.queues['default'])}
    assert counts[broker.queues['default']].delayed == 1
    end = Worker(queue_names=['default'], broker=broker, clock=clock).burst_end
    assert not end.drained(counts, lambda queue: 0, due_later={})   # the records know no later
    assert end.drained(counts, lambda queue: 0, due_later={'default': (1, clock.time() + 9e4)})
    assert end.drained(counts, lambda queue: 0)                     # no records: left behind


def test_a_burst_worker_leaves_a_task_due_in_an_hour_at_once(timeline, records_url, caplog):
    """With records on, a burst left with a task due in an hour exits at once
    (SQS would show it within 15 minutes, only to have it sent on), saying
    what it leaves; a task due in ten minutes keeps it."""
    broker, clock = timeline
    later = tasks.DueTask.publish(None, delay_sec=3600)
    with caplog.at_level('INFO', logger='kale.worker'):
        worker = Worker(queue_names=['default'], burst=True, broker=broker, clock=clock)
        assert worker.drained()
    [line] = [r.getMessage() for r in caplog.records if 'leaving delayed' in r.getMessage()]
    assert '1 on default due later (the next at ' in line, line
    assert records.get(later).status == 'scheduled'
    tasks.DueTask.publish(None, delay_sec=600)
    assert not Worker(queue_names=['default'], burst=True, broker=broker,
                      clock=clock).drained()


def test_without_records_a_burst_leaves_what_it_cannot_date_and_says_so(timeline, caplog):
    broker, clock = timeline
    tasks.DueTask.publish(None, delay_sec=600)
    with caplog.at_level('INFO', logger='kale.worker'):
        assert Worker(queue_names=['default'], burst=True, broker=broker, clock=clock).drained()
    [line] = [r.getMessage() for r in caplog.records if 'leaving delayed' in r.getMessage()]
    assert '1 on default whose due time SQS does not say; with RECORDS_URL set, a burst ' \
           'waits for those due within 15 minutes' in line, line


# --- records, cancels ----------------------------------------------------------------------

def test_records_show_a_waiting_task_as_scheduled_with_its_due_time(timeline, records_url,
                                                                   capsys):
    from kale.cli import main
    broker, clock = timeline
    due_at = clock.time() + 2400
    task_id = tasks.DueTask.publish(None, delay_sec=2400)
    due_by = clock.time() + 2400
    record = records.get(task_id)
    assert record.status == 'scheduled' and due_at - 0.001 <= record.next_attempt_at <= due_by + 0.001
    due = iso(record.next_attempt_at)
    assert record.as_json()['next_attempt_at'] == due             # the API's task JSON
    waiting = [r.id for r in records.queries().iterate(TaskFilter(statuses=('scheduled',)))]
    assert waiting == [task_id]
    assert main(['tasks', 'list', '--status', 'scheduled']) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:7] == ['ID', 'TASK', 'QUEUE', 'STATUS', 'ATTEMPTS', 'PUBLISHED', 'DUE']
    assert row.split()[0] == task_id and due in row
    next_arrival(broker, clock)
    run_worker(broker, clock)                    # early: sent on, its record unchanged
    record = records.get(task_id)
    assert record.status == 'scheduled' and record.attempts == 0
    assert due_at - 0.001 <= record.next_attempt_at <= due_by + 0.001
    run_until_it_ran(broker, clock, due_at)
    record = records.get(task_id)
    assert record.status == 'succeeded' and record.attempts == 1


@pytest.mark.usefixtures('pool')
def test_a_cancelled_waiting_task_is_dropped_at_its_next_arrival(timeline, records_url):
    broker, clock = timeline
    task_id = tasks.DueTask.publish(None, delay_sec=5 * 86400)
    next_arrival(broker, clock)
    run_worker(broker, clock)                    # sent on once
    assert len(waiting_copies(broker)) == 1
    assert records.cancel(task_id).status == 'cancelled'
    next_arrival(broker, clock)
    worker = run_worker(broker, clock)
    assert waiting_copies(broker) == [] and tasks.DueTask.runs == []
    assert worker.stats['cancelled'] == 1 and records.get(task_id).status == 'cancelled'


def test_a_waiting_record_outlives_the_queued_ttl_until_its_due_time(records_url):
    import time
    store = records.store()
    now, day = time.time(), 86400
    rows = [{'id': 'due-later', 'next_attempt_at': now + 100 * day},
            {'id': 'due-long-ago', 'next_attempt_at': now - 20 * day}]
    store.write([dict(row, task='t.T', queue='default', attempts=0, status='scheduled',
                      published_at=now - 20 * day, updated_at=now - 15 * day)
                 for row in rows], [], [])
    assert store.purge_expired(None, None, now=now, queued_ttl=14 * day) == 1
    assert records.get('due-later').status == 'scheduled' and records.get('due-long-ago') is None


# --- the outbox and workflows ----------------------------------------------------------------

@pytest.mark.real_time("a run comes the workers' real time after the arrival that brought it")
def test_the_outbox_sends_a_long_wait_as_sqs_longest_delay_with_its_due_time(
        timeline, records_url):
    from kale.outbox.relay import Relay, with_records
    from kale.store.sql.outbox_schema import open_database
    broker, clock = timeline
    engine = open_database(records_url)
    outbox.init(engine)
    due_at = clock.time() + 7200
    with engine.begin() as conn:
        task_id = outbox.publish(conn, tasks.DueTask, None, 'boxed', delay_sec=7200)
    sent, due_by = clock.monotonic(), clock.time() + 7200
    assert Relay(engine, broker, config=settings.config,
                 **with_records(default_app())).send_round() == 1
    [stored] = waiting_copies(broker)
    assert sent + 900 <= stored.visible_at <= clock.monotonic() + 900
    assert records.get(task_id).status == 'scheduled'
    _, took = timed(run_until_it_ran, broker, clock, due_at)
    [(ran_id, ran_at, _, _, _)] = tasks.DueTask.runs
    assert ran_id == task_id and due_at <= ran_at <= due_by + 2 + took
    engine.dispose()


@pytest.mark.real_time("a run comes the workers' real time after the arrival that brought it")
def test_a_workflow_node_waits_its_delay_after_its_inputs(timeline, records_url):
    broker, clock = timeline
    first = wt.Add.with_options(queue='high').s(1, 2)
    later = tasks.DueTask.s().set(delay_sec=3600)
    wf = workflow.submit(workflow.chain(first, later))
    ready_at = clock.time()
    run_worker(broker, clock, 'high')            # Add runs; DueTask is published to wait an hour
    published_by = clock.time()
    assert waiting_copies(broker) and not tasks.DueTask.runs
    assert records.get(later.task_id).status == 'scheduled'
    _, took = timed(run_until_it_ran, broker, clock, ready_at + 3600)
    [(ran_id, ran_at, _, _, _)] = tasks.DueTask.runs
    assert ran_id == later.task_id and ready_at + 3600 <= ran_at <= published_by + 3600 + 3 + took
    assert wf.status() == 'succeeded'


def test_a_workflow_refuses_a_node_wait_that_cannot_be(records_url):
    with pytest.raises(InvalidFlowError, match='workflow: node .*delay_sec must be'):
        workflow.submit(workflow.chain(wt.Add.s(1, 2), tasks.DueTask.s().set(delay_sec=-5)))
    with pytest.raises(InvalidFlowError, match='eta must be a timezone-aware datetime'):
        workflow.submit(tasks.DueTask.s().set(eta=datetime.datetime(2030, 1, 1)))
