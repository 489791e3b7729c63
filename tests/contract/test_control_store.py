"""The controls' facet's contract (kale.store.controls.ControlStore), on
every store: a queue is paused until resumed, a second pause keeps the
first one's time, a stop is asked of one worker only, and a worker reads
its stop and every paused queue in one question."""
from __future__ import annotations


def test_a_queue_is_paused_until_it_is_resumed(store):
    controls = store.controls
    assert controls.paused() == {}
    assert controls.pause('default', 1000.0) == 1000.0
    assert controls.pause('default', 1005.0) == 1000.0          # paused already: since the first
    controls.pause('low', 1001.0)
    assert controls.paused() == {'default': 1000.0, 'low': 1001.0}
    assert controls.resume('default') is True
    assert controls.resume('default') is False
    assert controls.paused() == {'low': 1001.0}


def test_a_stop_is_asked_of_one_worker_and_forgotten_once_it_stopped(store):
    controls = store.controls
    assert controls.ask_stop('h:1@a', 1000.0) == 1000.0
    assert controls.ask_stop('h:1@a', 1003.0) == 1000.0
    assert controls.stops() == {'h:1@a': 1000.0}
    controls.forget_stop('h:1@a')
    controls.forget_stop('h:1@a')
    assert controls.stops() == {}


def test_a_worker_reads_its_stop_and_every_paused_queue_at_once(store):
    controls = store.controls
    assert controls.read('h:1@a') == (None, [])
    controls.pause('low', 1000.0)
    controls.pause('default', 1000.0)
    controls.ask_stop('h:2@b', 1001.0)
    assert controls.read('h:1@a') == (None, ['default', 'low'])
    assert controls.read('h:2@b') == (1001.0, ['default', 'low'])
    assert controls.paused() == {'default': 1000.0, 'low': 1000.0}     # a stop is no pause


def test_a_pause_and_a_stop_of_the_same_name_are_apart(store):
    controls = store.controls
    controls.pause('same', 1000.0)
    controls.ask_stop('same', 1002.0)
    controls.resume('same')
    assert controls.stops() == {'same': 1002.0} and controls.paused() == {}
