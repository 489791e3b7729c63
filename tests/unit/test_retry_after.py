"""``raise Retry(after=seconds, exc=None)`` from a run: the task is retried
after that delay instead of its own, the cause is named, the retry counts
against ``max_retries`` (exhausted: a dead letter naming the cause), a delay
past SQS's 15 minutes is a long delay (its copy carries its due time), a
FIFO queue holds the message for it, and a bad ``after`` fails the run as
any exception does. Real workers on the memory transport, on every pool;
time that must pass for a long delay passes on a clock the test moves."""
from __future__ import annotations

import logging
import math
import os
import time

import pytest

import kale
from kale import codec as kale_codec
from kale import worker as kale_worker
from kale.app import App, default_app
from kale.codec.pipeline import DUE_AT
from kale.conf import settings
from kale.delays import MAX_WAIT_SEC
from kale.events import Outcome
from kale.exceptions import (
    MAX_RETRY_AFTER_SEC,
    ChildTaskError,
    InvalidRetryError,
    KaleError,
    Retry,
    TaskError,
)
from kale.message import ATTR_DEAD_LETTER_REASON
from kale.retry import PERMANENT_FAILURE_NO_RETRIES, PERMANENT_FAILURE_RETRIES_EXHAUSTED
from kale.transport import MAX_DELAY_SEC, MAX_VISIBILITY_SEC
from kale.worker.batch import Batch
from kale.worker.runner import TaskRunner, retry_decision
from tests import retry_tasks as rt
from tests.support.clock import FakeClock
from tests.support.received import QUEUE, batch_for, received_for
from tests.support.records import read_records
from tests.support.retries import run_first, run_until_it_ran, shifted_broker

#: The cause the test tasks give (a NonRetriableTaskError: only a Retry retries it).
CAUSE = 'ThrottledError: 429 Too Many Requests'


def quick_config(**settings_):
    """A configuration whose own retries wait 5 s (no jitter)."""
    return App(RETRY_DELAY_MULTIPLE_SEC=5, RETRY_DELAY_JITTER=0, **settings_).config


def run_once(task_class, *args, retry_num=0, failure_num=0, fifo=False, clock=None,
             received_at=None, isolation='none', **kwargs):
    """One run of ``task_class(*args, **kwargs)`` by a runner, as a worker's
    (on a queue configured FIFO with ``fifo``): its settlement."""
    from kale.queue_config import build_queue_config
    received = received_for(task_class, *args, retry_num=retry_num, failure_num=failure_num,
                            **kwargs)
    batch = batch_for(received)
    if fifo:
        batch = Batch(build_queue_config(settings.config)['ordered'], [received],
                      batch.received_at, QUEUE)
    if received_at is not None:
        batch.received_at = received_at
    runner = TaskRunner(config=quick_config(), clock=clock, isolation=isolation)
    opened = runner.open(batch, received)
    message = runner.read(batch, received, opened)
    return runner.run(batch, received, message, task_class, opened.envelope)


def starts(record_file, label=None):
    """(task id, time, details) of each recorded start, in order."""
    return [(r[1], float(r[3]), r[4:]) for r in read_records(record_file) if r[0] == 'start'
            and (label is None or r[4] == label)]


# --- the exception --------------------------------------------------------------------------

def test_retry_is_kales_own_exception_exported_at_the_top():
    assert kale.Retry is Retry and 'Retry' in kale.__all__
    assert issubclass(Retry, TaskError) and issubclass(Retry, KaleError)
    retry = Retry(after=30, exc=ConnectionError('reset'))
    assert (retry.after, type(retry.exc), retry.__cause__) == (30.0, ConnectionError, retry.exc)
    assert str(retry) == 'after 30 s: ConnectionError: reset'
    assert str(Retry(1.5)) == 'after 1.5 s' and Retry(0).exc is None
    assert MAX_RETRY_AFTER_SEC == MAX_WAIT_SEC          # as long as a publish may wait


@pytest.mark.parametrize('after', [-1, -0.001, math.nan, math.inf, True, '30', None,
                                   MAX_WAIT_SEC + 1])
def test_a_bad_after_is_refused_in_one_line_where_the_retry_is_made(after):
    with pytest.raises(InvalidRetryError) as refused:
        Retry(after=after)
    assert str(refused.value) == ('Retry(after=...) must be a number of seconds within '
                                  '0..31536000 (365 days), got %r' % (after,))
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, KaleError)


def test_a_cause_that_is_not_an_exception_is_refused():
    with pytest.raises(InvalidRetryError, match=r"^Retry\(exc=\.\.\.\) must be an exception or "
                                                r"None, got <class 'ValueError'>$"):
        Retry(after=5, exc=ValueError)
    assert Retry(after=MAX_WAIT_SEC).after == MAX_WAIT_SEC


def test_a_bad_after_fails_the_run_as_any_exception_does():
    settlement = run_once(rt.RetryAfterTask, -1)
    assert settlement.outcome is Outcome.RETRY
    assert settlement.reason.startswith('InvalidRetryError: Retry(after=...) must be a number')
    assert settlement.retry_delay_sec == 5          # the task's own delay


# --- the decision ---------------------------------------------------------------------------

@pytest.mark.parametrize('task_class', [rt.RetryAfterTask, rt.AsyncRetryAfterTask])
def test_the_run_chooses_its_retry_delay(task_class):
    settlement = run_once(task_class, 30)
    assert settlement.outcome is Outcome.RETRY
    assert settlement.copy.delay_sec == settlement.retry_delay_sec == 30   # not the task's 5
    assert settlement.reason == 'Retry: after 30 s: ' + CAUSE
    assert isinstance(settlement.exception, Retry)
    assert run_once(task_class, 0).copy.delay_sec == 0                    # at once
    assert run_once(task_class, 0.2, cause=False).copy.delay_sec == 1     # whole seconds, up
    assert run_once(task_class, 0.2, cause=False).reason == 'Retry: after 0.2 s'


def test_a_retry_is_asked_of_neither_is_retriable_nor_permanent_failure_reason():
    class Stubborn(rt.RetryAfterTask):
        @classmethod
        def is_retriable(cls, exc):
            return False

        @classmethod
        def permanent_failure_reason(cls, message, exc):
            return 'never'
    received = received_for(rt.RetryAfterTask, 30)
    message = TaskRunner().read(batch_for(received), received,
                                TaskRunner().open(batch_for(received), received))
    assert retry_decision(Stubborn, message, Retry(30, rt.throttled(True)), quick_config()) \
        == (None, 30)
    assert retry_decision(Stubborn, message, ValueError(), quick_config())[0] == 'never'


def test_a_retry_counts_against_max_retries():
    def decided(failure_num, max_retries=2):
        task_class = type('Limited', (rt.RetryAfterTask,), {'max_retries': max_retries})
        received = received_for(rt.RetryAfterTask, 1, failure_num=failure_num)
        message = TaskRunner().read(batch_for(received), received,
                                    TaskRunner().open(batch_for(received), received))
        return retry_decision(task_class, message, Retry(1), quick_config())[0]
    assert [decided(n) for n in range(3)] == [None, None, PERMANENT_FAILURE_RETRIES_EXHAUSTED]
    assert decided(0, max_retries=0) == PERMANENT_FAILURE_NO_RETRIES


def test_retries_used_up_dead_letter_the_task_naming_the_cause():
    settlement = run_once(rt.RetryAfterTask, 30, 99, retry_num=2, failure_num=2)
    assert settlement.outcome is Outcome.DEAD_LETTER
    reason = 'retries_exhausted: Retry: after 30 s: ' + CAUSE
    assert settlement.reason == reason
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON] == reason


def test_a_delay_past_15_minutes_is_a_long_delay_whose_copy_carries_its_due_time():
    clock = FakeClock()
    settlement = run_once(rt.RetryAfterTask, 3600, clock=clock)
    assert settlement.outcome is Outcome.RETRY
    assert settlement.copy.delay_sec == MAX_DELAY_SEC            # SQS's longest delay
    assert settlement.retry_delay_sec == 3600                    # the whole wait, logged, recorded
    copy = default_app().codec.open(settlement.copy.body, QUEUE)
    assert copy.headers[DUE_AT] == '%.3f' % (clock.time() + 3600)
    assert (copy.headers['r'], copy.headers['f']) == ('1', '1')     # a retry, counted
    short = run_once(rt.RetryAfterTask, 900, clock=clock)
    assert DUE_AT not in default_app().codec.open(short.copy.body, QUEUE).headers


def test_a_child_process_sends_back_a_retry_whose_cause_does_not_pickle():
    settlement = run_once(rt.UnpicklableCauseTask, isolation='process')
    assert settlement.outcome is Outcome.RETRY and settlement.retry_delay_sec == 30
    assert isinstance(settlement.exception, Retry)
    assert isinstance(settlement.exception.exc, ChildTaskError)
    assert settlement.reason == 'Retry: after 30 s: ChildTaskError: ValueError: carries a lock'


# --- FIFO: the message is held ---------------------------------------------------------------

def test_on_fifo_the_message_is_held_for_the_delay_even_past_15_minutes():
    clock = FakeClock()
    held = run_once(rt.OrderedRetryTask, 'a', 30, 1, fifo=True, clock=clock)
    assert (held.outcome, held.copy, held.hold_sec, held.retry_delay_sec) == \
        (Outcome.RETRY, None, 30, 30)
    assert run_once(rt.OrderedRetryTask, 'a', 3600, 1, fifo=True, clock=clock).hold_sec == 3600


def test_on_fifo_a_hold_past_sqs_12_hours_is_cut_to_them_and_said(caplog):
    clock = FakeClock()
    with caplog.at_level(logging.WARNING, 'kale.worker.runner'):
        held = run_once(rt.OrderedRetryTask, 'a', 86400, 1, fifo=True, clock=clock,
                        received_at=clock.monotonic() - 100)
    assert held.hold_sec == MAX_VISIBILITY_SEC - 60 - 100
    assert 'its retry is held 43040 s, not the 86400 s asked for: SQS keeps a received ' \
           'message invisible at most 12 hours' in caplog.text


# --- real workers, every pool ------------------------------------------------------------------

@pytest.fixture
def app(pool_app):
    """The test's app on this run's pool, whose own retries would be at once:
    a later retry comes from the Retry."""
    return pool_app.replace(RETRY_DELAY_MULTIPLE_SEC=0)


def work_on(app, queues=('default',)):
    worker = kale_worker.Worker(queue_names=list(queues), burst=True, app=app)
    assert worker.run() == 0
    return worker


@pytest.mark.parametrize('task_class', [rt.RetryAfterTask, rt.AsyncRetryAfterTask])
def test_a_worker_runs_the_task_again_after_the_delay_it_asked_for(app, record, task_class):
    task_id = app.publish(task_class, None, 1)
    worker = work_on(app)
    (first_id, first, first_num), (second_id, second, second_num) = starts(record)
    assert first_id == second_id == task_id and (first_num, second_num) == (['0'], ['1'])
    assert second - first >= 1.0
    assert worker.stats == {'retry': 1, 'succeeded': 1}


def test_a_worker_dead_letters_a_task_whose_retries_are_used_up(app, record):
    task_id = app.publish(rt.AsyncRetryAfterTask, None, 0, 99)
    worker = work_on(app)
    assert [s[0] for s in starts(record)] == [task_id] * 3        # max_retries = 2
    assert worker.stats == {'retry': 2, 'dead_letter': 1}
    queue = app.queues['default']
    [dead] = app.transport.receive(app.broker.dead_letter_name(queue), 10, 0, 30)
    assert dead.attributes[ATTR_DEAD_LETTER_REASON] == 'retries_exhausted: Retry: after 0 s: ' \
        + CAUSE


def test_a_fifo_group_waits_for_its_retry_then_goes_on_in_order(app, record):
    app.publish(rt.OrderedRetryTask, None, 'a1', 1, 1, group_id='a')
    app.publish(rt.OrderedRetryTask, None, 'a2', group_id='a')
    work_on(app, queues=('ordered',))
    ran = [r[4] for r in read_records(record) if r[0] == 'ran']
    assert ran == ['a1', 'a2']
    (_, first, _), (_, again, _) = starts(record, 'a1')
    [(_, second_task, _)] = starts(record, 'a2')
    assert again - first >= 1.0 and second_task >= again


@pytest.fixture
def timeline():
    """A memory broker on a clock the test moves (tests.support.retries)."""
    with shifted_broker() as (broker, clock):
        yield broker, clock


@pytest.mark.real_time("a run comes the workers' real time after the arrival that brought it")
@pytest.mark.usefixtures('pool')
@pytest.mark.parametrize('size', [0, 4096])
def test_a_40_minute_retry_runs_on_time_through_early_arrivals(timeline, size):
    """Its copy arrives after 15 and 30 minutes, is sent on unrun, and runs
    at its due time, as a retry; so too when its payload is kept in S3."""
    from kale.transport.payloads import MemoryPayloadStore, using_payload_store
    broker, clock = timeline
    with using_payload_store(MemoryPayloadStore('bucket')) as store, \
            settings.override(PAYLOAD_BUCKET='bucket' if size else '', PAYLOAD_OFFLOAD_BYTES=1024):
        task_id = rt.LaterTask.publish(None, 2400, os.urandom(size))
        assert len(store.keys('bucket')) == (1 if size else 0)
        asked_after = clock.time() + 2400
        assert run_first(broker, clock).stats == {'retry': 1}     # it asks for 40 minutes
        due_at = clock.time() + 2400
        started = time.monotonic()
        assert run_until_it_ran(broker, clock) == 3             # at 15, 30 and 40 minutes
        took = time.monotonic() - started       # (the run comes that much after its arrival)
    [(ran_id, ran_at, retry_num, failure_num, carried_due)] = rt.LaterTask.runs
    assert (retry_num, failure_num) == (1, 1)
    # (the run asked for 40 minutes from a moment between those two reads)
    assert asked_after - 1 <= carried_due <= due_at + 1
    assert ran_id == task_id and carried_due - 1 <= ran_at <= due_at + 2 + took


# --- the tasks guide's example -----------------------------------------------------------------------

def test_the_readmes_429_example_retries_after_the_answers_retry_after():
    """The tasks guide's SyncContact, as written but for its URL, against a local
    server answering 429 with Retry-After: 120, then 503, then 200: retried
    after 120 s, then after the task's own delay, then done, on one client."""
    from kale import message as kale_message
    from kale.transport import ReceivedMessage
    from tests.support.webhook_receiver import Receiver, Reply
    text = open(os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'how-to',
                             'tasks.md')).read()
    start = text.index('`Retry-After`, with one `httpx.AsyncClient` for every run:')
    block = text[text.index('```python\n', start) + len('```python\n'):]
    block = block[:block.index('```')]
    receiver = Receiver()
    receiver.answer('/contacts/7', Reply(429, headers={'Retry-After': '120'}), Reply(503))
    url = "'https://partner.example/contacts/%s'"
    assert url in block
    namespace = {}
    exec(compile(block.replace(url, repr(receiver.url('/contacts/%s'))), 'docs/how-to/tasks.md', 'exec'),
         namespace)
    runner = TaskRunner(config=quick_config())
    try:
        settlements, clients = [], []
        for failures in range(3):
            message = kale_message.Message('tid-readme', 'readme.SyncContact', (7,),
                                           retry_num=failures, failure_num=failures)
            received = ReceivedMessage('mid', 'handle', kale_codec.encode(message, QUEUE), {})
            settlements.append(runner.run(batch_for(received), received, message,
                                          namespace['SyncContact']))
            clients.append(namespace['_client'])
    finally:
        runner.close()
        receiver.close()
    assert [s.outcome for s in settlements] == [Outcome.RETRY, Outcome.RETRY, Outcome.SUCCEEDED]
    assert [s.retry_delay_sec for s in settlements[:2]] == [120, 10]     # 10: 5 * 2**1, its own
    assert settlements[0].reason.startswith("Retry: after 120 s: HTTPStatusError: Client error "
                                            "'429 Too Many Requests'")
    assert settlements[1].reason.startswith("HTTPStatusError: Server error '503")
    assert clients[0] is clients[1] is clients[2] is not None
