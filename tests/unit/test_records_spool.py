"""Outcomes kept on disk while the records store cannot take them, and
written by the next worker when their own worker is gone."""
import os
import stat
import subprocess

import pytest

from kale import records
from kale.app import default_app
from kale.conf import settings
from kale.records.spool import Spool
from tests import records_tasks as rt
from tests.support.work import work


def gone_pid():
    process = subprocess.Popen(['true'])
    process.wait()
    return process.pid


def spool_of(directory, pid):
    other = Spool(str(directory))
    other.path = os.path.join(str(directory), '%s_%d.jsonl' % (other.host, pid))
    return other


def test_kept_rows_are_owner_only_on_disk_and_gone_once_written(tmp_path):
    spool = Spool(str(tmp_path / 'spool'))
    spool.keep([{'id': 'a', 'status': 'succeeded', 'updated_at': 1.0}])
    assert stat.S_IMODE(os.stat(spool.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(spool.directory).st_mode) == 0o700
    spool.written()
    assert not os.path.exists(spool.path)


def test_the_spool_of_a_gone_worker_is_replayed_once(tmp_path):
    directory = tmp_path / 'spool'
    dead = spool_of(directory, gone_pid())
    dead.keep([{'id': 'a', 'updated_at': 1.0}, {'id': 'b', 'updated_at': 2.0}])
    alive = spool_of(directory, os.getppid())
    alive.keep([{'id': 'c', 'updated_at': 3.0}])
    mine = Spool(str(directory))
    mine.keep([{'id': 'd', 'updated_at': 4.0}])
    written = []
    assert mine.replay(written.extend) == 2
    assert [row['id'] for row in written] == ['a', 'b']
    assert not os.path.exists(dead.path)
    assert os.path.exists(alive.path) and os.path.exists(mine.path)
    assert mine.replay(written.extend) == 0


def test_a_spool_waits_while_the_store_is_still_down(tmp_path):
    directory = tmp_path / 'spool'
    dead = spool_of(directory, gone_pid())
    dead.keep([{'id': 'a', 'updated_at': 1.0}])

    def down(rows):
        raise ConnectionError('store down')
    assert Spool(str(directory)).replay(down) == 0
    assert os.path.exists(dead.path)


def test_outcomes_the_store_did_not_take_reach_it_through_the_next_worker(
        memory_broker, records_url, monkeypatch):
    """A worker whose store is down spools its outcomes before deleting; if it
    is then killed, the next worker to start writes them."""
    task_id = rt.PlainTask.publish(None, 1)
    recorder = default_app().recorder
    assert recorder.flush()

    def down(*args, **kwargs):
        raise ConnectionError('store down')
    monkeypatch.setattr(recorder.writer, '_write', down)
    monkeypatch.setattr(recorder, 'settle_wait_sec', 0.3)
    from kale.records import recorder as recorder_module
    monkeypatch.setattr(recorder_module, 'EXIT_FLUSH_SEC', 0.3)     # the store stays down
    work(memory_broker)
    assert memory_broker.counts(memory_broker.queues['default']).total == 0     # deleted
    assert any(task_id in line for line in open(recorder.spool.path))
    writer = recorder.writer
    with writer._lock:                  # killed now: its thread stops...
        writer._stopping = True
        writer._wake.notify()
    writer._stop.set()
    writer._thread.join(10)
    assert not writer._thread.is_alive()
    with writer._lock:                  # ...and what it held in memory is gone
        writer._events.clear()
        writer._published.clear()
    monkeypatch.undo()
    os.rename(recorder.spool.path, spool_of(recorder.spool.directory, gone_pid()).path)
    assert records.get(task_id).status == 'queued'
    recorder.replay_spools()            # what the next worker does when it starts
    assert records.get(task_id).status == 'succeeded'


@pytest.mark.parametrize('wait', [0])
def test_with_no_settle_wait_nothing_is_spooled(memory_broker, records_url, wait):
    from kale.records.recorder import reset_recorders
    with settings.override(RECORDS_SETTLE_WAIT_SEC=wait):
        reset_recorders()
        rt.PlainTask.publish(None, 1)
        work(memory_broker)
        assert not os.path.exists(default_app().recorder.spool.path)
