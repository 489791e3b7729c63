"""The outbox on the memory store, end to end: outbox.publish writes into a
memory store's outbox, a relay on it sends to the memory transport with
the publisher's MAC checked, and a worker runs what it sent."""
from __future__ import annotations

import dataclasses

from kale import outbox
from kale import worker as kale_worker
from kale.outbox.relay import Relay
from kale.store.memory import MemoryStore
from tests import outbox_tasks as ot


def test_a_publish_into_memory_is_relayed_and_run(app, tmp_path):
    store = MemoryStore('memory://outbox-1').outbox
    out = tmp_path / 'runs'
    task_ids = [outbox.publish(store, ot.Note, None, str(out), text, app=app)
                for text in ('first', 'second')]
    assert store.pending(app.clock.time())[0] == 2
    relay = Relay(store, app.broker, config=app.config)
    assert relay.send_round() == 2 and relay.send_round() == 0
    assert store.pending(app.clock.time()) == (0, None)
    assert kale_worker.Worker(queue_names=['default'], burst=True, app=app).run() == 0
    assert out.read_text().splitlines() == ['first', 'second']
    assert len(set(task_ids)) == 2


def test_a_row_changed_in_memory_is_set_aside_not_sent(app):
    store = MemoryStore('memory://outbox-2').outbox
    outbox.publish(store, ot.Note, None, '/tmp/never', 'x', app=app)
    [(row_id, row)] = store.rows.items()
    store.rows[row_id] = dataclasses.replace(row, task='tests.tasks.SomethingElse')
    relay = Relay(store, app.broker, config=app.config)
    assert relay.send_round() == 0
    assert relay.counts.rejected == 1 and store.pending(0.0) == (0, None)
    [(kept, reason, _)] = store.rejected
    assert kept.task == 'tests.tasks.SomethingElse' and 'MAC' in reason


def test_consume_once_on_memory(app):
    store = MemoryStore('memory://outbox-3').outbox
    assert outbox.consume_once(store, 'task-1') and not outbox.consume_once(store, 'task-1')
