"""The outbox's facet's contract (kale.store.outbox), on every store: rows
claimed in insertion order; a claim that returns takes its rows out of the
outbox (those set aside kept with why), one that raises leaves them all;
concurrent claims never hold one row; FIFO rows go to one claim at a time;
a task id is consumed once; consumed ids are purged by age."""
from __future__ import annotations

import pytest

from kale.store.outbox import OutboxRow


def row(task_id: str, created_at: float = 100.0, dedup_id=None) -> dict:
    return {'task_id': task_id, 'task': 't.T', 'queue': 'default', 'body': 'body-%s' % task_id,
            'attributes': {'a': {'DataType': 'String', 'StringValue': '1'}}, 'delay_sec': 0,
            'group_id': 'g' if dedup_id else None, 'dedup_id': dedup_id,
            'record': {'id': task_id}, 'unique_key': None, 'unique_for_sec': None,
            'created_at': created_at, 'mac': 'o1:mac'}


def test_a_rows_fields_are_the_tables_columns_in_order():
    from kale.store.outbox import ROW_FIELDS
    from kale.store.sql.outbox_schema import outbox
    assert tuple(column.name for column in outbox.columns) == ROW_FIELDS


def rejected_reasons(store) -> list[tuple[str, str]]:
    if hasattr(store, 'engine'):
        from kale.store.sql.outbox_schema import rejected
        with store.engine.begin() as conn:
            return [(r.task_id, r.reason) for r in conn.execute(
                rejected.select().order_by(rejected.c.id)).all()]
    return [(r.task_id, reason) for r, reason, _ in store.rejected]


def test_a_claim_takes_rows_in_order_and_a_returning_one_removes_them(outbox_store):
    store, write = outbox_store
    write([row('a', 100.0), row('b', 101.0)])
    write([row('c', 102.0)])
    assert store.pending(110.0) == (3, 10.0)
    with store.claim(2, fifo=False) as claim:
        assert [r.task_id for r in claim.rows] == ['a', 'b']
        first = claim.rows[0]
        assert isinstance(first, OutboxRow) and first.id < claim.rows[1].id
        assert {k: v for k, v in first.fields().items() if k != 'id'} == row('a', 100.0)
        claim.set_aside([(claim.rows[1], 'its MAC does not hold')], 111.0)
    assert store.pending(110.0) == (1, 8.0)
    assert rejected_reasons(store) == [('b', 'its MAC does not hold')]
    with store.claim(10, fifo=False) as claim:
        assert [r.task_id for r in claim.rows] == ['c']
    assert store.pending(110.0) == (0, None)
    with store.claim(10, fifo=False) as claim:
        assert claim.rows == []


def test_a_claim_that_raises_leaves_every_row(outbox_store):
    store, write = outbox_store
    write([row('a'), row('b')])
    with pytest.raises(RuntimeError):
        with store.claim(10, fifo=False) as claim:
            claim.set_aside([(claim.rows[0], 'bad')], 1.0)
            raise RuntimeError('SQS is down')
    assert store.pending(100.0)[0] == 2
    assert rejected_reasons(store) == []
    with store.claim(10, fifo=False) as claim:
        assert [r.task_id for r in claim.rows] == ['a', 'b']


@pytest.mark.applies(outbox_store=('memory', 'postgres'))   # SQLite: one relay, one round at a time
def test_concurrent_claims_never_hold_one_row(outbox_store):
    store, write = outbox_store
    assert store.concurrent
    write([row('t%d' % n) for n in range(6)])
    with store.claim(4, fifo=False) as first:
        with store.claim(4, fifo=False) as second:
            held = [r.task_id for r in first.rows] + [r.task_id for r in second.rows]
    assert sorted(held) == ['t%d' % n for n in range(6)]
    assert store.pending(100.0)[0] == 0


@pytest.mark.applies(outbox_store=('memory', 'postgres'))   # SQLite: one relay, one round at a time
def test_fifo_rows_go_to_one_claim_at_a_time_in_order(outbox_store):
    store, write = outbox_store
    assert store.concurrent
    write([row('f1', dedup_id='d1'), row('s1'), row('f2', dedup_id='d2')])
    with store.claim(10, fifo=True) as first:
        with store.claim(10, fifo=True) as second:
            assert [r.task_id for r in first.rows] == ['f1', 's1', 'f2']
            assert second.rows == []
    write([row('f3', dedup_id='d3')])
    with store.claim(10, fifo=True) as again:       # the first claim's hold ended with it
        assert [r.task_id for r in again.rows] == ['f3']


def test_a_task_id_is_consumed_once_and_purged_by_age(outbox_store):
    store, _ = outbox_store
    if hasattr(store, 'engine'):
        from kale.store.sql.outbox import SQLOutboxWriter

        def consume(task_id, now):
            with store.engine.begin() as conn:
                return SQLOutboxWriter(conn).consume(task_id, now)
    else:
        consume = store.consume
    assert consume('t1', 10.0) and not consume('t1', 11.0)
    assert consume('t2', 20.0)
    assert store.purge_consumed(15.0) == 1
    assert consume('t1', 30.0) and not consume('t2', 31.0)
