"""The outbox through the real commands over HTTP: `kale outbox init`
creates the tables, the application commits a task, `kale relay --burst`
sends it to the embedded SQS endpoint and a real worker runs it; a second
relay on the same SQLite database is refused in one line."""
import signal
import subprocess
import sys

import pytest
from sqlalchemy import select

from kale import outbox, records
from kale.store.sql.outbox_schema import open_database
from kale.store.sql.outbox_schema import outbox as outbox_table
from tests import outbox_tasks as ot
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.processes import WorkerProcess, wait_for

pytestmark = pytest.mark.slow


def kale(*args, **kwargs):
    return subprocess.run([sys.executable, '-m', 'kale', *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=60, **kwargs)


def test_init_relay_and_a_worker(sqs, records_url, tmp_path):
    app_url = 'sqlite:///%s' % (tmp_path / 'app.db')
    first = kale('outbox', 'init', '--url', app_url)
    assert first.returncode == 0, first.stderr
    assert 'applied 1: create kale_outbox' in first.stdout
    assert 'up to date' in kale('outbox', 'init', '--url', app_url).stdout
    out = tmp_path / 'runs'
    engine = open_database(app_url)
    with engine.begin() as conn:
        task_id = outbox.publish(conn, ot.Note, None, str(out), 'committed')
    engine.dispose()
    relay = kale('relay', '--url', app_url, '--burst')
    assert relay.returncode == 0, relay.stderr
    assert records.get(task_id).status == 'queued'
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    try:
        wait_for(lambda: out.exists(), 60, 'the task to run')
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert out.read_text() == 'committed\n'


def test_a_second_relay_on_one_sqlite_database_is_refused(sqs, tmp_path):
    app_url = 'sqlite:///%s' % (tmp_path / 'app.db')
    assert kale('outbox', 'init', '--url', app_url).returncode == 0
    running = subprocess.Popen([sys.executable, '-m', 'kale', 'relay', '--url', app_url],
                               cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: 'sending the outbox' in (running.stdout.readline() or ''), 30,
                 'the first relay to start')
        second = kale('relay', '--url', app_url, '--burst')
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1].startswith(
            'kale: error: another relay already sends the outbox of')
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(30)


def test_relay_without_a_url_says_what_to_give(tmp_path):
    done = kale('relay', '--burst')
    assert done.returncode == 1 and "no outbox database: give --url URL" in done.stderr


def test_the_relay_serves_its_metrics(sqs, tmp_path):
    import socket
    import urllib.request
    app_url = 'sqlite:///%s' % (tmp_path / 'app.db')
    assert kale('outbox', 'init', '--url', app_url).returncode == 0
    engine = open_database(app_url)
    with engine.begin() as conn:
        outbox.publish(conn, ot.Note, None, str(tmp_path / 'runs'), 'x')
    engine.dispose()
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    running = subprocess.Popen([sys.executable, '-m', 'kale', 'relay', '--url', app_url,
                                '--metrics-port', str(port)], cwd=ROOT,
                               env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def scraped():
            try:
                with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                return False
            return 'kale_outbox_sent_total 1.0' in text and 'kale_outbox_pending 0.0' in text
        wait_for(scraped, 30, 'the relay to send the row and say so on /metrics')
    finally:
        running.send_signal(signal.SIGTERM)
        assert running.wait(30) == 0


def test_a_relay_killed_between_send_and_delete_sends_again_and_the_task_runs_once(
        sqs, any_records_url, tmp_path):
    """A real ``kale relay`` process SIGKILLed after its SendMessageBatch and
    before its delete: the next relay sends the row again with the same task
    id, the queue holds two messages, and the worker (records on) runs the
    task once and settles the duplicate as skipped."""
    assert kale('outbox', 'init', '--url', any_records_url).returncode == 0
    out = tmp_path / 'runs'
    engine = open_database(any_records_url)
    with engine.begin() as conn:
        task_id = outbox.publish(conn, ot.Note, None, str(out), 'once')
    dying = subprocess.run([sys.executable, '-m', 'tests.support.dying_relay', 'relay', '--url',
                            any_records_url, '--burst'], cwd=ROOT, env=subprocess_env(),
                           capture_output=True, text=True, timeout=60)
    assert dying.returncode == -signal.SIGKILL, dying.stderr
    with engine.begin() as conn:                      # the row outlived its send
        assert conn.execute(select(outbox_table.c.task_id)).scalars().all() == [task_id]
    again = kale('relay', '--url', any_records_url, '--burst')
    assert again.returncode == 0, again.stderr
    with engine.begin() as conn:
        assert conn.execute(select(outbox_table.c.task_id)).scalars().all() == []
    engine.dispose()
    assert sqs.count('default') == 2                  # at least once: the duplicate is there
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    try:
        wait_for(lambda: sqs.count('default') == 0 and records.get(task_id).status == 'succeeded',
                 60, 'both messages to settle')
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert out.read_text() == 'once\n'


def test_a_row_written_with_sql_never_becomes_a_signed_task(sqs, records_url, tmp_path):
    """Someone who can write only the application's database inserts a
    kale_outbox row: a garbage body, and a record naming a task and
    arguments of their choice, failed. A real ``kale relay`` sets it aside
    unsent (its publisher's MAC fails) and writes no record; ``kale tasks
    retry --failed`` finds nothing to publish; a real worker never runs
    the inserted arguments. A genuine row committed beside it goes through."""
    import json
    import time
    app_url = 'sqlite:///%s' % (tmp_path / 'app.db')
    assert kale('outbox', 'init', '--url', app_url).returncode == 0
    out = tmp_path / 'runs'
    forged = 'f' * 32
    engine = open_database(app_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO kale_outbox (task_id, task, queue, body, delay_sec, record, created_at) "
            "VALUES (?, 'tests.outbox_tasks.Note', 'default', 'not a kale message', 0, ?, ?)",
            (forged, json.dumps({'id': forged, 'task': 'tests.outbox_tasks.Note',
                                 'queue': 'default', 'status': 'failed', 'attempts': 1,
                                 'inputs': {'args': [str(out), 'INJECTED'], 'kwargs': {},
                                            'exact': True},
                                 'published_at': time.time(), 'updated_at': time.time()}),
             time.time()))
        genuine = outbox.publish(conn, ot.Note, None, str(out), 'genuine')
    relay = kale('relay', '--url', app_url, '--burst')
    assert relay.returncode == 0, relay.stderr
    assert 'set aside in kale_outbox_rejected' in relay.stderr and forged in relay.stderr
    with engine.begin() as conn:
        assert conn.execute(select(outbox_table.c.task_id)).scalars().all() == []
        [kept] = conn.exec_driver_sql('SELECT task_id, reason FROM kale_outbox_rejected').all()
    engine.dispose()
    assert kept[0] == forged and 'MAC' in kept[1]
    assert records.get(forged) is None and records.get(genuine).status == 'queued'
    assert sqs.count('default') == 1
    retried = kale('tasks', 'retry', '--failed')
    assert retried.returncode == 0, retried.stderr
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    try:
        wait_for(lambda: records.get(genuine).status == 'succeeded' and sqs.count('default') == 0,
                 60, 'the genuine task to run')
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert out.read_text() == 'genuine\n'
