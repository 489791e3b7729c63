"""What a records database can and cannot be made to do: a row written by
someone without the signing key is never published again; with an
encryption key, the database holds no task data in clear; its files are
owner-only and never reached through a planted link."""
import os
import stat

import pytest
from sqlalchemy import select

from kale import records
from kale.conf import settings
from kale.exceptions import ImproperlyConfigured, RecordConflictError
from kale.store.sealing import UNREADABLE
from kale.store.sql import cancels
from kale.store.sql.schema import tasks
from tests import records_tasks as rt
from tests.support.work import work

SECRET = 'an-encryption-secret-of-32-chars!!'
CLEAR = 'card 4111-1111-1111-1111'


def failed_task(broker, *args):
    task_id = rt.BrokenTask.publish(None, *args)
    work(broker)
    assert records.get(task_id).status == 'failed'
    return task_id


def failed_switch(broker, *args):
    task_id = rt.SwitchTask.publish(None, *args)
    work(broker)
    assert records.get(task_id).status == 'failed'
    return task_id


def raw_row(task_id):
    with records.store().begin() as conn:
        return dict(conn.execute(select(tasks).where(tasks.c.id == task_id)).mappings().one())


def tamper(task_id, **values):
    with records.store().begin(write=True) as conn:
        conn.execute(tasks.update().where(tasks.c.id == task_id).values(**values))


def queued(broker):
    return broker.counts(broker.queues['default']).visible


def test_a_record_untouched_is_retried(memory_broker, any_records_url):
    task_id = failed_task(memory_broker)
    records.retry(task_id)
    assert queued(memory_broker) == 1


@pytest.mark.parametrize('change', ['arguments', 'task', 'forged', 'copied'])
def test_a_record_changed_in_the_database_is_never_published_again(
        memory_broker, any_records_url, change):
    task_id = failed_task(memory_broker)
    other = failed_task(memory_broker)
    inputs = raw_row(task_id)['inputs']
    if change == 'arguments':
        tamper(task_id, inputs=dict(inputs, args=['rm -rf /']))
    elif change == 'task':
        tamper(task_id, task='tests.records_tasks.PlainTask')
    elif change == 'forged':            # a row of the attacker's own, with no MAC
        tamper(task_id, task='tests.records_tasks.PlainTask',
               inputs={'args': [1], 'kwargs': {}, 'exact': True})
    else:                               # a genuine MAC, from another task's row
        tamper(task_id, inputs=dict(inputs, args=[7], mac=raw_row(other)['inputs']['mac']))
    with pytest.raises(RecordConflictError, match='not signed by this deployment'):
        records.retry(task_id)
    assert queued(memory_broker) == 0
    assert records.get(task_id).retried_as is None


@pytest.mark.parametrize('change', ['copied whole', 'labels', 'queue'])
def test_the_inputs_mac_covers_the_task_id_the_labels_and_the_queue(
        memory_broker, any_records_url, change):
    """Inputs and MAC copied whole from another task of the same class and
    arguments, labels added, or the queue changed: the retry is refused."""
    task_id = failed_switch(memory_broker, 'same')
    other = failed_switch(memory_broker, 'same')
    if change == 'copied whole':
        tamper(task_id, inputs=raw_row(other)['inputs'])
        raw = raw_row(task_id)
        assert raw['inputs'] == raw_row(other)['inputs']
    elif change == 'labels':
        tamper(task_id, labels={'tenant': 'attacker'})
        assert records.get(task_id).labels == {'tenant': 'attacker'}
    else:
        tamper(task_id, queue='high')
    with pytest.raises(RecordConflictError, match='not signed by this deployment'):
        records.retry(task_id)
    assert queued(memory_broker) == 0
    records.retry(other)                        # the original still retries
    assert queued(memory_broker) == 1


def test_a_retry_claimed_again_sends_the_same_task_again(memory_broker, any_records_url):
    """A database writer who clears ``retried_as`` gets the retry published
    again, under the same task id: one task, which a worker with records
    runs once."""
    task_id = failed_switch(memory_broker, 'x')
    first = records.retry(task_id)
    tamper(task_id, retried_as=None)
    assert records.retry(task_id) == first
    rt.SwitchTask.failing = False
    try:
        work(memory_broker)
        tamper(task_id, retried_as=None)
        assert records.retry(task_id) == first          # sent again...
        worker = work(memory_broker)
    finally:
        rt.SwitchTask.failing = True
    assert worker.stats['skipped'] == 1                  # ...and not run again
    record = records.get(first)
    assert (record.status, record.attempts) == ('succeeded', 1)


def test_the_api_answers_a_tampered_retry_with_a_409(memory_broker, records_url):
    from kale.web import create_app
    from tests.support.web import api_client
    task_id = failed_task(memory_broker)
    tamper(task_id, task='tests.records_tasks.PlainTask')
    answer = api_client(create_app(broker=lambda: memory_broker)).post(
        '/api/tasks/%s/retry' % task_id)
    assert answer.status_code == 409 and 'not signed' in answer.json()['error']
    assert queued(memory_broker) == 0


def test_with_an_encryption_key_the_database_holds_no_task_data_in_clear(
        memory_broker, any_records_url):
    with settings.override(MESSAGE_ENCRYPTION_KEY=SECRET):
        done = rt.ResultTask.publish(None, CLEAR, '!')
        broken = rt.TellingBrokenTask.publish(None, CLEAR)
        work(memory_broker)
        row, failed_row = raw_row(done), raw_row(broken)
        assert CLEAR not in repr(row) and CLEAR not in repr(failed_row)
        assert set(row['inputs']) == {'kale_sealed'} and set(row['result']) == {'kale_sealed'}
        assert failed_row['error_message'].startswith('kale-sealed:')
        assert failed_row['error_traceback'].startswith('kale-sealed:')
        record, failure = records.get(done), records.get(broken)
        assert record.args == [CLEAR, '!'] and CLEAR in repr(record.result)
        assert CLEAR in failure.error_message and CLEAR in failure.error_traceback
        queue = memory_broker.queues['default']
        [dead] = memory_broker.transport.receive(memory_broker.dead_letter_name(queue), 10, 0, 30)
        assert dead.attributes['kale_dead_letter_reason'] == 'no_retries: ValueError'
        records.retry(broken)                         # sealed inputs still authenticate
        assert queued(memory_broker) == 1
    assert records.get(done).result == UNREADABLE     # a reader without the key
    assert records.get(done).inputs == {'sealed': UNREADABLE}


def test_sensitive_data_can_be_dropped_instead(memory_broker, any_records_url):
    with settings.override(RECORDS_SENSITIVE_DATA='drop'):
        done = rt.ResultTask.publish(None, CLEAR, '!')
        work(memory_broker)
        row = raw_row(done)
    assert row['inputs'] is None and row['result'] is None and row['status'] == 'succeeded'


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_database_and_its_signal_file_are_owner_only(memory_broker, records_url, tmp_path):
    old = os.umask(0o022)
    try:
        task_id = rt.PlainTask.publish(None, 1)
        records.store().cancel(task_id)
    finally:
        os.umask(old)
    database = str(tmp_path / 'records.db')
    assert mode(database) == 0o600
    assert mode(database + cancels.SIGNAL_SUFFIX) == 0o600
    for sibling in ('-wal', '-shm'):
        if os.path.exists(database + sibling):
            assert mode(database + sibling) == 0o600


def test_a_link_planted_at_the_signal_file_is_not_followed(memory_broker, records_url, tmp_path):
    victim = tmp_path / 'victim'
    victim.write_bytes(b'precious')
    signal = str(tmp_path / 'records.db') + cancels.SIGNAL_SUFFIX
    records.store()
    if os.path.exists(signal):
        os.unlink(signal)
    os.symlink(victim, signal)
    task_id = rt.PlainTask.publish(None, 1)
    with pytest.raises(Exception, match='signal'):
        records.store().cancel(task_id)
    assert victim.read_bytes() == b'precious'
    assert records.get(task_id).status == 'queued'


def test_a_database_behind_a_link_in_a_shared_directory_is_refused(tmp_path):
    from kale.store.sql.records import RecordStore
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(shared, 0o1777)
    os.symlink(tmp_path / 'elsewhere.db', shared / 'records.db')
    with pytest.raises(ImproperlyConfigured, match='symbolic link in a directory anyone'):
        RecordStore('sqlite:///%s' % (shared / 'records.db'), settings.config)


def test_a_database_file_another_user_made_in_a_shared_directory_is_refused(tmp_path,
                                                                          monkeypatch):
    """A file squatted in /tmp by someone else before Kale opened it: refused
    in one line; a file of ours that others could read is made owner-only."""
    from kale.store import files
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o1777)
    squatted = shared / 'records.db'
    squatted.write_bytes(b'')
    monkeypatch.setattr(files.os, 'geteuid', lambda: os.stat(squatted).st_uid + 1)
    with pytest.raises(ImproperlyConfigured, match='a file another user made in a directory '
                                                   'anyone can write to'):
        files.prepare_database(str(squatted), 'OUTBOX_URL')
    monkeypatch.undo()
    squatted.chmod(0o644)
    files.prepare_database(str(squatted))
    assert mode(squatted) == 0o600


def test_the_relays_lock_file_is_never_opened_through_a_link(tmp_path):
    from kale.broker import Broker
    from kale.exceptions import OutboxError
    from kale.outbox.relay import Relay
    from kale.queue_config import build_queue_config
    from kale.store.sql.outbox_schema import open_database
    from kale.transport.memory import MemoryTransport
    target = tmp_path / 'elsewhere'
    (tmp_path / 'app.db-kale-relay.lock').symlink_to(target)
    relay = Relay(open_database('sqlite:///%s' % (tmp_path / 'app.db')),
                  Broker(MemoryTransport(), build_queue_config(settings.config)), config=settings.config)
    with pytest.raises(OutboxError, match='must be a file of this user, not a symbolic link'):
        relay.claim_database()
    assert not target.exists()
