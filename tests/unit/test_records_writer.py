"""The records writer: nothing waits for the store, nothing is lost to an
outage within the buffer's bound, and what had to be dropped is counted."""
import threading
import time

from kale.records import writer as writer_module
from kale.records.writer import LaterRow, RecordWriter


def wait_for(condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, 'condition not met within %gs' % timeout
        time.sleep(0.01)


class FlakyStore:
    """A store's write function that fails while ``down`` is set."""

    def __init__(self):
        self.down = threading.Event()
        self.published = []
        self.events = []
        self.transactions = 0

    def write(self, published, events, worker_rows):
        if self.down.is_set():
            raise ConnectionError('store unreachable')
        self.transactions += 1
        self.published += published
        self.events += events


def test_rows_handed_over_are_written_by_flush():
    store = FlakyStore()
    writer = RecordWriter(store.write)
    writer.publish([{'id': 'a'}, {'id': 'b'}])
    writer.event([{'id': 'a', 'status': 'running'}])
    assert writer.flush(30)
    assert [r['id'] for r in store.published] == ['a', 'b'] and len(store.events) == 1
    writer.close()


def test_an_outage_holds_rows_and_they_catch_up_when_it_ends():
    store = FlakyStore()
    store.down.set()
    writer = RecordWriter(store.write)
    writer.event([{'id': str(n)} for n in range(100)])
    assert not writer.flush(0.3)               # nothing waits for the store...
    wait_for(lambda: writer.failures >= 1, 30)
    assert writer.pending == 100
    store.down.clear()
    assert writer.flush(10)                    # ...and nothing is lost
    assert sorted(int(r['id']) for r in store.events) == list(range(100))
    assert writer.dropped == 0
    writer.close()


def test_past_the_bound_the_oldest_rows_are_dropped_and_counted(caplog):
    store = FlakyStore()
    store.down.set()
    writer = RecordWriter(store.write, max_rows=10)
    for n in range(25):
        writer.event([{'id': str(n)}])
    assert writer.dropped == 15
    assert 'rows dropped' in caplog.text
    store.down.clear()
    assert writer.flush(10)
    assert sorted(int(r['id']) for r in store.events) == list(range(15, 25))
    writer.close()


def test_what_gathered_is_written_in_one_transaction():
    store = FlakyStore()
    store.down.set()
    writer = RecordWriter(store.write)
    for n in range(30):
        writer.event([{'id': str(n)}])
    store.down.clear()
    assert writer.flush(10)
    assert store.transactions <= 2
    writer.close()


def _later(task_id, at, built):
    def build(task_id, at):
        built.append(task_id)
        return {'id': task_id, 'status': 'running', 'updated_at': at}
    return LaterRow(task_id, at, build, (task_id, at))


def test_the_running_task_is_written_once_by_a_flush():
    store = FlakyStore()
    writer = RecordWriter(store.write)
    built = []
    writer.running('a', _later('a', 1.0, built))
    assert writer.flush(30) and writer.flush(30)
    assert built == ['a'] and [(r['id'], r['status']) for r in store.events] == [('a', 'running')]
    writer.close()


def test_a_task_that_ran_between_two_rounds_costs_only_its_outcome():
    """Its 'running' event is never built: the outcome says all."""
    store = FlakyStore()
    writer = RecordWriter(store.write, gather_sec=30.0)
    wait_for(lambda: writer._idle, 30)
    writer.event([{'id': 'x', 'status': 'succeeded', 'updated_at': 1.0}])
    wait_for(lambda: not writer._idle, 30)        # gathering: takes nothing until it ends
    built = []
    writer.running('a', _later('a', 1.0, built))
    writer.running('a', None)
    writer.event([{'id': 'a', 'status': 'succeeded', 'updated_at': 2.0}])
    assert writer.flush(10)
    assert built == [] and store.transactions == 1
    assert sorted((r['id'], r['status']) for r in store.events) == [
        ('a', 'succeeded'), ('x', 'succeeded')]
    writer.close()


def test_a_running_task_wakes_an_idle_writer(monkeypatch):
    monkeypatch.setattr(writer_module, 'IDLE_WAKE_SEC', 60.0)
    store = FlakyStore()
    writer = RecordWriter(store.write)
    wait_for(lambda: writer._idle, 30)
    writer.running('a', _later('a', 1.0, []))
    wait_for(lambda: store.events, 10)         # not the 60 s idle pause
    assert [(r['id'], r['status']) for r in store.events] == [('a', 'running')]
    writer.close()


def test_an_older_running_event_never_hides_the_outcome():
    """The outcome handed over before the writer takes the running event
    (a task reported while the next one starts) stays the newest."""
    store = FlakyStore()
    store.down.set()
    writer = RecordWriter(store.write)
    built = []
    writer.event([{'id': 'a', 'status': 'succeeded', 'updated_at': 2.0}])
    writer.running('a', _later('a', 1.0, built))
    store.down.clear()
    assert writer.flush(10)
    assert built == [] and [(r['id'], r['status']) for r in store.events] == [
        ('a', 'succeeded')]
    writer.close()


def test_every_task_running_at_once_is_written_once_and_an_ended_one_not_at_all():
    """A worker with a pool names each run under its own key."""
    store = FlakyStore()
    writer = RecordWriter(store.write, gather_sec=30.0)
    wait_for(lambda: writer._idle, 30)
    writer.event([{'id': 'x', 'status': 'succeeded', 'updated_at': 1.0}])
    wait_for(lambda: not writer._idle, 30)        # gathering: takes nothing until it ends
    built = []
    for key in 'abc':
        writer.running(key, _later(key, 1.0, built))
    writer.running('b', None)
    assert writer.flush(10) and writer.flush(10)
    assert sorted(built) == ['a', 'c']
    assert sorted((r['id'], r['status']) for r in store.events) == [
        ('a', 'running'), ('c', 'running'), ('x', 'succeeded')]
    writer.close()


def test_a_running_event_waits_out_the_gather_window_with_the_rows_after_it():
    store = FlakyStore()
    writer = RecordWriter(store.write, gather_sec=30.0)
    wait_for(lambda: writer._idle, 30)
    writer.running('a', _later('a', 1.0, []))
    wait_for(lambda: not writer._idle, 30)       # the thread is gathering, not writing
    writer.event([{'id': 'b', 'status': 'succeeded', 'updated_at': 2.0}])
    assert writer.flush(30)
    assert store.transactions == 1
    assert sorted((r['id'], r['status']) for r in store.events) == [
        ('a', 'running'), ('b', 'succeeded')]
    writer.close()


def test_a_batch_is_cut_in_chunks_that_hold_an_id_once_when_asked():
    from kale.store.sql.driver import chunks
    rows = [{'id': name} for name in 'abacdaef']
    assert [[row['id'] for row in chunk] for chunk in chunks(rows, 3)] == \
        [['a', 'b', 'a'], ['c', 'd', 'a'], ['e', 'f']]
    assert [[row['id'] for row in chunk] for chunk in chunks(rows, 3, ids_once=True)] == \
        [['a', 'b'], ['a', 'c', 'd'], ['a', 'e', 'f']]
