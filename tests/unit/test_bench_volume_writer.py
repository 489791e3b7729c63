"""The records-volume benchmark's writer rounds each pay for the checkpoint
of what they left in SQLite's log, inside their timing, in every mode: a
round with the counters on had paid for it at its fold's commit, the others
had left it to the next round's untimed checkpoint."""
from bench import volume
from kale.app import default_app
from kale.store.sql.records import RecordStore


def test_every_round_ends_with_a_timed_checkpoint(tmp_path, monkeypatch):
    store = RecordStore('sqlite:///%s' % (tmp_path / 'records.db'), default_app().config)
    store.migrate()
    seen = []
    clock = volume.time.perf_counter
    monkeypatch.setattr(volume, 'WRITER_ROUNDS', 1)
    monkeypatch.setattr(volume, 'WRITER_TASKS', 20)
    monkeypatch.setattr(volume, 'BATCH', 10)
    monkeypatch.setattr(volume, '_checkpoint', lambda s: seen.append('checkpoint'))
    monkeypatch.setattr(volume.time, 'perf_counter', lambda: seen.append('clock') or clock())
    write = store.write
    monkeypatch.setattr(store, 'write', lambda *a, **k: seen.append('write') or write(*a, **k))
    try:
        costs = volume.writer_cost(store, 1_800_000_000.0)
    finally:
        store.dispose()
    assert set(costs) == set(volume.WRITER_MODES)
    rounds = ''.join({'checkpoint': 'c', 'clock': 't', 'write': 'w'}[s] for s in seen)
    # the warm-up's writes, then per round: untimed checkpoint, clock, 4 writes, checkpoint, clock
    assert rounds == 'wwww' + 'ctwwwwct' * len(volume.WRITER_MODES), rounds
