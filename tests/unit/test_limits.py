"""The memory limit is checked after every task, so it must cost next to nothing."""
from kale.worker import limits
from kale.worker.limits import MemoryLimit


def test_the_current_size_is_read_only_once_the_peak_is_over_the_limit(monkeypatch):
    reads = []
    monkeypatch.setattr(limits, 'resident_set_size_mb', lambda: reads.append(1) or 10.0)
    assert not MemoryLimit(10 ** 6).exceeded()         # the peak is far below: no /proc read
    assert reads == []
    assert MemoryLimit(1).exceeded()                    # over: the current size decides
    assert reads == [1]
    assert not MemoryLimit(0).exceeded()                # off


def test_a_peak_over_the_limit_with_a_current_size_under_it_is_not_exceeded(monkeypatch):
    monkeypatch.setattr(limits, 'resident_set_size_mb', lambda: 0.5)
    assert not MemoryLimit(1).exceeded()
