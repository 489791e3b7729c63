"""``kale tasks list|show|count|summary|purge|retry|cancel`` and ``kale workers``:
the task records on the command line, with the REST API's filters. Tables by
default, ``--json`` on request."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Sequence

from kale.cli.control import add_worker_commands
from kale.cli.options import JSON, YES, arg, command, confirm, flag, group, output, positive_int
from kale.exceptions import CommandError, RecordNotFoundError
from kale.statuses import PENDING_FILTER, TaskStatus, WorkerState, status_values

LIST_COLUMNS = [('ID', 'id'), ('TASK', 'task'), ('QUEUE', 'queue'), ('STATUS', 'status'),
                ('ATTEMPTS', 'attempts'), ('PUBLISHED', 'published_at'),
                ('DURATION', 'duration_sec'), ('ERROR', 'error_message')]
WORKER_COLUMNS = [('WORKER', 'id'), ('ROLE', 'role'), ('STATE', 'state'), ('QUEUES', 'queues'),
                  ('RUNNING NOW', 'current_task'), ('HEARTBEAT', 'heartbeat_at'),
                  ('COUNTS', 'counts')]


def table(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]]) -> str:
    cells = [[title for title, _ in columns]] + [[_cell(row.get(key)) for _, key in columns]
                                                 for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     .rstrip() for line in cells)


def _cell(value: Any) -> str:
    if value is None:
        return '-'
    if isinstance(value, float):
        return '%.3fs' % value
    if isinstance(value, dict):
        return ','.join('%s=%s' % item for item in sorted(value.items())) or '-'
    if isinstance(value, list):
        return ','.join(map(str, value)) or '-'
    text = str(value).replace('\n', ' ')
    return text if len(text) <= 60 else text[:57] + '...'


def _filter(args: argparse.Namespace) -> Any:
    """The filters given as options, as the REST API's query parameters take them."""
    from kale.records.queries import parse_filter
    params = {name: getattr(args, name) for name in ('status', 'task', 'queue', 'since', 'until')
              if getattr(args, name, None)}
    for label in getattr(args, 'label', None) or ():
        key, sep, value = label.partition('=')
        if not sep:
            raise CommandError('--label must be KEY=VALUE, got %r' % label)
        params['label.' + key] = value
    return parse_filter(params)


def _queries() -> Any:
    from kale import records
    return records.queries()


def cmd_list(args: argparse.Namespace) -> int:
    page, cursor = _queries().page(_filter(args), args.limit, args.cursor)
    rows = [record.as_json(detail=False) for record in page]
    if args.json:
        return output(args, {'tasks': rows, 'next': cursor}, None)
    for row, record in zip(rows, page, strict=True):
        row['duration_sec'] = record.duration_sec
    columns = LIST_COLUMNS
    if any(row.get('next_attempt_at') for row in rows):     # tasks waiting for a due time
        columns = LIST_COLUMNS[:6] + [('DUE', 'next_attempt_at')] + LIST_COLUMNS[6:]
    print(table(columns, rows) if rows else 'no task records match')
    if cursor:
        print('(more: --cursor %s)' % cursor)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from kale import records
    task_id = records.resolve(args.task_id)
    record = records.get(task_id)
    if record is None:
        raise RecordNotFoundError('no record of task %s' % args.task_id)
    data = record.as_json()
    history = records.attempts(task_id)
    width = max(len(key) for key in data)
    lines = [_field_line(key, value, width) for key, value in data.items()]
    lines.append('attempts:' if history else 'attempts: none started')
    return output(args, dict(data, attempt_history=history),
                  '\n'.join(lines + [_attempt_line(attempt) for attempt in history]))


def _field_line(key: str, value: Any, width: int) -> str:
    """One field of a record, its name padded to ``width`` (a traceback below its name)."""
    if key == 'error_traceback' and value:
        return '%s:\n%s' % (key, value.rstrip())
    shown = json.dumps(value) if isinstance(value, (dict, list)) else _cell(value)
    return '%s  %s' % (key.ljust(width), shown if key != 'duration_sec' else value)


def _attempt_line(attempt: dict[str, Any]) -> str:
    """One attempt of a task: its number, status, start, duration, worker,
    error, and the delay of the retry that followed."""
    from kale.store.record import iso
    delay = attempt.get('retry_delay_sec')
    return '  %d  %s  %s  %s  %s%s%s' % (
        attempt['attempt'], attempt['status'], _cell(iso(attempt['started_at'])),
        '%.3fs' % attempt['duration_sec'] if attempt['duration_sec'] is not None else '-',
        attempt['worker'] or '-', '  %s: %s' % (attempt['error_type'], attempt[
            'error_message']) if attempt['error_type'] else '',
        '  (retried after %gs)' % delay if delay is not None else '')


def cmd_count(args: argparse.Namespace) -> int:
    count = _queries().count(_filter(args))
    return output(args, {'count': count}, count)


def cmd_summary(args: argparse.Namespace) -> int:
    from kale.records import STATUSES
    summary = _queries().summary(_filter(args))
    rows = [dict(task=task, **{s: counts.get(s, 0) for s in STATUSES})
            for task, counts in sorted(summary['by_task'].items())]
    rows.append(dict(task='total', **{s: summary['by_status'][s] for s in STATUSES}))
    return output(args, summary, table([('TASK', 'task')] + [(s.upper(), s) for s in STATUSES],
                                       rows))


def cmd_purge(args: argparse.Namespace) -> int:
    from kale import records
    from kale.app import default_app
    config = default_app().config
    where = _filter(args)
    started = time.monotonic()
    if where.empty and not args.all:
        ttls = (config.RECORDS_SUCCEEDED_TTL_SEC, config.RECORDS_FAILED_TTL_SEC,
                config.RECORDS_QUEUED_TTL_SEC)
        purged = records.store().records.purge_expired(*ttls[:2], queued_ttl=ttls[2])
        print('purged %d expired records in %.1fs (RECORDS_SUCCEEDED_TTL_SEC %s, '
              'RECORDS_FAILED_TTL_SEC %s, RECORDS_QUEUED_TTL_SEC %s)'
              % (purged, time.monotonic() - started, *ttls))
        return 0
    queries = records.queries()
    if not args.yes and not confirm('Delete %d task records?' % queries.count(where)):
        raise CommandError('purge cancelled (nothing was deleted)')
    started = time.monotonic()
    deleted = queries.delete(where)
    print('deleted %d records in %.1fs' % (deleted, time.monotonic() - started))
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from kale import records
    if args.failed:
        report = records.retry_matching(_filter(args))
        for item in report['published']:
            print('%s  retries %s' % (item['id'], item['retry_of']))
        for item in report['refused']:
            print('kale: not retried: %s' % item['error'], file=sys.stderr)
        print('published %d; %d retried before; %d refused' % (
            len(report['published']), report['already_retried'], len(report['refused'])),
            file=sys.stderr)
        return 0
    if not args.task_id:
        raise CommandError('kale tasks retry: give a TASK_ID, or --failed with filters')
    task_id = records.resolve(args.task_id)
    new_id, published = records.retry_reporting(task_id)
    print(new_id)
    if not published:
        print('task %s was retried before, as %s; nothing published now' % (task_id, new_id),
              file=sys.stderr)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from kale import records
    record = records.cancel(records.resolve(args.task_id))
    print('cancelled %s (%s)' % (record.id, record.task))
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    from kale.records import controls
    found = controls.workers(args.state)
    shown = [dict(w, state='stopping') if w['stop_requested_at']      # a stop was asked of it
             and w['state'] == WorkerState.RUNNING else w for w in found]
    return output(args, {'workers': found},
                  table(WORKER_COLUMNS, shown) if found else 'no workers recorded')


#: The filters of the commands on many records, as the REST API's.
FILTERS = (arg('--status', help='%s or %s; several separated by commas' % (
               ', '.join(status_values(TaskStatus)), PENDING_FILTER)),
           arg('--task', help='task path (module.Class) or class name'),
           arg('--queue', help='queue name'),
           arg('--label', action='append', metavar='KEY=VALUE',
               help='label equals value (repeatable)'),
           arg('--since', help='published at or after (epoch seconds or ISO 8601)'),
           arg('--until', help='published before (epoch seconds or ISO 8601)'))
TASK_ID = arg('task_id', metavar='TASK_ID')


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale tasks`` and ``kale workers``."""
    sub = group(commands, 'tasks', 'task records: list, show, count, purge, ...',
                'Task records (RECORDS_URL).')
    command(sub, 'list', cmd_list, 'records, newest first', None, *FILTERS, JSON,
            arg('--limit', type=positive_int, default=50, help='at most N (default 50)'),
            arg('--cursor', help='the page after this cursor (printed by the last page)'))
    command(sub, 'show', cmd_show, 'one whole record', None, TASK_ID, JSON)
    command(sub, 'count', cmd_count, 'how many records match', None, *FILTERS, JSON)
    command(sub, 'summary', cmd_summary, 'counts by task and status', None, *FILTERS, JSON)
    command(sub, 'purge', cmd_purge, 'delete expired records, or those matching filters',
            'With no filter: delete the records past RECORDS_SUCCEEDED_TTL_SEC, '
            'RECORDS_FAILED_TTL_SEC or RECORDS_QUEUED_TTL_SEC, as workers do now and then. With '
            'filters (or --all): delete the matching records, after confirmation.',
            *FILTERS, flag('--all', 'delete every record'), YES)
    command(sub, 'retry', cmd_retry, 'publish a failed task again, once; prints its id',
            'Publish a failed task again from its record (TASK_ID, or a unique prefix of it), '
            "once: a second retry prints the first one's id. With --failed: every failed task "
            'the filters match.', arg('task_id', metavar='TASK_ID', nargs='?'),
            flag('--failed', 'retry every failed task the filters match'), *FILTERS)
    command(sub, 'cancel', cmd_cancel, 'cancel a task that has not started', None, TASK_ID)
    workers = command(commands, 'workers', cmd_workers,
                      'worker and supervisor processes from the records',
                      'Workers and supervisors that recorded themselves: running, stopped, or '
                      'lost (no heartbeat for three intervals).',
                      arg('--state', choices=status_values(WorkerState)), JSON)
    add_worker_commands(workers)
