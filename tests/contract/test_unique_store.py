"""The unique keys' facet's contract (kale.store.unique.UniqueStore), on
every store: a free key is claimed, a held one names its holder until its
task is final or its time is up, twice in one batch the first holds, and a
release frees only the claimer's key."""
from __future__ import annotations

import threading

import pytest

from kale.statuses import TaskStatus
from tests.contract.conftest import set_status


def test_a_key_is_held_until_it_expires(store):
    unique = store.unique
    assert unique.claim([('k', 'first')], 1000.0, 10) == ['first']
    assert unique.claim([('k', 'second')], 1009.0, 10) == ['first']
    assert unique.claim([('k', 'third')], 1011.0, 10) == ['third']
    assert unique.claim([('k', 'fourth'), ('other', 'fourth')], 1012.0, 10) == ['third', 'fourth']


@pytest.mark.parametrize('status, held', [(TaskStatus.QUEUED, True), (TaskStatus.RUNNING, True),
                                          (TaskStatus.SUCCEEDED, False),
                                          (TaskStatus.FAILED, False)])
def test_a_key_is_free_once_its_task_is_final(store, status, held):
    unique = store.unique
    unique.claim([('k', 'first')], 1000.0, 60)
    set_status(store, 'first', status)
    assert unique.claim([('k', 'second')], 1001.0, 60) == ['first' if held else 'second']


def test_twice_in_one_batch_the_first_holds(store):
    assert store.unique.claim([('k', 'a'), ('k', 'b'), ('j', 'c')], 1000.0, 60) == ['a', 'a', 'c']


def test_a_release_frees_only_the_claimers_key(store):
    unique = store.unique
    unique.claim([('k', 'first')], 1000.0, 60)
    unique.release([('k', 'someone-else')])
    assert unique.claim([('k', 'second')], 1001.0, 60) == ['first']
    unique.release([('k', 'first')])
    assert unique.claim([('k', 'second')], 1002.0, 60) == ['second']


def test_racing_claims_get_one_holder(store):
    holders, barrier = [], threading.Barrier(6)

    def claim(task_id: str) -> None:
        barrier.wait()
        holders.extend(store.unique.claim([('race', task_id)], 1000.0, 60))

    threads = [threading.Thread(target=claim, args=('t%d' % n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(holders) == 6 and len(set(holders)) == 1
