"""``kale scheduler`` (publishes each schedule's ticks, one leader among any
number) and ``kale schedules list|run`` (see :mod:`kale.schedules`)."""
from __future__ import annotations

import argparse
import logging
from typing import Any

from kale.app import default_app
from kale.cli.options import JSON, arg, command, group, on_stop_signals, print_json
from kale.cli.tasks import table

logger = logging.getLogger('kale.schedules')

COLUMNS = [('NAME', 'name'), ('TASK', 'task'), ('SCHEDULE', 'schedule'), ('TZ', 'tz'),
           ('NEXT RUNS', 'next'), ('LAST TICK', 'last_tick'), ('ITS TASK', 'last_task')]


def cmd_scheduler(args: argparse.Namespace) -> int:
    from kale.schedules.scheduler import make_scheduler
    scheduler = make_scheduler(default_app())
    on_stop_signals(logger, 'scheduler', scheduler.stop)
    scheduler.run()
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from kale.schedules.discovery import NOTHING_TO_SEARCH
    from kale.schedules.scheduler import describe
    found = describe(default_app())
    if args.json:
        print_json(found)
        return 1 if found['broken'] else 0
    if not found['searched']:
        print(NOTHING_TO_SEARCH)
        return 0
    rows = [_table_row(row) for row in found['schedules']]
    if rows:
        print(table(COLUMNS, rows))
    elif not found['broken']:
        print('no schedules: no task class of TASK_MODULES says schedule = ..., and SCHEDULES '
              'is empty')
    for broken in found['broken']:
        print('BROKEN (not run): %s' % broken['error'])
    print(_leader_line(found))
    return 1 if found['broken'] else 0


def _table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A schedule as ``describe`` gives it, with its table cells: times to the
    second, the last tick's task id shortened."""
    return dict(row, next=' '.join(run[:19] + 'Z' for run in row['next_runs']),
                last_tick=row['last_tick'][:19] + 'Z' if row['last_tick'] else None,
                last_task='%s %s' % (row['last_task_id'][:8], row['last_task_status'] or
                                     'unrecorded') if row['last_task_id'] else None)


def _leader_line(found: dict[str, Any]) -> str:
    """Which scheduler leads, or why none is known to."""
    if not found['records']:
        return '(task records are off: no last ticks; a scheduler needs RECORDS_URL)'
    if found['leader']:
        return 'leading scheduler: %s, since %s' % (found['leader']['holder'],
                                                    found['leader']['since'])
    return 'no scheduler leads: start `kale scheduler` or `kale worker --scheduler`'


def cmd_run(args: argparse.Namespace) -> int:
    from kale.schedules.scheduler import run_now
    print(run_now(default_app(), args.name))
    return 0


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale scheduler`` and ``kale schedules``."""
    command(commands, 'scheduler', cmd_scheduler, 'publish the periodic tasks',
            "Publish each schedule's ticks (task classes of TASK_MODULES that say schedule = ..., "
            'and SCHEDULES) until SIGTERM or Ctrl-C. Run as many as you like: the one holding '
            'the lease in the task records (RECORDS_URL) leads, and another takes over within '
            'SCHEDULER_LEASE_SEC when it dies.')
    sub = group(commands, 'schedules', 'periodic tasks: list, run',
                'The periodic tasks: task classes of TASK_MODULES that say schedule = ..., and '
                'the SCHEDULES setting.')
    command(sub, 'list', cmd_list, 'each schedule, its next runs and its last tick',
            'Each schedule: its task, its cron expression or interval and time zone, its next '
            "three run times (UTC), and from the task records its last tick and the state of "
            "that tick's task; and which scheduler leads. Each broken schedule (which the "
            'scheduler does not run) is one line saying what is wrong, and the exit code is then '
            '1.', JSON)
    command(sub, 'run', cmd_run, 'publish one run of a schedule now',
            'Publish one run of the schedule NAME now, with a task id of its own (its ticks go '
            'on as before); prints the task id.',
            arg('name', metavar='NAME', help='the schedule: its task path, or its key in '
                                             'SCHEDULES'))
