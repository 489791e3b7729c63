"""The records writer: nothing waits for the store, nothing is lost to an
outage within the buffer's bound, and what had to be dropped is counted."""
import threading

from kale.records.writer import RecordWriter


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
    assert writer.flush(5)
    assert [r['id'] for r in store.published] == ['a', 'b'] and len(store.events) == 1
    writer.close()


def test_an_outage_holds_rows_and_they_catch_up_when_it_ends():
    store = FlakyStore()
    store.down.set()
    writer = RecordWriter(store.write)
    writer.event([{'id': str(n)} for n in range(100)])
    assert not writer.flush(0.3)               # nothing waits for the store...
    assert writer.pending == 100 and writer.failures >= 1
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
