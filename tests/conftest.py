"""Fixtures: test settings, and a real SQS endpoint (`kale sqs-local` on
127.0.0.1, or the one KALE_TEST_SQS_ENDPOINT names); and the order tests run
in (slow ones first)."""
from __future__ import annotations

import os
import uuid

import pytest

from kale.cli.sqs_local import SQSLocalProcess
from kale.conf import ENVIRONMENT_VARIABLE, settings
from tests.support.endpoint import (
    ENDPOINT_VARIABLE,
    ROOT,
    TEST_SETTINGS,
    PayloadBucket,
    SQSHelper,
    given_endpoint,
    subprocess_env,
)

#: The suite (and the worker processes it starts) runs under
#: tests.kale_test_settings, read once: the default app is built from it.
os.environ[ENVIRONMENT_VARIABLE] = TEST_SETTINGS


@pytest.fixture
def app():
    """An app of its own for a test of one part: the test settings on the
    in-memory transport, with a FakeClock (``app.clock``) its publisher and
    workers read; ``app.replace(NAME=value)`` changes a setting. The global
    settings are not touched."""
    from kale.app import App
    from kale.config import Config
    from kale.transport.memory import MemoryTransport
    from tests.support.clock import FakeClock
    clock = FakeClock()
    config = Config.load(TEST_SETTINGS, fresh=True)     # under this test's environment
    return App(config, transport=MemoryTransport(clock=clock), clock=clock)


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch):
    """For a test that changes the test settings' environment (KALE_TEST_*,
    or KALE_SETTINGS_MODULE) for itself and the processes it starts: call it
    with the variables; the settings are read again. At the end they are the
    suite's again, the same configuration object."""
    with settings.kept():
        def change(**variables: str) -> None:
            for name, value in variables.items():
                monkeypatch.setenv(name, value)
            settings.reload()
        yield change
        monkeypatch.undo()
        # The settings module runs again in the suite's environment: its
        # attributes are what Config.load reads, and left as the test's
        # (TASK_MODULES of topic tasks) they failed a later test on the
        # same xdist worker.
        settings.reload()
        _ = settings.config


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_SETTINGS_BEFORE] = settings.config


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    """A worker process a test left running is killed. No test leaves the
    global settings changed (a test that changes them does it through a
    fixture that puts them back: settings_env, sqs, records_url, ...): a
    leak fails here, naming the test, rather than some later test."""
    from tests.support.processes import kill_leftovers
    kill_leftovers()
    before = item.stash.get(_SETTINGS_BEFORE, None)
    if before is not None and settings.config is not before:
        raise AssertionError('%s left the global settings changed: change them through the '
                             'settings_env fixture (or settings.override as a with block)'
                             % item.nodeid)


_SETTINGS_BEFORE = pytest.StashKey[object]()


@pytest.fixture(scope='session')
def sqs_endpoint():
    """One endpoint for the session; tests isolate by QUEUE_PREFIX. The
    embedded one, or the endpoint KALE_TEST_SQS_ENDPOINT names (LocalStack,
    ElasticMQ, ...), which must answer: a test that needs it fails otherwise."""
    given = os.environ.get(ENDPOINT_VARIABLE, '').strip()
    if given:
        try:
            url, problem = given_endpoint(given), ''
        except ValueError as exc:
            url, problem = '', str(exc)
        if problem:     # outside the except: the one line, without the ValueError's context
            pytest.fail(problem, pytrace=False)
        yield url
        return
    endpoint = SQSLocalProcess(env=subprocess_env(), cwd=ROOT)
    yield endpoint.url
    endpoint.stop()


@pytest.fixture
def sqs(sqs_endpoint: str, settings_env):
    """Settings pointed at the endpoint with queues of this test's own."""
    prefix = 't%s-' % uuid.uuid4().hex[:10]
    settings_env(KALE_TEST_ENDPOINT=sqs_endpoint, KALE_TEST_PREFIX=prefix)
    yield SQSHelper(sqs_endpoint, prefix)


@pytest.fixture
def payload_bucket(sqs: SQSHelper, settings_env):
    """A bucket of this test's own on the endpoint's S3, set as PAYLOAD_BUCKET
    (for worker subprocesses too); yields a helper to look into it."""
    bucket = PayloadBucket(sqs.url, 'kale-test-%s' % uuid.uuid4().hex[:12])
    settings_env(KALE_TEST_PAYLOAD_BUCKET=bucket.name)
    yield bucket


@pytest.fixture
def memory_broker():
    """A broker over the in-memory transport; Task.publish sends to it."""
    from kale import publisher
    from kale.broker import Broker
    from kale.queue_config import build_queue_config
    from kale.transport.memory import MemoryTransport
    broker = Broker(MemoryTransport(), build_queue_config(settings.config), config=settings.config)
    previous = publisher.set_publisher(publisher.Publisher(broker))
    yield broker
    publisher.set_publisher(previous)


def _use_records(url: str, settings_env) -> str:
    settings_env(KALE_TEST_RECORDS_URL=url)
    return url


@pytest.fixture
def records_url(tmp_path, settings_env):
    """Task records on, in a SQLite file of this test's own (also for worker
    subprocesses, through KALE_TEST_RECORDS_URL)."""
    from kale.records.recorder import reset_recorders
    yield _use_records('sqlite:///%s' % (tmp_path / 'records.db'), settings_env)
    reset_recorders()


@pytest.fixture(scope='session')
def postgres_cluster():
    """One throwaway PostgreSQL server for this pytest process: the test
    skips (fails in CI, see tests/support/unavailable.py) when none is installed."""
    from tests.support.postgres import Cluster, find_binaries
    from tests.support.unavailable import unavailable
    binaries = find_binaries()
    if binaries is None:
        unavailable('PostgreSQL is not installed (no initdb/pg_ctl): the PostgreSQL records '
                    'tests need it; .ci/run installs it with apt-get')
    cluster = Cluster(binaries)
    yield cluster
    cluster.destroy()


@pytest.fixture
def postgres_url(postgres_cluster, settings_env):
    """Task records on, in a fresh database of the session's PostgreSQL server."""
    from kale.records.recorder import reset_recorders
    yield _use_records(postgres_cluster.new_database(), settings_env)
    reset_recorders()


@pytest.fixture(params=['sqlite', 'postgres'])
def any_records_url(request, tmp_path, settings_env):
    """Task records on, once in SQLite and once in PostgreSQL."""
    from kale.records.recorder import reset_recorders
    if request.param == 'sqlite':
        url = 'sqlite:///%s' % (tmp_path / 'records.db')
    else:
        url = request.getfixturevalue('postgres_cluster').new_database()
    yield _use_records(url, settings_env)
    reset_recorders()


@pytest.fixture(params=['serial', 'threads', 'asyncio'])
def pool(request):
    """Each pool in turn: every Worker(...) the test makes runs its tasks so
    (WORKER_POOL). A module runs all its tests on every pool with
    ``pytestmark = pytest.mark.usefixtures('pool')``."""
    from kale.conf import settings
    with settings.override(WORKER_POOL=request.param):
        yield request.param


@pytest.fixture
def pool_app(app, pool):
    """An app of the test's own: the test settings (the ``app`` fixture's) on
    an in-memory transport, its workers on this run's pool (WORKER_POOL: the
    ``pool`` fixture sets it in the global settings only). On the machine's
    clock, not a FakeClock: these bursts wait out retry delays and
    visibility timeouts, which only a moving clock ends, and a FakeClock
    moves only when the test moves it, not while ``worker.run()`` blocks."""
    from kale.app import App
    from kale.transport.memory import MemoryTransport
    return App(app.config, transport=MemoryTransport(), WORKER_POOL=pool)


@pytest.fixture
def record(tmp_path, monkeypatch):
    """The file tasks in tests/tasks.py record their events in (KALE_TEST_RECORD)."""
    path = str(tmp_path / 'record')
    monkeypatch.setenv('KALE_TEST_RECORD', path)
    return path


def applies(item) -> bool:
    """Whether the item's combination of fixture parameters is one its
    markers ask for (serial_only, applies, not_together): the others are
    deselected, so a skip in the suite's summary is never a combination that
    does not apply."""
    params = getattr(getattr(item, 'callspec', None), 'params', {})
    if item.get_closest_marker('serial_only') is not None and \
            params.get('pool', 'serial') != 'serial':
        return False
    for marker in item.iter_markers('applies'):
        if any(name in params and params[name] not in values
               for name, values in marker.kwargs.items()):
            return False
    for marker in item.iter_markers('not_together'):
        if all(params.get(name, object()) == value for name, value in marker.kwargs.items()):
            return False
    return True


def pytest_collection_modifyitems(config, items):
    """Combinations of parameters that do not apply are deselected (see
    applies). Slow tests first: under xdist they start at once and the quick
    ones fill the gaps, instead of one worker meeting several slow ones at the end."""
    kept, deselected = [], []
    for item in items:
        (kept if applies(item) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    items.sort(key=lambda item: item.get_closest_marker('slow') is None)
