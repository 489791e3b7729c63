"""Operator commands against the embedded endpoint, with their error cases.

Commands run in this process through ``kale.cli.main``; the console script
itself (``python -m kale``) is run by the tests of one-line errors at the end.
"""
import io
import json
import sys
from typing import NamedTuple

import pytest

from kale import message as kale_message
from kale.cli import main
from kale.conf import ENVIRONMENT_VARIABLE
from tests import tasks
from tests.support.processes import console_script, one_line_error
from tests.support.records import recorded_ids


class Result(NamedTuple):
    """What a command line left: its exit code and output (as subprocess.run gives them)."""
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def kale(capsys, monkeypatch):
    """Run one ``kale`` command line in this process: ``kale('queues', '--json')``."""
    def run(*args, input=''):
        monkeypatch.setattr(sys, 'stdin', io.StringIO(input))
        capsys.readouterr()                      # only this command's output
        try:
            code = main(list(args))
        except SystemExit as exc:                # argparse: --help and usage errors
            code = exc.code
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return run


def send_raw(sqs, queue, *bodies):
    url = sqs.queue_url(queue)
    for body in bodies:
        sqs.client.send_message(QueueUrl=url, MessageBody=body)


def dead_letter_some(sqs, count):
    """``count`` signed task messages in dlq-default, as a worker leaves them."""
    tasks.AddTask.publish(None, 0, 0)          # creates default and dlq-default
    sqs.receive_all('default', expected=1)
    task_ids = []
    for i in range(count):
        message = kale_message.Message('dead-%d' % i, 'tests.tasks.AddTask', (i, i),
                                       retry_num=3, failure_num=4)
        send_raw(sqs, 'dlq-default', sqs.encode(message))
        task_ids.append(message.task_id)
    return task_ids


# --- kale queues ---------------------------------------------------------------

def test_queues_shows_counts_and_dead_letters(sqs, kale):
    dead_letter_some(sqs, 2)
    tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(3)])
    tasks.AddTask.publish(None, 9, 9, delay_sec=60)
    sqs.client.receive_message(QueueUrl=sqs.queue_url('default'), MaxNumberOfMessages=1)
    result = kale('queues')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ['QUEUE', 'PRIORITY', 'VISIBLE', 'IN', 'FLIGHT', 'DELAYED',
                                'DEAD', 'LETTERS']
    default = next(line.split() for line in lines if line.startswith('default'))
    assert default == ['default', '40', '2', '1', '1', '2']
    high = next(line.split() for line in lines if line.startswith('high'))
    assert high == ['high', '100', '-', '-', '-', '-']


def test_queues_json_is_for_scripts(sqs, kale):
    tasks.HighTask.publish(None)
    result = kale('queues', '--json')
    rows = {row['name']: row for row in json.loads(result.stdout)}
    assert rows['high']['visible'] == 1
    assert rows['high']['sqs_name'] == sqs.prefix + 'high'
    assert rows['low']['visible'] is None


# --- kale purge ---------------------------------------------------------------------

def test_purge_with_yes_empties_the_queue(sqs, kale):
    tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(4)])
    result = kale('purge', 'default', '--yes')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'purged %sdefault' % sqs.prefix
    assert sqs.receive_all('default', timeout=0.5) == []


def test_purge_asks_first(sqs, kale):
    tasks.AddTask.publish(None, 1, 1)
    declined = kale('purge', 'default', input='n\n')
    assert 'Delete every message' in declined.stderr
    assert declined.returncode == 1
    assert 'cancelled (nothing was deleted)' in declined.stderr
    assert len(sqs.receive_all('default', expected=1)) == 1
    tasks.AddTask.publish(None, 1, 1)
    confirmed = kale('purge', 'default', input='y\n')
    assert confirmed.returncode == 0
    assert sqs.receive_all('default', timeout=0.5) == []


def test_purge_dead_letters_leaves_the_queue_alone(sqs, kale):
    dead_letter_some(sqs, 2)
    tasks.AddTask.publish(None, 1, 1)
    assert kale('purge', 'default', '--dead-letters', '--yes').returncode == 0
    assert sqs.receive_all('dlq-default', timeout=0.5) == []
    assert len(sqs.receive_all('default', expected=1)) == 1


def test_purge_of_an_unknown_queue_is_one_line(sqs, kale):
    assert "queue 'nope' is not in the queue config" in one_line_error(kale('purge', 'nope', '--yes'))


# --- kale dlq redrive ---------------------------------------------------------------

def test_redrive_moves_every_dead_letter_exactly_once_with_counts_reset(sqs, kale):
    task_ids = dead_letter_some(sqs, 25)
    send_raw(sqs, 'dlq-default', 'garbage that cannot be decoded')
    result = kale('dlq', 'redrive', 'default', '--yes')
    assert result.returncode == 0, result.stderr
    assert 'moved 25 dead letters from %sdlq-default back to %sdefault (max_receive_count 25)' \
        % (sqs.prefix, sqs.prefix) in result.stdout
    assert 'left 1 in the dead-letter queue that cannot be decoded for %sdefault ' \
        '(not_kale_message 1)' % sqs.prefix in result.stdout
    assert 'redriving default: 25 moved' in result.stderr
    moved = sqs.receive_all('default', expected=25)
    decoded = [sqs.decode(m['Body']) for m in moved]
    assert sorted(m.task_id for m in decoded) == sorted(task_ids)
    assert {(m.retry_num, m.failure_num) for m in decoded} == {(0, 0)}
    assert {m['MessageAttributes']['kale_retry_num']['StringValue'] for m in moved} == {'0'}
    left = sqs.receive_all('dlq-default', expected=1)
    assert [m['Body'] for m in left] == ['garbage that cannot be decoded']


def test_redrive_limit(sqs, kale):
    dead_letter_some(sqs, 12)
    result = kale('dlq', 'redrive', 'default', '--limit', '5', '--yes')
    assert 'moved 5 dead letters' in result.stdout
    one = kale('dlq', 'redrive', 'default', '--limit', '1', '--yes')
    assert 'moved 1 dead letter from' in one.stdout, one.stdout
    assert len(sqs.receive_all('default', expected=6)) == 6
    assert len(sqs.receive_all('dlq-default', expected=6)) == 6


def test_redriven_tasks_run_again(sqs, kale, record):
    tasks.AddTask.publish(None, 0, 0)
    sqs.receive_all('default', expected=1)
    message = kale_message.Message('again', 'tests.tasks.RecordTask', ('x',), failure_num=5)
    send_raw(sqs, 'dlq-default', sqs.encode(message))
    assert kale('dlq', 'redrive', 'default', '--yes').returncode == 0
    worker = kale('worker', '--queues', 'default', '--burst')
    assert worker.returncode == 0, worker.stderr
    assert recorded_ids(record, 'ran') == ['again']


def test_redrive_errors_are_one_line(sqs, kale):
    assert "queue 'nope'" in one_line_error(kale('dlq', 'redrive', 'nope'))
    bad_limit = kale('dlq', 'redrive', 'default', '--limit', '0')
    assert bad_limit.returncode == 2
    assert 'must be a whole number of at least 1' in bad_limit.stderr


# --- kale publish ---------------------------------------------------------------------

def test_publish_by_path(sqs, kale):
    result = kale('publish', 'tests.tasks.EchoTask', '--args', '[1, "two"]', '--kwargs',
                  '{"x": 3}', '--app-data', '{"tenant": 7}')
    assert result.returncode == 0, result.stderr
    task_id = result.stdout.strip()
    [received] = sqs.receive_all('default', expected=1)
    message = sqs.decode(received['Body'])
    assert message.task_id == task_id
    assert (message.args, message.kwargs, message.app_data) == ((1, 'two'), {'x': 3}, {'tenant': 7})


def test_publish_with_delay(sqs, kale):
    assert kale('publish', 'tests.tasks.AddTask', '--args', '[1, 2]', '--delay', '60').returncode == 0
    assert sqs.receive_all('default', timeout=0.5) == []


def test_publish_errors_are_one_line(sqs, kale):
    cases = [
        (('tests.tasks.AddTask', '--args', '[1,'), '--args is not valid JSON'),
        (('tests.tasks.AddTask', '--args', '{"a": 1}'), '--args must be a JSON array, got dict'),
        (('tests.tasks.AddTask', '--kwargs', '[1]'), '--kwargs must be a JSON object, got list'),
        (('tests.tasks.Nope',), "'tests.tasks.Nope' is not an importable kale Task class"),
        (('tests.tasks.NotATask',), 'is not an importable kale Task class'),
        (('tests.tasks.AddTask', '--args', '[1, 2]', '--delay', '31622400'),
         'delay_sec must be a number of seconds within 0..31536000 (365 days)'),
        (('tests.tasks.UnknownQueueTask',), "queue 'no_such_queue' is not in the queue config"),
        (('tests.tasks.AddTask', '--kwargs', '{"delay_sec": 5}'), 'give the delay with --delay'),
        (('kale.webhooks.delivery.DeliverWebhook', '--args', '["wh", "e", "orders", {}]'),
         "kale.webhooks.delivery.DeliverWebhook is one of Kale's own tasks: only Kale "
         "publishes it"),
    ]
    for args, expected in cases:
        assert expected in one_line_error(kale('publish', *args)), args


def test_every_command_explains_itself(kale):
    for command in (['--help'], ['worker', '--help'], ['queues', '--help'], ['purge', '--help'],
                    ['dlq', 'redrive', '--help'], ['publish', '--help'], ['sqs-local', '--help']):
        result = kale(*command)
        assert result.returncode == 0
        assert 'usage: kale' in result.stdout
        assert len(result.stdout.split()) > 25, command


def test_sqs_local_refuses_a_port_out_of_range(kale):
    result = kale('sqs-local', '--port', '70000')
    assert result.returncode == 2
    assert 'must be a port number from 0 to 65535' in result.stderr


# --- the console script ----------------------------------------------------------------

def test_queues_with_an_unreachable_endpoint_is_one_line(sqs):
    error = one_line_error(console_script('queues', KALE_TEST_ENDPOINT='http://127.0.0.1:9'))
    assert 'unreachable' in error


def test_commands_without_a_usable_settings_module_are_one_line(sqs):
    error = one_line_error(console_script('queues', **{ENVIRONMENT_VARIABLE: 'no.such.settings'}))
    assert error.startswith("KALE_SETTINGS_MODULE 'no.such.settings' cannot be imported")


def test_redrive_asks_first_and_moves_nothing_without_a_yes(sqs, kale):
    dead_letter_some(sqs, 2)
    result = kale('dlq', 'redrive', 'default', input='n\n')
    assert result.returncode == 1
    assert 'Move every dead letter from %sdlq-default back to %sdefault' % (
        sqs.prefix, sqs.prefix) in result.stderr
    assert "redrive of '%sdlq-default' cancelled (nothing was moved)" % sqs.prefix in result.stderr
    assert len(sqs.receive_all('dlq-default', expected=2)) == 2


def test_a_dry_run_says_what_would_move_and_moves_nothing(sqs, kale):
    dead_letter_some(sqs, 3)
    result = kale('dlq', 'redrive', 'default', '--dry-run')
    assert result.returncode == 0, result.stderr
    assert 'would move 3 dead letters' in result.stdout
    assert 'first published between' in result.stdout
    assert sqs.receive_all('default', timeout=0.5) == []


def test_redrive_by_reason_leaves_the_others(sqs, kale):
    dead_letter_some(sqs, 2)
    result = kale('dlq', 'redrive', 'default', '--reason', 'retries_exhausted', '--yes')
    assert 'moved 0 dead letters' in result.stdout
    assert 'left 2 of other reasons in the dead-letter queue' in result.stdout
