"""LOG_FORMAT and the task fields of log records: JSON lines, and the same
fields for text formats."""
import io
import json
import logging
import sys

import pytest

from kale import logs
from kale.cli import main
from kale.events import process_identity
from tests import tasks
from tests.support.work import work


@pytest.fixture
def output():
    """Configure Kale's logging into a string; returns a function that does it
    for a format and level and gives the stream."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)

    def configure(log_format, level='INFO'):
        logs.configure(level, 'WARNING', handler, log_format=log_format)
        return stream
    yield configure
    logging.getLogger().removeHandler(handler)
    logs.configure('WARNING', 'WARNING', logging.NullHandler())


def lines(stream):
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def record(message='hello %s', args=('there',), exc_info=None, **extra):
    made = logging.LogRecord('kale.test', logging.WARNING, __file__, 1, message, args, exc_info)
    made.__dict__.update(extra)
    return made


def test_a_json_line_has_time_level_logger_and_message():
    entry = json.loads(logs.JsonFormatter().format(record()))
    assert entry['level'] == 'WARNING' and entry['logger'] == 'kale.test'
    assert entry['message'] == 'hello there'
    assert entry['time'].endswith('Z') and entry['time'][:2] == '20'
    assert set(entry) == {'time', 'level', 'logger', 'message'}      # no field is known


def test_a_json_line_carries_the_fields_that_are_known_and_nothing_else():
    entry = json.loads(logs.JsonFormatter().format(record(task_id='t1', queue='q', args_=(1,),
                                                          password='x')))
    assert entry['task_id'] == 't1' and entry['queue'] == 'q'
    assert 'password' not in entry and 'args_' not in entry and 'task' not in entry


def test_a_traceback_stays_on_the_one_line():
    try:
        raise ValueError('bad\nthing')
    except ValueError:
        text = logs.JsonFormatter().format(record(exc_info=sys.exc_info()))
    assert '\n' not in text
    assert 'ValueError' in json.loads(text)['exception']


def test_the_tasks_own_log_lines_carry_its_fields(memory_broker, output):
    stream = output('json')
    task_id = tasks.LoggingTask.publish(None)
    work(memory_broker, queues=['default'])
    [line] = [entry for entry in lines(stream) if entry['message'] == 'logging from inside the task']
    assert line['task_id'] == task_id and line['task'] == 'tests.tasks.LoggingTask'
    assert line['queue'] == 'default' and line['attempt'] == 1
    assert line['worker'] == process_identity()[0]


def test_outcome_lines_carry_the_fields_for_text_formats_too(memory_broker, output):
    stream = output(None)
    logging.getLogger().handlers[-1].setFormatter(
        logging.Formatter('%(task_id)s|%(task)s|%(queue)s|%(attempt)s|%(message)s'))
    task_id = tasks.AddTask.publish(None, 1, 2)
    work(memory_broker, queues=['default'])
    [line] = [text for text in stream.getvalue().splitlines() if 'on default succeeded' in text]
    assert line.startswith('%s|tests.tasks.AddTask|default|1|task ' % task_id)


def test_lines_about_no_task_carry_none(output):
    stream = output(None)
    logging.getLogger().handlers[-1].setFormatter(logging.Formatter('%(task_id)s %(worker)s'))
    logging.getLogger('kale.test').warning('nothing to do with a task')
    assert stream.getvalue() == 'None None\n'


def test_task_arguments_never_reach_the_logs(memory_broker, output):
    stream = output('json', level='DEBUG')
    tasks.LoggingTask.publish(None, secret='card-4111-1111-1111-1111')
    tasks.NonRetriableTask.publish(None, 'card-4111-1111-1111-1111')
    work(memory_broker, queues=['default'])
    assert 'dead-lettered' in stream.getvalue() and '4111' not in stream.getvalue()


def test_log_format_json_makes_kale_commands_log_json(sqs, capsys, monkeypatch):
    monkeypatch.setenv('KALE_TEST_LOG_FORMAT', 'json')
    task_id = tasks.AddTask.publish(None, 1, 2)
    try:
        assert main(['worker', '--burst', '--queues', 'default']) == 0
    finally:
        logs.configure('WARNING', 'WARNING', logging.NullHandler())
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    [done] = [entry for entry in entries if entry.get('task_id') == task_id]
    assert done['queue'] == 'default' and done['level'] == 'INFO'


def test_an_unknown_log_format_is_refused():
    with pytest.raises(ValueError, match="log format must be one of text, json, got 'xml'"):
        logs.formatter('xml')


@pytest.mark.parametrize('setting', [{'MESSAGE_ENCRYPTION_KEY': 'an-encryption-secret-of-32-chars!!'},
                                     {'LOG_EXCEPTION_MESSAGES': False}])
def test_failed_runs_are_logged_with_the_exceptions_type_only(memory_broker, output, setting):
    """With task data encrypted, or LOG_EXCEPTION_MESSAGES off, a failed
    run's line names the exception's type, not its message (which often
    carries arguments); the message is logged otherwise."""
    from kale.conf import settings
    from tests import records_tasks as rt
    stream = output(None)
    with settings.override(**setting):
        rt.TellingBrokenTask.publish(None, 'card-4111')
        tasks.RetriedTellingTask.publish(None, 'card-4112')
        work(memory_broker, queues=['default'])
    text = stream.getvalue()
    assert 'dead-lettered: no_retries: ValueError\n' in text and '4111' not in text
    assert 'retrying in 0s: ValueError\n' in text and '4112' not in text
    rt.TellingBrokenTask.publish(None, 'card-4111')
    work(memory_broker, queues=['default'])
    assert 'dead-lettered: no_retries: ValueError: refused card-4111' in stream.getvalue()
