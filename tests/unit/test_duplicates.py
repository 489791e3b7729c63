"""Several deliveries of one task in one batch: the most advanced runs, the
others are deleted unrun (a lost answer to a send, a delete that failed)."""
import dataclasses
import time

from kale import codec as kale_codec
from kale.events import Outcome
from kale.hooks import WorkerHooks
from kale.message import Message
from kale.transport import OutgoingMessage
from kale.worker.duplicates import DUPLICATE_IN_BATCH
from tests import tasks
from tests.support.records import records_of
from tests.support.work import work


class Seen(WorkerHooks):
    def __init__(self):
        self.duplicates = []

    def on_task_duplicate(self, settlement):
        self.duplicates.append(settlement)


def send_copies(broker, message, failure_nums):
    queue = broker.queues['budget']
    name = broker.sqs_name(queue)
    broker.send(queue, [OutgoingMessage(kale_codec.encode(
        dataclasses.replace(message, failure_num=n, retry_num=n), name)) for n in failure_nums])


def test_copies_of_one_task_in_a_batch_run_once_the_most_advanced(memory_broker, record):
    message = Message('copied-1', tasks.CopiesTask.task_path(), published_at=time.time())
    send_copies(memory_broker, message, [0, 2, 0, 1])
    seen = Seen()
    worker = work(memory_broker, hooks=[seen], queues=['budget'])
    assert [line[4] for line in records_of(record, 'ran')] == ['2']
    assert worker.stats['duplicate'] == 3 and worker.stats['succeeded'] == 1
    assert {s.reason for s in seen.duplicates} == {DUPLICATE_IN_BATCH}
    assert all(s.outcome is Outcome.DUPLICATE and s.settled for s in seen.duplicates)
    assert memory_broker.counts(memory_broker.queues['budget']).total == 0


def test_different_tasks_in_a_batch_all_run(memory_broker, record):
    for n in range(3):
        send_copies(memory_broker, Message('task-%d' % n, tasks.CopiesTask.task_path(),
                                           published_at=time.time()), [0])
    worker = work(memory_broker, queues=['budget'])
    assert sorted(line[1] for line in records_of(record, 'ran')) == ['task-0', 'task-1', 'task-2']
    assert worker.stats['duplicate'] == 0
