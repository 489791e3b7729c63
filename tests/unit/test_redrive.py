"""Redriving dead letters: signed afresh for the live queue, filtered by reason,
and a dry run that moves nothing."""
import time

import pytest

from kale import admin, codec
from kale.app import default_app
from kale.message import ATTR_DEAD_LETTER_REASON, Message
from kale.transport import OutgoingMessage
from tests import tasks

DAY = 24 * 3600.0


def bury(broker, task_id, reason, published_at, queue='default', signed_for=None):
    """Put a dead letter for ``queue`` in its dead-letter queue."""
    queue_ = broker.queues[queue]
    message = Message(task_id, tasks.RecordTask.task_path(), (task_id,), failure_num=5,
                      published_at=published_at)
    body = codec.encode(message, signed_for or broker.sqs_name(queue_))
    broker.send_dead_letters(queue_, [OutgoingMessage(body, {ATTR_DEAD_LETTER_REASON: reason})])


def live(broker, queue='default'):
    name = broker.sqs_name(broker.queues[queue])
    the_codec = default_app().codec
    return [the_codec.open(m.body, name) for m in broker.transport.receive(name, 10, 0, 30)]


@pytest.mark.real_time("publish times on the wire are the machine's epoch seconds")
def test_a_redriven_dead_letter_is_issued_afresh_and_its_first_publish_reported(memory_broker):
    old = time.time() - 20 * DAY                          # past the replay window
    bury(memory_broker, 'old-task', 'retries_exhausted: RuntimeError: boom', old)
    report = admin.redrive(memory_broker, memory_broker.queues['default'])
    assert report.moved == 1 and report.reasons == {'retries_exhausted': 1}
    assert report.first_published_at == report.last_published_at == int(old)
    [frame] = live(memory_broker)                         # opens: within the window again
    assert frame.task_id == 'old-task' and frame.published_at > time.time() - 60
    message = default_app().codec.read(frame)
    assert (message.retry_num, message.failure_num) == (0, 0)


def test_only_dead_letters_of_the_reason_asked_for_move(memory_broker):
    now = time.time()
    bury(memory_broker, 'a', 'retries_exhausted: boom', now)
    bury(memory_broker, 'b', 'non_retriable: NonRetriableTaskError', now)
    bury(memory_broker, 'c', '', now)                      # moved by SQS's redrive policy
    queue = memory_broker.queues['default']
    report = admin.redrive(memory_broker, queue, reason='max_receive_count')
    assert (report.moved, report.not_matching) == (1, 2)
    assert [f.task_id for f in live(memory_broker)] == ['c']
    report = admin.redrive(memory_broker, queue, reason='retries_exhausted')
    assert [f.task_id for f in live(memory_broker)] == ['a']
    assert memory_broker.counts(queue).visible == 0
    dead = memory_broker.transport.counts(memory_broker.dead_letter_name(queue))
    assert dead.visible == 1 and report.not_matching == 1


def test_a_dry_run_moves_nothing_and_says_what_would_move(memory_broker):
    bury(memory_broker, 'a', 'retries_exhausted: boom', time.time())
    queue = memory_broker.queues['default']
    report = admin.redrive(memory_broker, queue, dry_run=True)
    assert report.moved == 1
    assert live(memory_broker) == []
    assert memory_broker.transport.counts(memory_broker.dead_letter_name(queue)).visible == 1


def test_a_dead_letter_signed_for_another_queue_stays(memory_broker):
    bury(memory_broker, 'smuggled', 'wrong_queue: signed for queue x', time.time(),
         signed_for=memory_broker.sqs_name(memory_broker.queues['high']))
    report = admin.redrive(memory_broker, memory_broker.queues['default'])
    assert (report.moved, report.skipped, report.skipped_reasons) == (0, 1, {'wrong_queue': 1})
    assert live(memory_broker) == []
