"""Unique tasks (unique_for_sec), decided in the task records on SQLite and
PostgreSQL: a second publish of the same task and arguments returns the
first's id and sends nothing while it waits or runs, two racing publishers
get one task, a finished or expired one frees the key, and the outbox
honours it when its relay sends."""
from __future__ import annotations

import threading

import pytest

from kale import outbox, records
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import PublishError, SQSError
from kale.outbox.relay import Relay, with_records
from kale.store.sql.outbox_schema import open_database
from tests import outbox_tasks as ot
from tests.support.work import work


@pytest.fixture
def broker(memory_broker, any_records_url):
    return memory_broker


def runs(path):
    return path.read_text().split() if path.exists() else []


def test_a_second_publish_returns_the_waiting_task(broker, tmp_path):
    out = str(tmp_path / 'runs')
    first = ot.UniqueNote.publish(None, out, 'a')
    assert ot.UniqueNote.publish(None, out, 'a') == first
    other = ot.UniqueNote.publish(None, out, 'b')
    assert other != first
    assert ot.Note.publish(None, out, 'a', unique_for_sec=60) != first   # another task
    work(broker)
    assert sorted(runs(tmp_path / 'runs')) == ['a', 'a', 'b']
    again = ot.UniqueNote.publish(None, out, 'a')                        # the first ended
    assert again != first
    ids = ot.UniqueNote.publish_batch(None, [((out, 'c'), {}), ((out, 'c'), {}),
                                             ((out, 'a'), {})])
    assert ids[0] == ids[1] and ids[2] == again


def test_unique_for_sec_0_on_a_call_publishes_that_call_as_not_unique(broker, tmp_path):
    out = str(tmp_path / 'runs')
    first = ot.UniqueNote.publish(None, out, 'a')
    second = ot.UniqueNote.publish(None, out, 'a', unique_for_sec=0)
    assert second != first
    assert ot.UniqueNote.publish(None, out, 'a') == first       # the class's window holds
    assert ot.Note.publish(None, out, 'a', unique_for_sec=0.0) not in (first, second)
    work(broker)
    assert sorted(runs(tmp_path / 'runs')) == ['a', 'a', 'a']


@pytest.mark.parametrize('window', [-1, True, float('nan'), 366 * 24 * 3600, '60'])
def test_a_bad_unique_for_sec_on_a_call_says_what_is_accepted(broker, window):
    with pytest.raises(PublishError) as caught:
        ot.Note.publish(None, 'x', 'y', unique_for_sec=window)
    assert str(caught.value) == (
        'task tests.outbox_tasks.Note: unique_for_sec must be seconds above 0 and at most '
        '31536000 (a year), or 0 for not unique on this call; got %r' % (window,))


def test_an_expired_key_is_free_again(broker):
    unique = records.store().unique
    assert unique.claim([('k', 'first')], 1000.0, 10) == ['first']
    assert unique.claim([('k', 'second')], 1009.0, 10) == ['first']   # held
    assert unique.claim([('k', 'third')], 1011.0, 10) == ['third']    # expired


def test_racing_publishers_get_one_task(broker, tmp_path):
    out = str(tmp_path / 'runs')
    ids, barrier = [], threading.Barrier(8)

    def publish():
        barrier.wait()
        ids.append(ot.UniqueNote.publish(None, out, 'race'))
    threads = [threading.Thread(target=publish) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(ids) == 8 and len(set(ids)) == 1
    work(broker)
    assert runs(tmp_path / 'runs') == ['race']


def test_a_failed_send_frees_the_key(broker, tmp_path):
    out = str(tmp_path / 'runs')
    real_send = broker.send

    def down(queue, messages):
        raise SQSError('SQS is down (a test outage)', retryable=True)
    broker.send = down
    with pytest.raises(SQSError):
        ot.UniqueNote.publish(None, out, 'lost?')
    broker.send = real_send
    task_id = ot.UniqueNote.publish(None, out, 'lost?')
    work(broker)
    assert runs(tmp_path / 'runs') == ['lost?'] and records.get(task_id).status == 'succeeded'


def test_without_records_it_says_what_is_missing(memory_broker, tmp_path):
    with settings.override(RECORDS_URL=''):
        with pytest.raises(PublishError, match=r'^task tests\.outbox_tasks\.UniqueNote: '
                                               r'unique_for_sec is decided in the task records: '
                                               r'set RECORDS_URL$'):
            ot.UniqueNote.publish(None, 'x', 'y')
    with pytest.raises(PublishError, match='unique_for_sec must be seconds'):
        ot.Note.publish(None, 'x', 'y', unique_for_sec=-1)


def test_the_outbox_honours_it_when_the_relay_sends(broker, any_records_url, tmp_path):
    engine = open_database(any_records_url)
    outbox.init(engine)
    out = str(tmp_path / 'runs')
    with engine.begin() as conn:
        first = outbox.publish(conn, ot.UniqueNote, None, out, 'once')
    with engine.begin() as conn:
        second = outbox.publish(conn, ot.UniqueNote, None, out, 'once')
    assert first != second

    relay = Relay(engine, broker, config=settings.config, **with_records(default_app()))
    assert relay.send_round() == 2
    work(broker)
    assert runs(tmp_path / 'runs') == ['once']
    duplicate = records.get(second)
    assert duplicate.status == 'deduplicated' and duplicate.duplicate_of == first
    engine.dispose()
