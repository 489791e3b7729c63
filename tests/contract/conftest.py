"""The stores every contract test runs against: the memory store, and the
store on a SQLite file and on a PostgreSQL database (a throwaway cluster)."""
from __future__ import annotations

import pytest

from kale.statuses import TaskStatus


@pytest.fixture(params=['memory', 'sqlite', 'postgres'])
def store(request, tmp_path):
    """A fresh store of each kind."""
    if request.param == 'memory':
        from kale.config import Config
        from kale.store.memory import MemoryStore
        yield MemoryStore('memory://%s' % request.node.name,
                          Config.load('tests.kale_test_settings'))
        return
    from kale.config import Config
    from kale.store.sql.records import RecordStore
    url = 'sqlite:///%s' % (tmp_path / 'store.db') if request.param == 'sqlite' else \
        request.getfixturevalue('postgres_cluster').new_database()
    made = RecordStore(url, Config.load('tests.kale_test_settings'))
    yield made
    made.engine.dispose()


def set_status(store, task_id: str, status: TaskStatus) -> None:
    """A task record with ``status``, written as a worker's event."""
    store.records.write([], [{'id': task_id, 'task': 't.T', 'queue': 'default',
                              'status': status, 'attempts': 0, 'published_at': 1.0,
                              'updated_at': 1.0}], [], sealed=True)


@pytest.fixture(params=['memory', 'sqlite', 'postgres'])
def outbox_store(request, tmp_path):
    """A fresh outbox store of each kind, and a function that writes rows in
    a transaction of its own (as ``outbox.publish`` does in the caller's)."""
    if request.param == 'memory':
        from kale.store.memory import MemoryStore
        store = MemoryStore('memory://%s' % request.node.name).outbox
        yield store, store.insert
        return
    from kale.outbox import init, open_database
    from kale.store.sql.outbox import SQLOutbox, SQLOutboxWriter
    url = 'sqlite:///%s' % (tmp_path / 'app.db') if request.param == 'sqlite' else \
        request.getfixturevalue('postgres_cluster').new_database()
    engine = open_database(url)
    init(engine)

    def write(rows):
        with engine.begin() as conn:
            SQLOutboxWriter(conn).insert(rows)
    yield SQLOutbox(engine), write
    engine.dispose()
