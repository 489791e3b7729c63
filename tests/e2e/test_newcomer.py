"""What a new user hit: every mistake is one clear line, a burst ends, and the
original Kale's names are caught."""
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from kale import config as kale_config
from kale import testing
from kale.app import default_app
from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.exceptions import (
    ImproperlyConfigured,
    PublishError,
    SQSError,
    TaskDefinitionError,
    UnknownQueueError,
)
from kale.queue_config import build_queue_config, parse_queue_config
from kale.queue_selector import QueueInfo
from kale.task import Task
from kale.transport import sqs
from tests import tasks
from tests.support.endpoint import ROOT, subprocess_env


def kale(*args, env=None, cwd=ROOT, timeout=60):
    return subprocess.run([sys.executable, '-m', 'kale', *args], capture_output=True, text=True,
                          cwd=cwd, env=env or subprocess_env(), timeout=timeout)


def one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def settings_module(settings_env, tmp_path, monkeypatch, name, text):
    (tmp_path / ('%s.py' % name)).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, name)
    settings_env()


# --- settings that used to fail quietly or with a traceback -------------------------

@pytest.mark.parametrize('name, value, problem', [
    ('MESSAGE_QUEUE_ENDPOINT_URL', 'localhost:9324', 'must be a URL with a scheme and a host'),
    ('MESSAGE_QUEUE_ENDPOINT_URL', 'http://', 'must be a URL with a scheme and a host'),
    ('MESSAGE_QUEUE_ENDPOINT_URL', 'http://host:port', 'must be a URL with a valid port'),
    ('AWS_REGION', 5, 'must be a region name'),
    ('AWS_REGION', 'US East', 'must be a region name'),
    ('ENABLE_DEAD_LETTER_QUEUE', 'false', 'must be True or False'),
    ('CREATE_MISSING_QUEUES', 'no', 'must be True or False'),
    ('MESSAGE_QUEUE_USE_PROXY', 1, 'must be True or False'),
    ('QUEUE_SELECTOR', 'ReducedLottery', 'must be a dotted path'),
    ('ON_WORKER_STARTUP', 42, 'must be a dotted path'),
    ('BURST_GIVE_UP_SEC', -1, 'must be a number of at least 0'),
])
def test_a_wrong_setting_is_one_line_naming_it(name, value, problem):
    with pytest.raises(ImproperlyConfigured) as info:
        with settings.override(**{name: value}):
            pass
    assert str(info.value).startswith('setting %s %s' % (name, problem))
    assert '\n' not in str(info.value)


def test_every_setting_has_a_check_a_doc_and_a_type():
    from kale.default_settings import TABLE
    for name, field in TABLE.items():
        assert callable(field.metadata['check']), name
        doc = field.metadata['doc']
        assert doc and '\n' not in doc and doc[-1] not in '.,;', name
        assert field.type not in ('', 'Any'), name


def test_an_endpoint_without_a_scheme_stops_the_worker_with_one_line(tmp_path):
    (tmp_path / 'noscheme_settings.py').write_text(
        'from tests.kale_test_settings import *\nMESSAGE_QUEUE_ENDPOINT_URL = "localhost:9324"\n')
    env = subprocess_env(KALE_SETTINGS_MODULE='noscheme_settings',
                         PYTHONPATH=str(tmp_path) + os.pathsep + ROOT)
    result = kale('worker', '--burst', env=env)
    assert result.returncode == 1
    assert one_line(result).startswith("kale: error: setting MESSAGE_QUEUE_ENDPOINT_URL must "
                                       "be a URL with a scheme and a host")


def test_a_region_boto3_refuses_is_one_line_naming_it():
    with settings.override(AWS_REGION='-x', MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:1'):
        with pytest.raises(ImproperlyConfigured) as info:
            sqs.make_client(config=settings.config)
    assert "AWS_REGION='-x'" in str(info.value) and '\n' not in str(info.value)


def test_a_misspelt_setting_is_warned_about_once_with_the_right_name(tmp_path, monkeypatch,
                                                                     caplog, settings_env):
    kale_config._warned.clear()
    settings_module(settings_env, tmp_path, monkeypatch, 'typo_settings', '''
        from tests.kale_test_settings import *
        QUEUE_PREFX = 'x-'
        USE_DEAD_LETTER_QUEUE = False
        MY_APP_PAGE_SIZE = 20
    ''')
    with caplog.at_level(logging.WARNING, logger='kale.config'):
        settings.load()
        settings_env()
        settings.load()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        'settings module typo_settings: QUEUE_PREFX is not a Kale setting; did you mean '
        'QUEUE_PREFIX?',
        'settings module typo_settings: USE_DEAD_LETTER_QUEUE is a setting of the original Kale '
        'that Kale dropped: it is ENABLE_DEAD_LETTER_QUEUE']


def test_an_html_error_page_is_one_line(sqs):
    with settings.override(AWS_REGION='elasticmq'):
        transport = sqs_transport()
        with pytest.raises(SQSError) as info:
            transport.queue_exists('anything')
    text = str(info.value)
    assert '\n' not in text and '<' not in text
    assert 'answered HTTP 500: 500 Internal Server Error' in text


def sqs_transport():
    return sqs.SQSTransport(sqs.make_client(config=settings.config), config=settings.config)


class SilentEndpoint:
    """Accepts connections and never answers."""

    def __init__(self):
        self.server = socket.create_server(('127.0.0.1', 0))
        self.port = self.server.getsockname()[1]
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.connections.append(self.server.accept()[0])
            except OSError:
                return

    def close(self):
        self.server.close()
        for connection in self.connections:
            connection.close()


def test_an_operator_command_gives_up_on_an_endpoint_that_never_answers(tmp_path):
    silent = SilentEndpoint()
    try:
        (tmp_path / 'silent_settings.py').write_text(
            'from tests.kale_test_settings import *\n'
            'MESSAGE_QUEUE_ENDPOINT_URL = "http://127.0.0.1:%d"\nSQS_READ_TIMEOUT_SEC = 2\n'
            % silent.port)
        env = subprocess_env(KALE_SETTINGS_MODULE='silent_settings',
                             PYTHONPATH=str(tmp_path) + os.pathsep + ROOT)
        result = kale('queues', env=env, timeout=30)     # one attempt of 2 + 1 s per queue
    finally:
        silent.close()
    assert result.returncode == 1
    assert 'unreachable' in one_line(result) or 'timed out' in one_line(result)


def test_a_burst_worker_that_cannot_reach_sqs_gives_up(tmp_path):
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        closed_port = probe.getsockname()[1]
    (tmp_path / 'unreachable_settings.py').write_text(
        'from tests.kale_test_settings import *\n'
        'MESSAGE_QUEUE_ENDPOINT_URL = "http://127.0.0.1:%d"\nBURST_GIVE_UP_SEC = 2\n'
        'SQS_ERROR_MAX_BACKOFF_SEC = 0.5\n' % closed_port)
    env = subprocess_env(KALE_SETTINGS_MODULE='unreachable_settings',
                         PYTHONPATH=str(tmp_path) + os.pathsep + ROOT)
    result = kale('worker', '--burst', '--log-level', 'ERROR', env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        'kale: error: burst worker gave up after ')
    assert '(BURST_GIVE_UP_SEC)' in result.stderr


# --- queue names --------------------------------------------------------------------

def test_naming_a_yaml_key_instead_of_the_queue_name_says_which_name_to_use(tmp_path):
    config = parse_queue_config(str(tmp_path / 'q.yaml'), {'fast': {
        'name': 'high_priority', 'priority': 1, 'batch_size': 1, 'visibility_timeout_sec': 30,
        'long_poll_time_sec': 0, 'num_iterations': 1}})
    with pytest.raises(UnknownQueueError, match="queue 'fast' is a key in the queue config .*, "
                                                "whose queue is named 'high_priority'.*use "
                                                "'high_priority'"):
        config.get_queue('fast', who='task x')


# --- the ready settings modules, and the eager helper ---------------------------------

def test_the_ready_settings_modules_ship_with_the_package(tmp_path, monkeypatch, settings_env):
    monkeypatch.chdir(tmp_path)               # a project without a queue config of its own
    monkeypatch.setenv('KALE_SQS_ENDPOINT', 'http://127.0.0.1:4000')
    settings_module(settings_env, tmp_path, monkeypatch, 'myproject_settings',
                    'from kale.presets.local import *\nQUEUE_PREFIX = "mine-"\n')
    assert settings.MESSAGE_QUEUE_ENDPOINT_URL == 'http://127.0.0.1:4000'
    assert os.path.dirname(build_queue_config(settings.config).path).endswith(os.path.join('kale', 'presets'))
    assert '..' not in build_queue_config(settings.config).path


def test_eager_mode_runs_tasks_without_a_queue_config(tmp_path, monkeypatch, settings_env):
    monkeypatch.chdir(tmp_path)
    settings_module(settings_env, tmp_path, monkeypatch, 'bare_settings', 'X = 1\n')
    assert testing.run_eagerly(tasks.AddTask, None, 1, 2) == 3
    with testing.eager() as runs:
        tasks.HighRecordTask.publish(None)
    assert runs[0].message.task_name == 'tests.tasks.HighRecordTask'


def test_eager_mode_under_pytest_needs_no_settings_module(tmp_path):
    """A project's own test, run by pytest in a folder with no settings module,
    no queue config and no AWS settings."""
    (tmp_path / 'test_app.py').write_text(textwrap.dedent('''
        from kale import task, testing

        class Resize(task.Task):
            queue = 'images'

            def run_task(self, width):
                return width * 2

        def test_resize():
            assert testing.run_eagerly(Resize, None, 21) == 42
    '''))
    env = subprocess_env()
    for name in (ENVIRONMENT_VARIABLE, 'AWS_DEFAULT_REGION', 'AWS_REGION'):
        env.pop(name, None)
    result = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                             '-p', 'no:randomly', 'test_app.py'], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


class LostTask(Task):
    queue = 'nowhere'

    def run_task(self):
        return 1


def test_eager_mode_refuses_a_queue_its_queue_config_does_not_have():
    with pytest.raises(UnknownQueueError, match="'nowhere'"):
        testing.run_eagerly(LostTask, None)


def test_a_command_with_no_settings_module_says_so_and_how_to_set_one(tmp_path):
    env = subprocess_env()
    for name in (ENVIRONMENT_VARIABLE, 'AWS_DEFAULT_REGION', 'AWS_REGION'):
        env.pop(name, None)
    line = one_line(kale('worker', '--burst', env=env, cwd=str(tmp_path)))
    assert line.startswith('kale: error: no settings module is set: set KALE_SETTINGS_MODULE to '
                           'your settings module'), line
    assert '--settings MODULE' in line


def test_a_missing_settings_module_names_the_option_it_came_from():
    result = kale('queues', '--settings', 'nosuchmod')
    assert one_line(result).startswith("kale: error: --settings 'nosuchmod' cannot be imported")


# --- checks at publish time -----------------------------------------------------------

def test_arguments_that_do_not_fit_run_task_are_refused_at_publish(memory_broker):
    with pytest.raises(PublishError, match=r'task tests.tasks.AddTask: arguments do not match '
                                           r'run_task\(a, b, \*\*kwargs\): too many positional'):
        tasks.AddTask.publish(None, 1, 2, 3)
    with pytest.raises(PublishError, match="missing a required argument: 'b'"):
        tasks.AddTask.publish_batch(None, [((1, 2), {}), ((1,), {})])
    assert memory_broker.counts(memory_broker.queues['default']).visible == 0


def test_the_argument_check_can_be_turned_off(memory_broker):
    class Loose(tasks.AddTask):
        check_arguments = False
    Loose.__module__, Loose.__qualname__ = 'tests.tasks', 'AddTask'
    Loose.publish(None, 1, 2, 3)
    with settings.override(CHECK_TASK_ARGUMENTS=False):
        tasks.AddTask.publish(None, 1, 2, 3)
    assert memory_broker.counts(memory_broker.queues['default']).visible == 2


# --- the original Kale's names ---------------------------------------------------------

@pytest.mark.parametrize('old, new', [('_get_task_id', 'make_task_id'),
                                      ('_alert_runtime_exceeded', 'on_target_runtime_exceeded'),
                                      ('_report_permanent_failure', 'on_permanent_failure'),
                                      ('_check_blacklist', r'should_run_task \(return False'),
                                      ('_setup_task_environment', 'before_run'),
                                      ('_kill_runtime_exceeded', 'after_failure')])
def test_an_old_hook_name_is_refused_when_the_task_is_defined(old, new):
    with pytest.raises(TaskDefinitionError, match='defines %s, a hook of the original Kale that '
                                                  'Kale never calls: rename it %s' % (old, new)):
        type('OldStyleTask', (Task,), {old: lambda self, *a: None})


def test_queue_info_keeps_the_original_is_queue_empty():
    queues = list(build_queue_config(settings.config).values())[:2]
    info = QueueInfo(queues, lambda queue: queue is queues[0])
    assert (info.is_queue_empty(queues[0]), info.is_queue_empty(queues[1])) == (False, True)


def test_a_second_purge_within_a_minute_says_what_it_means(sqs):
    from kale import admin
    broker = default_app().broker
    queue = broker.queues['default']
    broker.declare(queue)
    admin.purge(broker, queue)
    with pytest.raises(SQSError, match="queue '.*default' was purged less than 60 seconds ago, "
                                       'and SQS allows one purge per queue every 60 seconds'):
        admin.purge(broker, queue)


def test_every_dropped_setting_the_migration_guide_lists_is_warned_about():
    with open(os.path.join(ROOT, 'docs', 'how-to', 'migrate-from-original-kale.md')) as handle:
        text = handle.read()
    table = text.split('Dropped settings.')[1].split('Changed defaults:')[0]
    listed = {name for row in table.splitlines() if row.startswith('| `')
              for name in re.findall(r'`([A-Z_]+)`', row.split('|')[1])}
    assert len(listed) >= 8 and listed <= set(kale_config.DROPPED_SETTINGS)


@pytest.mark.parametrize('name', ['run_task', 'before_run', 'should_run_task'])
def test_an_async_task_method_makes_a_coroutine_task(name):
    async def method(self, *args):
        return 1
    assert type('AsyncStyleTask', (Task,), {name: method}).is_coroutine
    assert not type('PlainStyleTask', (Task,), {name: lambda self, *args: 1}).is_coroutine


@pytest.mark.parametrize('name', ['run_task', 'after_success'])
def test_a_generator_task_method_is_refused_when_the_task_is_defined(name):
    async def agen(self, *args):
        yield 1

    def gen(self, *args):
        yield 1
    for method in (agen, gen):
        with pytest.raises(TaskDefinitionError, match=r'^task [\w.]+YieldingTask defines %s as a '
                                                      'generator' % name):
            type('YieldingTask', (Task,), {name: method})


def test_the_default_time_limit_fits_the_shipped_queues_with_room_for_a_batch():
    from kale.queue_config import load_queue_config
    from kale.worker.batch import Batch
    shipped = load_queue_config(os.path.join(ROOT, 'queue_config.yaml'))
    for queue in shipped.values():
        assert not Batch(queue, [], 0.0).is_long(Task.time_limit), queue.name
        assert Task.time_limit <= queue.visibility_timeout_sec / 2, queue.name


def test_a_run_under_its_time_limit_is_not_slow_unless_the_task_sets_a_target(caplog):
    """A 65-second run of a task with time_limit = 90 and no target_runtime
    (the clock moves 65 s during the run)."""
    from kale.worker.runner import TaskRunner
    from tests.support.clock import FakeClock
    from tests.support.received import batch_for, received_for
    clock = FakeClock()
    tasks.ClockedTask.clock = clock

    def runs(task_class):
        received = received_for(task_class, 65.0)
        batch, runner = batch_for(received), TaskRunner(clock=clock)
        opened = runner.open(batch, received)
        caplog.clear()
        with caplog.at_level('WARNING'):
            settlement = runner.run(batch, received, runner.read(batch, received, opened),
                                    task_class)
        return settlement.outcome.value, 'over its target_runtime' in caplog.text
    assert runs(tasks.ClockedTask) == ('succeeded', False)
    assert runs(tasks.ClockedTargetTask) == ('succeeded', True)


def test_a_burst_worker_waiting_for_a_delayed_task_says_so_once(memory_broker, records_url,
                                                                caplog):
    """With records on, a task due in ten minutes is one the burst waits for."""
    from kale.worker import Worker
    worker = Worker(queue_names=['default'], burst=True, broker=memory_broker)
    tasks.RecordTask.publish(None, delay_sec=600)
    with caplog.at_level('INFO', logger='kale.worker'):
        assert not worker.drained()
        assert not worker.drained()
    waits = [r.getMessage() for r in caplog.records if 'waiting for delayed' in r.getMessage()]
    assert len(waits) == 1, waits
    assert re.search(r'\(1 on default\).*within 15 minutes of its publish, so by '
                     r'\d\d:\d\d:\d\d at the latest', waits[0]), waits[0]


def test_a_burst_worker_tells_a_new_wait_after_it_ran_something(caplog):
    from kale.queue_config import TaskQueue
    from kale.transport import QueueCounts
    from kale.worker.burst import BurstEnd
    queue = TaskQueue('q', 1, 10, 30, 0, 1)
    end = BurstEnd('w', wall_clock=lambda: 0.0)
    with caplog.at_level('INFO', logger='kale.worker'):     # the records know of no later task
        assert not end.drained({queue: QueueCounts(0, 0, 2)}, due_later={})
        assert not end.drained({queue: QueueCounts(1, 0, 1)}, due_later={})
        assert not end.drained({queue: QueueCounts(0, 0, 1)}, due_later={})
        assert end.drained({queue: QueueCounts(0, 0, 0)}, due_later={})
    assert [r.getMessage().split('(')[1].split(')')[0] for r in caplog.records] == \
        ['2 on q', '1 on q']


def test_a_burst_worker_gives_up_within_one_request_of_burst_give_up_sec():
    """Each failed request takes 3 s (a connect timeout); the pauses between
    them stop at BURST_GIVE_UP_SEC, not one doubled pause after it."""
    from kale.worker.outage import Outage
    from tests.support.clock import FakeClock
    clock = FakeClock(start=0.0)
    outage = Outage('w', max_backoff_sec=30, give_up_after_sec=60, sleep=clock.advance,
                    clock=clock)
    with pytest.raises(SQSError, match=r'burst worker gave up after 6\d s without reaching SQS '
                                       r'\(BURST_GIVE_UP_SEC\): receiving failed'):
        while True:
            clock.advance(3.0)                   # the request that fails
            outage.failed('receiving', SQSError('connection refused'))
    assert clock() <= 3.0 + 60 + 3.0       # the first failure, the give-up time, one request
