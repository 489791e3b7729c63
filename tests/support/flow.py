"""One ask at a time of a store's flow facet (kale.store.flow), for tests."""
from __future__ import annotations

from kale.store.flow import Ask


def take_token(flow, key, rate, task_id, now) -> float:
    """Take a token of ``key``'s bucket for the run of ``task_id``: 0.0 when
    taken, else the whole seconds it should wait (a place is kept for it)."""
    return flow.ask([Ask(task_id, rate=rate, rate_key=key)], now, 0.0)[0].wait_sec


def take_slot(flow, key, limit, holder, worker, now, lease_sec) -> bool:
    """Take one of ``key``'s ``limit`` slots for ``holder`` until ``now +
    lease_sec``: whether taken."""
    ask = Ask('', limit=limit, slot_key=key, holder=holder, worker=worker)
    return flow.ask([ask], now, lease_sec)[0].granted
