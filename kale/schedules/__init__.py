"""Periodic tasks: a task published at every tick of a cron expression or an
interval, by one leading scheduler among any number (its modules:
docs/explanation/internals-workflow.md, "Schedules")."""
from __future__ import annotations

from kale.schedule_checks import CATCH_UP
from kale.schedules.spec import Schedule, tick_id

__all__ = ['CATCH_UP', 'Schedule', 'tick_id']
