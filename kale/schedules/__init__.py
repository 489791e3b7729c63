"""Periodic tasks: a task published at every tick of a cron expression or
an interval, by one leading scheduler among any number.

Declare ``schedule = '0 3 * * *'`` (or ``= 300``) on a task class, or an
entry of ``SCHEDULES``, and run ``kale scheduler`` (or ``kale worker
--scheduler``). Modules: ``spec`` (a schedule and its ticks), ``discovery``
(finding and checking them), ``scheduler`` (the loop), ``hooks`` (it in a
worker), ``status`` (``kale schedules list``, ``/api/schedules``).
"""
from __future__ import annotations

from kale.schedule_checks import CATCH_UP
from kale.schedules.spec import Schedule, tick_id

__all__ = ['CATCH_UP', 'Schedule', 'tick_id']
