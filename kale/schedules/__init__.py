"""Periodic tasks: a task published at every tick of a cron expression or
an interval, by one leading scheduler among any number.

Declare a schedule on a task class (``schedule = '0 3 * * *'`` or ``schedule
= 300``, with ``schedule_tz``, ``schedule_args``, ``schedule_kwargs`` and
``schedule_catch_up``) or in the ``SCHEDULES`` setting, and run ``kale
scheduler`` (or ``kale worker --scheduler``). Modules: :mod:`~kale.schedules.spec`
(a schedule and its ticks), ``discovery`` (finding and checking them),
``state`` (the lease and each schedule's progress, in the task records),
``scheduler`` (the loop), ``hooks`` (the scheduler inside a worker),
``status`` (what ``kale schedules list`` and ``/api/schedules`` show).
"""
from __future__ import annotations

from kale.schedule_checks import CATCH_UP
from kale.schedules.spec import Schedule, tick_id

__all__ = ['CATCH_UP', 'Schedule', 'tick_id']
