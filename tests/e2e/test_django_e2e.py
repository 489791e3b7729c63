"""Kale in a real Django project (tests/django_project), through real
``manage.py`` processes on SQLite and on PostgreSQL: ``manage.py check`` on
the setting KALE, publish_on_commit committed, rolled back and in nested
atomic blocks, the outbox on Django's connection with ``manage.py kale
relay``, ``manage.py kale worker --burst`` running what committed (its
records in Django's database), and the tasks of an app's ``tasks`` module."""
import functools
import json
import os
import subprocess
import sys

import pytest

from kale import records
from kale.app import default_app
from tests.support.endpoint import ROOT

PROJECT = os.path.join(ROOT, 'tests', 'django_project')


class Project:
    """The test project on one database, and on this test's queues when
    given ``sqs``."""

    def __init__(self, database, sqs=None, root=PROJECT):
        self.database = database
        self.root = root
        env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
        env.update(PYTHONPATH=ROOT, PYTHONUNBUFFERED='1', KALE_TEST_DJANGO_DB=database)
        env.pop('DJANGO_SETTINGS_MODULE', None)
        if sqs is not None:
            env.update(KALE_TEST_ENDPOINT=sqs.url, KALE_TEST_PREFIX=sqs.prefix)
        self.env = env

    def manage(self, *args, check=True, **env):
        result = subprocess.run([sys.executable, 'manage.py', *args], cwd=self.root,
                                env=dict(self.env, **env), capture_output=True, text=True,
                                timeout=120)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def scenario(self, name, out):
        """Run a scenario of shop/management/commands/scenario.py: the ids of
        the tasks it committed and of those it rolled back."""
        return json.loads(self.manage('scenario', name, str(out)).stdout)

    @property
    def records_url(self):
        return self.database if '://' in self.database else 'sqlite:///' + self.database

    @functools.cached_property
    def records_app(self):
        """An app on the project's records (one: its recorder is its own)."""
        return default_app().replace(RECORDS_URL=self.records_url)

    def status(self, task_id):
        record = records.get(task_id, app=self.records_app)
        return record and record.status


@pytest.fixture(params=['sqlite', 'postgres'])
def database(request, tmp_path):
    """The project's database: a SQLite file, then a PostgreSQL database."""
    if request.param == 'sqlite':
        return str(tmp_path / 'db.sqlite3')
    return request.getfixturevalue('postgres_cluster').new_database()


@pytest.fixture
def shop(sqs, database):
    """The project migrated, on this test's queues."""
    from kale.records.recorder import reset_recorders
    project = Project(database, sqs)
    project.manage('migrate')
    yield project
    reset_recorders()


def lines(path):
    return sorted(path.read_text().splitlines()) if path.exists() else []


def test_check_passes_on_a_good_kale_and_names_a_bad_key(tmp_path):
    project = Project(str(tmp_path / 'db.sqlite3'))
    good = project.manage('check')
    assert 'no issues' in good.stdout
    for given, said in [({'QUEUE_PREFIX': 5}, 'setting QUEUE_PREFIX must be a string, got 5'),
                        ({'QUEUE_CONFG': 'q.yaml'},
                         "'QUEUE_CONFG' is not a Kale setting (did you mean QUEUE_CONFIG?)"),
                        ({'RECORDS': 'yes'}, "RECORDS must be 'django'")]:
        bad = project.manage('check', check=False, KALE_TEST_DJANGO_KALE=json.dumps(given))
        assert bad.returncode == 1
        errors = [line for line in bad.stderr.splitlines() if 'kale.E001' in line]
        assert len(errors) == 1 and said in errors[0], bad.stderr
        assert errors[0].startswith('?: (kale.E001) the Django setting KALE: ')


def test_a_kale_command_names_the_bad_key_in_one_line(tmp_path):
    project = Project(str(tmp_path / 'db.sqlite3'))
    result = project.manage('kale', 'queues', check=False,
                            KALE_TEST_DJANGO_KALE='{"BATCH_DELETE": 1, "QUEUE_PREFIX": 5}')
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "manage.py kale: error: the Django setting KALE: 'BATCH_DELETE' is not a Kale setting"]


def test_tasks_are_found_in_an_apps_tasks_module(tmp_path):
    """shop/tasks.py joins TASK_MODULES: its periodic task is listed."""
    project = Project(str(tmp_path / 'db.sqlite3'))
    assert project.manage('kale', 'settings', 'TASK_MODULES').stdout.splitlines()[0] == \
        "TASK_MODULES = ('shop.tasks',)"
    listed = project.manage('kale', 'schedules', 'list', '--json').stdout
    assert [entry['task'] for entry in json.loads(listed)['schedules']] == ['shop.tasks.Nightly']


@pytest.mark.slow
def test_publish_on_commit_sends_what_commits_and_nothing_that_rolls_back(shop, tmp_path):
    out = tmp_path / 'runs'
    committed = shop.scenario('commit', out)
    rolled_back = shop.scenario('rollback', out)
    outside = shop.scenario('outside', out)
    shop.manage('kale', 'worker', '--burst')
    assert lines(out) == ['batch 1', 'batch 2', 'committed', 'outside']
    for task_id in committed['committed'] + outside['committed']:
        assert shop.status(task_id) == 'succeeded'       # the id returned at the call
    assert shop.status(rolled_back['rolled_back'][0]) is None


@pytest.mark.slow
def test_nested_atomic_blocks_whose_savepoints_roll_back_send_nothing(shop, tmp_path):
    out = tmp_path / 'runs'
    nested = shop.scenario('nested', out)
    shop.manage('kale', 'worker', '--burst')
    assert lines(out) == ['inner kept', 'outer']
    assert [shop.status(task_id) for task_id in nested['committed']] == ['succeeded'] * 2
    assert [shop.status(task_id) for task_id in nested['rolled_back']] == [None, None]


@pytest.mark.slow
def test_the_outbox_on_djangos_connection_and_the_relay(shop, tmp_path):
    """``manage.py migrate`` made the tables (``kale outbox init`` finds them
    up to date); the rows commit with the orders, the relay reads
    DATABASES and sends them, a worker runs them."""
    assert 'up to date (version 2)' in shop.manage('kale', 'outbox', 'init').stdout
    out = tmp_path / 'runs'
    published = shop.scenario('outbox', out)
    shop.manage('kale', 'relay', '--burst')
    assert shop.status(published['committed'][0]) == 'queued'
    shop.manage('kale', 'worker', '--burst')
    assert lines(out) == ['outbox committed']
    assert shop.status(published['committed'][0]) == 'succeeded'
    assert shop.status(published['rolled_back'][0]) is None


@pytest.mark.slow
def test_the_workers_of_concurrency_run_as_manage_py_kale_worker(sqs, tmp_path):
    from kale.records.recorder import reset_recorders
    project = Project(str(tmp_path / 'db.sqlite3'), sqs)
    project.manage('migrate')
    out = tmp_path / 'runs'
    project.scenario('commit', out)
    try:
        done = project.manage('kale', 'worker', '--burst', '--concurrency', '2')
    finally:
        reset_recorders()
    assert lines(out) == ['batch 1', 'batch 2', 'committed']
    assert 'supervisor: started worker 1' in done.stderr
