"""Dead-letter handlers, the parts that need no worker: a dead run's
message, the checks of ``run_dead_task``, the dead-run queues' names and the
``--dead-letters`` option (see test_dead_letters.py for the workers)."""
from __future__ import annotations

import argparse
import time

import pytest

from kale import task
from kale.app import default_app
from kale.exceptions import ImproperlyConfigured, QueueConfigError, TaskDefinitionError
from kale.message import Message
from kale.queue_config import parse_queue_config
from kale.worker import Worker
from kale.worker.supervisor import worker_command


def test_the_dead_run_carries_its_link_and_error_signed_in_its_envelope():
    message = Message('t1', 'tests.dead_letter_tasks.PaymentTask', ('x',), {'amount': 1},
                      published_at=float(int(time.time())))
    dead = message.dead_run('retries_exhausted: ValueError: ' + 'é\nx' * 2000)
    assert dead.task_id != 't1' and dead.dead_of == 't1'
    assert dead.task_id == message.dead_run('other').task_id      # the same task, the same run
    assert len(dead.dead_error) == 1024 and '\n' not in dead.dead_error
    assert (dead.retry_num, dead.failure_num, dead.args) == (0, 0, ('x',))
    codec = default_app().codec
    body = codec.encode(dead, 'q').body
    decoded = codec.decode(body, 'q')
    assert (decoded.dead_of, decoded.dead_error) == (dead.dead_of, dead.dead_error)
    retry = codec.decode(codec.reissue(codec.open(body, 'q'), decoded.next_attempt(), 'q').body,
                         'q')
    assert retry.dead_of == 't1' and retry.task_id == dead.task_id
    assert codec.decode(codec.encode(message, 'q').body, 'q').dead_of == ''


def test_a_handler_that_cannot_take_the_error_is_refused_at_definition():
    with pytest.raises(TaskDefinitionError, match=r'^task .*NoError: run_dead_task must be a '
                                                  r'method that takes the error'):
        class NoError(task.Task):
            def run_task(self):
                pass

            def run_dead_task(self):
                pass
    with pytest.raises(TaskDefinitionError, match='run_dead_task must be a method'):
        class NotCallable(task.Task):
            run_dead_task = 'soon'
    with pytest.raises(TaskDefinitionError, match='as a generator'):
        class Yields(task.Task):
            def run_dead_task(self, error):
                yield error


def test_dead_letters_without_dead_letter_queues_is_one_line(memory_broker):
    memory_broker.dead_letters = False
    with pytest.raises(ImproperlyConfigured, match=r'^--dead-letters: ENABLE_DEAD_LETTER_QUEUE '
                                                   r'is off'):
        Worker(queue_names=['default'], burst=True, broker=memory_broker, dead_letters=True)


def test_a_worker_with_dead_letters_serves_the_dead_run_queues(memory_broker):
    worker = Worker(queue_names=['default', 'ordered'], burst=True, broker=memory_broker,
                    dead_letters=True)
    default, ordered = worker.queues
    assert (default.name, default.dead_letter_queue) == ('dlq-default-runs', 'dlq-default')
    assert default.priority == memory_broker.queues['default'].priority
    assert memory_broker.sqs_name(ordered) == 'dlq-ordered-runs.fifo'
    assert memory_broker.dead_letter_name(ordered) == 'dlq-ordered.fifo'


def test_a_queue_named_as_another_s_dead_run_queue_is_refused():
    data = {'a': {'priority': 1, 'batch_size': 1, 'visibility_timeout_sec': 30,
                  'long_poll_time_sec': 0, 'num_iterations': 1},
            'b': {'name': 'dlq-a-runs', 'priority': 1, 'batch_size': 1,
                  'visibility_timeout_sec': 30, 'long_poll_time_sec': 0, 'num_iterations': 1}}
    with pytest.raises(QueueConfigError, match="name 'dlq-a-runs' is already used by queue 'a'"):
        parse_queue_config('q.yaml', data)


def test_the_supervisor_passes_dead_letters_on_to_its_workers():
    args = argparse.Namespace(log_level='INFO', aws_log_level='WARNING', settings=None,
                              queues=['default'], burst=False, dead_letters=True)
    assert worker_command(args)[-3:] == ['--queues', 'default', '--dead-letters']
