"""The records' activity (RecordQueries.activity), on every store: runs that
ended per bucket by outcome, attempts retried, and the mean duration, per
queue or per task, within the window only."""
from __future__ import annotations

import pytest

from kale.exceptions import BadFilterError


def ended(store, task_id, task, queue, status, at, duration=1.0):
    store.records.write([], [{'id': task_id, 'task': task, 'queue': queue, 'status': status,
                              'attempts': 1, 'published_at': at - 5, 'started_at': at - duration,
                              'finished_at': at, 'duration_sec': duration, 'updated_at': at}],
                        [], sealed=True)


def test_runs_are_counted_per_queue_and_per_task_with_their_retries(store):
    now = 10_000.0
    ended(store, 'a', 't.A', 'default', 'succeeded', now - 100, 2.0)
    ended(store, 'b', 't.A', 'default', 'failed', now - 90, 4.0)
    ended(store, 'c', 't.B', 'low', 'succeeded', now - 30, 1.0)
    ended(store, 'old', 't.B', 'low', 'succeeded', now - 5000)         # out of the window
    store.records.write([], [], [], attempt_rows=[
        {'task_id': 'a', 'attempt': 1, 'status': 'failed', 'started_at': now - 125,
         'finished_at': now - 120, 'duration_sec': 5.0, 'worker': 'w', 'error_type': 'E',
         'error_message': 'x'}], sealed=True)
    by_queue = store.queries.activity('queue', 3600, 60, now=now)
    assert by_queue['by'] == 'queue' and set(by_queue['series']) == {'default', 'low'}
    default = by_queue['series']['default']
    assert [(p['succeeded'], p['failed'], p['retried']) for p in default] == [(0, 0, 1), (1, 1, 0)]
    assert default[1]['mean_duration_sec'] == 3.0 and default[0]['mean_duration_sec'] == 5.0
    assert sum(p['succeeded'] for p in by_queue['series']['low']) == 1
    by_task = store.queries.activity('task', 3600, 60, now=now)
    assert set(by_task['series']) == {'t.A', 't.B'}
    assert sum(p['retried'] for p in by_task['series']['t.A']) == 1


def test_only_a_queue_or_a_task_keeps_the_series(store):
    with pytest.raises(BadFilterError, match='by must be one of queue, task'):
        store.queries.activity('worker', 3600, 60)
