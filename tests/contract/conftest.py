"""The stores every contract test runs against: the memory store, and the
store on a SQLite file and on a PostgreSQL database (a throwaway cluster)."""
from __future__ import annotations

import pytest

from kale.statuses import TaskStatus


@pytest.fixture(params=['memory', 'sqlite', 'postgres'])
def store(request, tmp_path):
    """A fresh store of each kind."""
    if request.param == 'memory':
        from kale.store.memory import MemoryStore
        yield MemoryStore('memory://%s' % request.node.name)
        return
    from kale.config import Config
    from kale.records.store import RecordStore
    url = 'sqlite:///%s' % (tmp_path / 'store.db') if request.param == 'sqlite' else \
        request.getfixturevalue('postgres_cluster').new_database()
    made = RecordStore(url, Config.load('tests.kale_test_settings'))
    yield made
    made.engine.dispose()


def set_status(store, task_id: str, status: TaskStatus) -> None:
    """A task record with ``status`` (until the records facet moves into the
    store, written by hand on a database)."""
    if hasattr(store, 'set_task_status'):
        store.set_task_status(task_id, status)
        return
    from kale.store.sql.schema import tasks
    with store.begin(write=True) as conn:
        conn.execute(tasks.insert().values(id=task_id, task='t.T', queue='default',
                                           status=status, attempts=0, published_at=1.0,
                                           updated_at=1.0))
