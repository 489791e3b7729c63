"""Dead-letter handlers: a task class that defines ``run_dead_task`` gets a
dead run for each message that fails for good, sent to the queue's dead-run
queue and run by ``kale worker --dead-letters``; in-process, over the
in-memory transport, on every pool."""
from __future__ import annotations

import pytest

from kale import admin, records, task
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import (
    RecordConflictError,
    SQSError,
)
from kale.message import ATTR_DEAD_OF
from kale.transport import OutgoingMessage
from kale.worker import Worker
from tests import dead_letter_tasks as dt
from tests.support.records import recorded_ids, records_of

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')


@pytest.fixture(autouse=True)
def no_retry_delay():
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        yield


def run(broker, queues=('default',), dead_letters=False):
    worker = Worker(queue_names=list(queues), burst=True, broker=broker,
                    dead_letters=dead_letters)
    assert worker.run() == 0
    return worker


def dead_letters(broker, queue='default'):
    """The dead letters of ``queue`` (received, visible again at once)."""
    return broker.transport.receive(broker.dead_letter_name(broker.queues[queue]), 10, 0, 0)


def dead_runs_waiting(broker, queue='default'):
    return broker.transport.counts(broker.dead_run_name(broker.queues[queue])).total


def test_a_dead_run_fails_once_then_succeeds_linked_to_its_task(memory_broker, record,
                                                                records_url):
    task_id = dt.PaymentTask.publish(None, 'o-1', amount=12)
    first = run(memory_broker)
    assert first.stats == {'dead_letter': 1}
    assert recorded_ids(record, 'start') == [task_id]
    assert dead_letters(memory_broker) == []          # the dead run went instead
    assert dead_runs_waiting(memory_broker) == 1
    dead_worker = run(memory_broker, dead_letters=True)
    assert dead_worker.stats == {'retry': 1, 'succeeded': 1}
    [dead_id] = set(recorded_ids(record, 'dead'))
    assert dead_id != task_id
    runs = records_of(record, 'dead')
    assert len(runs) == 2
    assert runs[0][4:] == [task_id, 'o-1', '12',
                           'non_retriable:_NonRetriableTaskError:_card_o-1_refused']
    assert recorded_ids(record, 'dead_done') == [dead_id]
    assert [r[4] for r in records_of(record, 'dead_done')] == [task_id]
    assert dead_letters(memory_broker) == []
    original, dead = records.get(task_id), records.get(dead_id)
    assert original.status == 'failed' and original.dead_of is None
    assert original.dead_letter_reason.startswith('non_retriable: NonRetriableTaskError')
    assert dead.status == 'succeeded' and dead.dead_of == task_id
    assert dead.queue == 'dlq-default-runs' and dead.attempts == 2
    assert dead.inputs['args'] == ['o-1'] and dead.inputs['kwargs'] == {'amount': 12}
    assert dead_runs_waiting(memory_broker) == 0


def test_retries_come_first_and_the_handler_gets_the_final_error(memory_broker, record,
                                                                 records_url):
    task_id = dt.RetriedTask.publish(None, 7)
    run(memory_broker)
    assert recorded_ids(record, 'start') == [task_id, task_id]    # max_retries = 1
    run(memory_broker, dead_letters=True)
    [dead] = records_of(record, 'dead')
    assert dead[4:] == [task_id, '7', 'retries_exhausted:_ValueError:_bad_input_7']
    assert records.get(dead[1]).result == 'handled 7'


def test_an_async_handler_runs_on_every_pool(memory_broker, record):
    task_id = dt.AsyncDeadTask.publish(None, 3)
    run(memory_broker)
    run(memory_broker, dead_letters=True)
    assert [r[4:] for r in records_of(record, 'dead')] == [[task_id, '3']]


def test_a_class_without_a_handler_keeps_the_plain_dead_letter(memory_broker, record,
                                                               records_url):
    task_id = dt.NoHandlerTask.publish(None, 1)
    run(memory_broker)
    [dead] = dead_letters(memory_broker)
    assert default_app().codec.decode(dead.body, memory_broker.sqs_name(
        memory_broker.queues['default'])).task_id == task_id
    assert dead.attributes['kale_dead_letter_reason'].startswith('no_retries: ValueError')
    assert not memory_broker.transport.queue_exists('dlq-default-runs')
    assert run(memory_broker, dead_letters=True).stats == {}
    assert records.get(task_id).status == 'failed'
    assert not dt.NoHandlerTask.handles_dead_letters and dt.PaymentTask.handles_dead_letters
    assert not task.Task.handles_dead_letters


def test_a_dead_run_that_fails_for_good_is_a_plain_dead_letter(memory_broker, record,
                                                               records_url):
    task_id = dt.HopelessTask.publish(None, 5)
    run(memory_broker)
    assert dead_letters(memory_broker) == []
    dead_worker = run(memory_broker, dead_letters=True)
    assert dead_worker.stats == {'retry': 1, 'dead_letter': 1}    # no dead run of a dead run
    [dead_id] = set(recorded_ids(record, 'dead'))
    [letter] = dead_letters(memory_broker)
    assert letter.attributes['kale_dead_letter_reason'].startswith(
        'retries_exhausted: RuntimeError: handler broke too')
    assert letter.attributes[ATTR_DEAD_OF] == task_id
    assert letter.attributes['kale_source_queue'] == 'dlq-default-runs'
    queue = memory_broker.queues['default']
    assert dead_runs_waiting(memory_broker) == 0
    record_ = records.get(dead_id)
    assert record_.status == 'failed' and record_.dead_of == task_id
    with pytest.raises(RecordConflictError, match='dead run of task %s' % task_id):
        records.retry(dead_id)
    # Redriven, it goes back to the dead-run queue and runs its handler again.
    report = admin.redrive(memory_broker, queue)
    assert report.moved == 1 and report.skipped == 0
    assert dead_letters(memory_broker) == []
    assert run(memory_broker).stats == {}
    run(memory_broker, dead_letters=True)
    assert recorded_ids(record, 'dead') == [dead_id] * 4
    assert recorded_ids(record, 'start') == [task_id]


def test_a_dead_run_that_cannot_be_sent_falls_back_to_the_dead_letter(memory_broker, record,
                                                                      monkeypatch):
    def refuse(queue, messages):
        raise SQSError('access denied to the dead-run queue', 'AccessDenied')
    monkeypatch.setattr(memory_broker, 'send_dead_runs', refuse)
    task_id = dt.PaymentTask.publish(None, 'o-2')
    worker = run(memory_broker)
    assert worker.stats == {'dead_letter': 1}
    [dead] = dead_letters(memory_broker)
    message = default_app().codec.decode(
        dead.body, memory_broker.sqs_name(memory_broker.queues['default']))
    assert message.task_id == task_id and not message.dead_of


def test_a_dead_run_refused_in_a_batch_send_falls_back_to_the_dead_letter(memory_broker,
                                                                           record, monkeypatch):
    from kale.exceptions import BatchSendError
    send = memory_broker.send_dead_runs

    def all_but_the_last(queue, messages):
        if len(messages) > 1:
            send(queue, messages[:-1])
        raise BatchSendError('one failed', {len(messages) - 1: ('InternalError', 'try again')},
                             [None] * len(messages))
    monkeypatch.setattr(memory_broker, 'send_dead_runs', all_but_the_last)
    task_id = dt.PaymentTask.publish(None, 'o-3')
    run(memory_broker)
    [dead] = dead_letters(memory_broker)
    queue = memory_broker.queues['default']
    assert default_app().codec.decode(dead.body, memory_broker.sqs_name(queue)).task_id == task_id
    assert not memory_broker.transport.queue_exists('dlq-default-runs')


def test_refused_messages_stay_plain_dead_letters(memory_broker, record):
    queue = memory_broker.queues['default']
    memory_broker.send(queue, [OutgoingMessage('garbage')])
    run(memory_broker)
    [dead] = dead_letters(memory_broker)
    assert dead.body == 'garbage'


def test_a_fifo_task_s_dead_run_goes_to_the_fifo_dead_run_queue(memory_broker, record):
    task_id = dt.OrderedPaymentTask.publish(None, 'f-1', group_id='g1')
    run(memory_broker, queues=('ordered',))
    queue = memory_broker.queues['ordered']
    name = memory_broker.dead_run_name(queue)
    assert name == 'dlq-ordered-runs.fifo'
    run(memory_broker, queues=('ordered',), dead_letters=True)
    assert [r[4] for r in records_of(record, 'dead_done')] == [task_id]
