"""The flow-control facet's contract (kale.store.flow.FlowStore), on every
store: tokens are taken, then waited for behind the places reserved; a
place is used once and lapses; slots are leases that expire, are renewed
and given back; a run refused its token gives its slot back; racing
workers never take more slots than the limit."""
from __future__ import annotations

import threading

from kale.flow.spec import Rate
from kale.store.flow import RESERVATION_GRACE_SEC, Ask
from tests.support.clock import FakeClock
from tests.support.flow import take_slot, take_token


def test_tokens_are_taken_then_waited_for(store):
    clock = FakeClock()
    rate = Rate(2, 1.0)                     # a burst of two
    assert take_token(store.flow, 'k', rate, 't1', clock.time()) == 0.0
    assert take_token(store.flow, 'k', rate, 't2', clock.time()) == 0.0
    assert take_token(store.flow, 'k', rate, 't3', clock.time()) == 1.0   # half a second: 1 s
    assert take_token(store.flow, 'k', rate, 't4', clock.time()) == 1.0   # the next half second
    assert take_token(store.flow, 'other', rate, 't5', clock.time()) == 0.0   # keys are apart
    clock.advance(1.0)
    # t3 and t4 come back: their tokens were reserved; t6 waits behind them
    assert take_token(store.flow, 'k', rate, 't3', clock.time()) == 0.0
    assert take_token(store.flow, 'k', rate, 't6', clock.time()) == 1.0
    assert take_token(store.flow, 'k', rate, 't4', clock.time()) == 0.0
    assert take_token(store.flow, 'k', rate, 't4', clock.time()) == 1.0   # a place is used once


def test_a_reservation_not_taken_in_time_lapses(store):
    clock = FakeClock()
    rate = Rate(1, 1.0)
    assert take_token(store.flow, 'k', rate, 't1', clock.time()) == 0.0
    assert take_token(store.flow, 'k', rate, 't2', clock.time()) == 1.0
    clock.advance(1.0 + RESERVATION_GRACE_SEC + 1)
    assert take_token(store.flow, 'k', rate, 't2', clock.time()) == 0.0     # a token of the refill
    assert take_token(store.flow, 'k', rate, 't2', clock.time()) == 1.0


def test_slots_are_leases_that_expire_and_are_renewed(store):
    clock = FakeClock()
    now = clock.time()
    assert take_slot(store.flow, 'k', 2, 'a', 'w1', now, 10)
    assert take_slot(store.flow, 'k', 2, 'b', 'w2', now, 10)
    assert not take_slot(store.flow, 'k', 2, 'c', 'w3', now, 10)
    clock.advance(8)
    assert store.flow.renew([('k', 'a')], clock.time(), 10) == 1
    clock.advance(3)                        # b (w2, not renewed) has expired
    assert take_slot(store.flow, 'k', 2, 'c', 'w3', clock.time(), 10)
    assert store.flow.holders('k', clock.time()) == ['a', 'c']
    store.flow.give_back([('k', 'a')])
    assert store.flow.holders('k', clock.time()) == ['c']
    # a dead worker's lease of a key never at its limit: dropped by a renewal
    # once expired for a lease's length
    assert take_slot(store.flow, 'other', 5, 'dead', 'w4', clock.time(), 10)
    clock.advance(21)
    # c's worker still holds it: renewed, even past its expiry
    assert store.flow.renew([('k', 'c')], clock.time(), 10) == 1
    assert store.flow.holders('k', clock.time()) == ['c']
    assert store.flow.holders('other', clock.time() - 21) == []


def test_one_ask_answers_a_batch_and_a_run_refused_a_token_gives_its_slot_back(store):
    now = 1000.0
    rate = Rate(1, 60.0)
    asks = [Ask('t%d' % n, rate=rate, rate_key='r', limit=5, slot_key='s', holder='w/m%d' % n,
                worker='w') for n in range(3)]
    answers = store.flow.ask(asks, now, 30)
    assert [answer.granted for answer in answers] == [True, False, False]
    assert [answer.wait_sec for answer in answers] == [0.0, 60.0, 120.0]
    assert store.flow.holders('s', now) == ['w/m0']
    # the same message asked again: its own lease does not count against it
    again = store.flow.ask([Ask('', limit=1, slot_key='s', holder='w/m0', worker='w')], now, 30)
    assert again[0].granted


def test_racing_workers_never_take_more_slots_than_the_limit(store):
    granted: list[bool] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for m in range(5):
            ask = Ask('', limit=3, slot_key='k', holder='w%d/m%d' % (n, m), worker='w%d' % n)
            answer = store.flow.ask([ask], 1000.0, 60)[0]
            with lock:
                granted.append(answer.granted)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted.count(True) == 3 and len(store.flow.holders('k', 1000.0)) == 3
