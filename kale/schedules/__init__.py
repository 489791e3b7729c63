"""Periodic tasks: a task published at every tick of a cron expression or an
interval, by one leading scheduler among any number (its modules:
docs/explanation/internals-workflow.md, "Schedules")."""
from __future__ import annotations

from kale.schedules.spec import Schedule, tick_id
from kale.task_checks import CATCH_UP

__all__ = ['CATCH_UP', 'Schedule', 'tick_id']
