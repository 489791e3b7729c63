"""The outbox on SQLite and on PostgreSQL, relayed to in-memory SQS and run
by real worker loops with records on: a rollback sends nothing, a commit
sends once, concurrent transactions all arrive, two PostgreSQL relays never
send a row twice, a relay that dies before its delete sends a duplicate the
workers run once, an SQS outage loses nothing, FIFO order holds, and
consume_once applies an effect once."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from sqlalchemy.orm import Session

from kale import outbox, records
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import OutboxError, PublishError, SQSError
from kale.outbox.relay import MAX_BACKOFF_SEC, Relay, with_records
from kale.store.sql import outbox as sql_outbox
from kale.store.sql.outbox_schema import open_database
from kale.store.sql.outbox_schema import outbox as outbox_table
from tests import outbox_tasks as ot
from tests.support.work import work

effects = Table('app_effects', MetaData(), Column('id', Integer, primary_key=True),
                Column('task_id', String(128)))


@pytest.fixture
def app(memory_broker, any_records_url):
    """The application's database (here the records' own), with the outbox
    tables and a table of its own; and its relay."""
    engine = open_database(any_records_url)
    outbox.init(engine)
    effects.create(engine, checkfirst=True)

    relay = Relay(engine, memory_broker, poll_sec=0.05, config=settings.config,
                  **with_records(default_app()))
    yield engine, relay, memory_broker
    engine.dispose()


def lines(path):
    return path.read_text().split() if path.exists() else []


def pending(engine):
    with engine.begin() as conn:
        return conn.execute(select(func.count()).select_from(outbox_table)).scalar()


def test_a_rollback_sends_nothing_and_a_commit_sends_once(app, tmp_path):
    engine, relay, broker = app
    out = tmp_path / 'runs'
    with pytest.raises(RuntimeError):
        with engine.begin() as conn:
            outbox.publish(conn, ot.Note, None, str(out), 'rolled-back')
            raise RuntimeError('the order failed')
    with engine.begin() as conn:
        task_id = outbox.publish(conn, ot.Note, None, str(out), 'committed',
                                 labels={'order': '7'})
    assert records.get(task_id) is None                # nothing recorded before the send
    assert pending(engine) == 1
    assert relay.send_round() == 1 and relay.send_round() == 0
    assert pending(engine) == 0
    record = records.get(task_id)
    assert record.status == 'queued' and record.labels == {'order': '7'}
    assert record.message_id
    work(broker)
    assert lines(out) == ['committed']
    assert records.get(task_id).status == 'succeeded'


def test_a_session_and_with_options_and_publish_batch(app, tmp_path):
    engine, relay, broker = app
    out = tmp_path / 'runs'
    with Session(engine) as session, session.begin():
        ids = outbox.publish_batch(session, ot.Note.with_options(queue='high'), None,
                                   [((str(out), 'a'), {}), ((str(out), 'b'), {})])
    relay.send_round()
    assert {records.get(task_id).queue for task_id in ids} == {'high'}
    work(broker, queues=['high'])
    assert sorted(lines(out)) == ['a', 'b']


def test_a_bad_call_is_refused_like_publish_and_inserts_nothing(app, tmp_path):
    engine = app[0]
    with engine.begin() as conn:
        with pytest.raises(PublishError, match='arguments do not match run_task'):
            outbox.publish(conn, ot.Note, None, 'only-one')
        with pytest.raises(PublishError, match='delay_sec'):
            outbox.publish(conn, ot.Note, None, 'a', 'b', delay_sec=-1)
    assert pending(engine) == 0
    with pytest.raises(OutboxError, match='SQLAlchemy Connection or Session'):
        outbox.publish(object(), ot.Note, None, 'a', 'b')


@pytest.mark.slow
def test_a_thousand_rows_from_four_concurrent_transactions_all_arrive(app, tmp_path):
    engine, relay, broker = app
    out = tmp_path / 'runs'
    failures = []

    def writer(number):
        try:
            with engine.begin() as conn:
                outbox.publish_batch(conn, ot.Note, None,
                                     [((str(out), '%d-%d' % (number, i)), {}) for i in range(250)])
        except Exception as exc:                       # pragma: no cover - reported below
            failures.append(exc)
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    relay.run(threading.Event(), until_empty=True)
    assert relay.counts.sent == 1000 and pending(engine) == 0
    for _ in range(3):
        work(broker)
    assert len(lines(out)) == 1000 and len(set(lines(out))) == 1000


@pytest.mark.applies(any_records_url=('postgres',))      # SQLite allows one relay
def test_two_relays_on_postgresql_never_send_a_row_twice(app, tmp_path, request):
    engine, relay, broker = app
    assert engine.dialect.name == 'postgresql'
    out = tmp_path / 'runs'
    with engine.begin() as conn:
        outbox.publish_batch(conn, ot.Note, None, [((str(out), str(i)), {}) for i in range(400)])
    other = Relay(engine, broker, poll_sec=0.05, config=settings.config)
    runs = [threading.Thread(target=r.run, args=(threading.Event(), True)) for r in (relay, other)]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join(60)
    assert relay.counts.sent + other.counts.sent == 400
    for _ in range(3):
        work(broker)
    assert sorted(lines(out), key=int) == [str(i) for i in range(400)]   # each once


def test_a_relay_that_dies_before_its_delete_sends_again_and_the_task_runs_once(app, tmp_path):
    engine, relay, broker = app
    out = tmp_path / 'runs'
    with engine.begin() as conn:
        task_id = outbox.publish(conn, ot.Note, None, str(out), 'once')

    class Died(Exception):
        pass

    dying = Relay(engine, broker, config=settings.config)
    real_send = broker.send

    def send_then_die(queue, messages):
        real_send(queue, messages)
        raise Died('killed after the send, before the delete')
    broker.send = send_then_die
    with pytest.raises(Died):
        dying.send_round()
    broker.send = real_send
    assert pending(engine) == 1                      # not deleted: sent again
    assert relay.send_round() == 1
    for _ in range(2):
        work(broker)
    assert lines(out) == ['once']                     # two messages, one run
    assert records.get(task_id).status == 'succeeded'


@pytest.mark.real_time('the relay backs off on the real clock through the outage')
def test_an_sqs_outage_loses_nothing(app, tmp_path):
    engine, relay, broker = app
    out = tmp_path / 'runs'
    with engine.begin() as conn:
        outbox.publish_batch(conn, ot.Note, None, [((str(out), str(i)), {}) for i in range(25)])
    real_send, back_at = broker.send, time.monotonic() + 10.0

    def send(queue, messages):
        if time.monotonic() < back_at:
            raise SQSError('SQS is down (a test outage)', retryable=True)
        return real_send(queue, messages)
    broker.send = send
    relay.run(threading.Event(), until_empty=True)
    assert relay.counts.failures >= 2 and relay.counts.sent == 25     # backed off, then sent
    assert time.monotonic() - back_at < MAX_BACKOFF_SEC
    work(broker)
    assert len(lines(out)) == 25


def test_fifo_order_holds_through_the_relay(app, tmp_path):
    engine, relay, broker = app
    out = tmp_path / 'runs'
    for start in (0, 10, 20):
        with engine.begin() as conn:
            for i in range(start, start + 10):
                outbox.publish(conn, ot.OrderedNote, None, str(out), str(i), group_id='g')
    relay.run(threading.Event(), until_empty=True)
    for _ in range(3):
        work(broker, queues=['ordered'])
    assert lines(out) == [str(i) for i in range(30)]


def test_a_fair_queues_rows_are_relayed_with_their_tenant_and_in_parallel(app, tmp_path):
    """A fair queue's row has a group (its tenant) and no deduplication id: it
    is claimed as a standard row (any relay, no FIFO lock) and sent with its
    MessageGroupId and its delay."""
    engine, relay, broker = app
    out = tmp_path / 'runs'
    with engine.begin() as conn:
        outbox.publish(conn, ot.Note.with_options(queue='tenants'), None, str(out), 'a',
                       group_id='acme')
        outbox.publish(conn, ot.Note.with_options(queue='tenants'), None, str(out), 'b',
                       group_id='globex', delay_sec=1)
    with engine.begin() as conn:
        rows = conn.execute(select(outbox_table.c.group_id, outbox_table.c.dedup_id)
                            .order_by(outbox_table.c.id)).all()
    assert [tuple(row) for row in rows] == [('acme', None), ('globex', None)]
    # the claim any PostgreSQL relay makes takes them (the FIFO one, under its
    # lock, is for rows with a deduplication id); rolled back, sent below
    with engine.connect() as conn, conn.begin() as transaction:
        assert len(conn.execute(sql_outbox._STANDARD, {'limit': 10}).all()) == 2
        assert conn.execute(sql_outbox._FIFO, {'limit': 10}).all() == []
        transaction.rollback()
    assert relay.send_round() == 2
    name = broker.sqs_name(broker.queues['tenants'])
    time.sleep(1.1)
    received = broker.transport.receive(name, 10, 0, 30)
    assert sorted(m.group_id for m in received) == ['acme', 'globex']


def test_consume_once_applies_an_effect_once_under_two_concurrent_deliveries(app):
    engine = app[0]
    applied, errors, started = [], [], threading.Barrier(2)

    def deliver():
        started.wait()
        try:
            with engine.begin() as conn:
                if not outbox.consume_once(conn, 'task-1'):
                    return
                conn.execute(effects.insert().values(task_id='task-1'))
                time.sleep(0.2)                        # the other delivery arrives meanwhile
                applied.append(1)
        except Exception as exc:                       # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    with engine.begin() as conn:
        assert conn.execute(select(func.count()).select_from(effects)).scalar() == 1
        assert outbox.consume_once(conn, 'task-2') is True
        assert outbox.consume_once(conn, 'task-2') is False
    assert applied == [1]


@pytest.mark.applies(any_records_url=('sqlite',))        # PostgreSQL takes any number of relays
def test_a_second_relay_on_one_sqlite_database_says_so(app):
    engine, relay, broker = app
    assert engine.dialect.name == 'sqlite'
    relay.claim_database()
    with pytest.raises(OutboxError, match='another relay already sends the outbox of .*SQLite '
                                          'allows one relay per database'):
        Relay(engine, broker, config=settings.config).claim_database()


def test_init_is_idempotent(app):
    engine = app[0]
    assert outbox.init(engine) == []


def test_init_says_what_it_did_on_the_database_at_hand(any_records_url):
    """A notify trigger is made (and said) on PostgreSQL only."""
    engine = open_database(any_records_url)
    try:
        applied = outbox.init(engine)
    finally:
        engine.dispose()
    postgres = any_records_url.startswith('postgresql')
    assert applied[0] == '1: create kale_outbox and kale_consumed' + (
        ' and the notify trigger' if postgres else '')


def test_kale_web_shows_the_outbox_of_outbox_url(app, memory_broker):
    from kale.conf import settings
    from kale.web import create_app
    from tests.support.web import api_client
    engine = app[0]
    client = api_client(create_app(broker=lambda: memory_broker))
    assert client.get('/api/outbox').json() == {'configured': False}
    with engine.begin() as conn:
        outbox.publish(conn, ot.Note, None, 'x', 'y')
    with settings.override(OUTBOX_URL=engine.url.render_as_string(hide_password=False)):
        client = api_client(create_app(broker=lambda: memory_broker))     # the app's settings
        answer = client.get('/api/outbox').json()
    assert answer['configured'] is True and answer['pending'] == 1
    assert 0 <= answer['oldest_age_sec'] < 60


def outbox_rows(engine):
    with engine.begin() as conn:
        return [dict(row) for row in conn.execute(select(outbox_table)).mappings()]


@pytest.mark.parametrize('change', ['record', 'body', 'queue', 'unsigned'])
def test_a_row_changed_in_the_database_is_set_aside_unsent(app, tmp_path, change):
    """The relay checks each row's publisher's MAC before it sends it or
    writes its record; a row that fails is kept in kale_outbox_rejected."""
    from kale.store.sql.outbox_schema import rejected
    engine, relay, broker = app
    out = tmp_path / 'runs'
    with engine.begin() as conn:
        task_id = outbox.publish(conn, ot.Note, None, str(out), 'ordered')
        kept = outbox.publish(conn, ot.Note, None, str(out), 'untouched')
    [row, _] = outbox_rows(engine)
    if change == 'record':
        values = {'record': dict(row['record'], inputs={'args': [str(out), 'INJECTED'],
                                                        'kwargs': {}, 'exact': True})}
    elif change == 'body':
        [other, _] = outbox_rows(engine)
        values = {'body': other['body'].replace('a', 'b', 1)}
    elif change == 'queue':
        values = {'queue': 'high'}
    else:
        values = {'mac': None}
    with engine.begin() as conn:
        conn.execute(outbox_table.update().where(outbox_table.c.id == row['id']).values(**values))
    assert relay.send_round() == 1 and relay.counts.rejected == 1
    assert pending(engine) == 0 and records.get(task_id) is None
    with engine.begin() as conn:
        [aside] = conn.execute(select(rejected)).mappings().all()
    assert aside['task_id'] == task_id and aside['outbox_id'] == row['id']
    assert 'MAC' in aside['reason'] and aside['body'] == dict(row, **values)['body']
    work(broker, queues=['default', 'high'])
    assert lines(out) == ['untouched'] and records.get(kept).status == 'succeeded'


def test_with_an_encryption_key_the_outbox_holds_no_argument_in_clear(app, tmp_path):
    from kale.conf import settings
    engine, relay, _ = app
    secret = 'card 4111-1111-1111-1111'
    with settings.override(MESSAGE_ENCRYPTION_KEY='an-encryption-secret-of-32-chars!!'):
        with engine.begin() as conn:
            task_id = outbox.publish(conn, ot.Note, None, str(tmp_path / 'runs'), secret)
        [row] = outbox_rows(engine)
        assert secret not in repr(row)
        assert set(row['record']['inputs']) == {'kale_sealed'}
        assert relay.send_round() == 1
        assert records.get(task_id).args == [str(tmp_path / 'runs'), secret]


def test_a_relayed_task_that_failed_is_retried_from_its_record(app, tmp_path):
    """The record the relay writes carries the inputs MAC its publisher made."""
    engine, relay, broker = app
    with engine.begin() as conn:
        task_id = outbox.publish(conn, ot.FinalNote, None, str(tmp_path / 'no' / 'dir'), 'x')
    relay.send_round()
    work(broker)
    assert records.get(task_id).status == 'failed'
    new_id = records.retry(task_id)
    assert records.get(new_id).status == 'queued'
    assert broker.counts(broker.queues['default']).visible == 1


def test_outbox_init_makes_its_sqlite_file_owner_only(tmp_path):
    import os
    import stat
    path = tmp_path / 'app.db'
    old = os.umask(0o022)
    try:
        outbox.init(open_database('sqlite:///%s' % path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
