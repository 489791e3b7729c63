"""Operator commands: ``kale queues`` (its ``pause`` and ``resume``: :mod:`kale.cli.control`),
``kale purge``, ``kale dlq redrive``, ``kale publish``."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable, Optional

from kale import admin
from kale.app import default_app
from kale.cli.control import add_queue_commands, print_paused
from kale.cli.options import YES, arg, command, confirm, counts_text, flag, group, positive_int
from kale.exceptions import CommandError

COLUMNS = [('QUEUE', 'name'), ('PRIORITY', 'priority'), ('VISIBLE', 'visible'),
           ('IN FLIGHT', 'in_flight'), ('DELAYED', 'delayed'), ('DEAD LETTERS', 'dead_letters')]


def format_table(rows: list[admin.QueueStatus]) -> str:
    cells = [[title for title, _ in COLUMNS]] + [_cells(row.as_dict()) for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return '\n'.join('  '.join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths, strict=False)))
                     for line in cells)


def _cells(values: dict[str, Any]) -> list[str]:
    return ['-' if values[key] is None else str(values[key]) for _, key in COLUMNS]


def cmd_queues(args: argparse.Namespace) -> int:
    if args.json:                   # with the autoscaling signals (kale.admin)
        from kale.admin import queue_signals
        app = default_app()
        signals = queue_signals(app.command_broker,
                                app.store.queries if app.config.RECORDS_URL else None)
        print(json.dumps([row.as_dict() for row in signals], indent=2))
        return 0
    rows = admin.queue_statuses(default_app().command_broker)
    print(format_table(rows))
    if any(row.visible is None for row in rows):
        print('(- : the queue does not exist yet; it is created on first use)')
    print_paused()
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    broker = default_app().command_broker
    queue = broker.queues.get_queue(args.queue)
    target = broker.dead_letter_name(queue) if args.dead_letters else broker.sqs_name(queue)
    if not args.yes and not confirm('Delete every message in SQS queue %r?' % target):
        raise CommandError('purge of %r cancelled (nothing was deleted)' % target)
    if args.dead_letters and default_app().config.PAYLOAD_BUCKET:
        return _purge_dead_letters(broker, queue, str(target))
    before = time.time()
    admin.purge(broker, queue, dead_letters=args.dead_letters)
    print('purged %s' % target)
    if default_app().config.RECORDS_URL and not args.dead_letters:
        _mark_purged(queue.name, before)
    return 0


def _mark_purged(queue: str, before: float) -> None:
    """The queue's waiting task records become ``purged``: none stays ``queued`` for ever."""
    from kale import records
    marked = records.mark_purged(queue, before)
    print('marked %d waiting task record%s of %s purged' % (marked, '' if marked == 1 else 's',
                                                             queue))


def _purge_dead_letters(broker: Any, queue: Any, target: str) -> int:
    """Dead letters may point at payloads in S3: read them, to delete those too."""
    report = admin.purge_dead_letters(broker, queue, _progress(
        lambda done: 'purging %s: %d dead letters, %d payload objects deleted'
        % (target, done.dead_letters, done.objects)))
    sys.stderr.write('\n' if report.dead_letters else '')
    print('purged %s: %d dead letters and the %d payload objects in S3 they pointed at'
          % (target, report.dead_letters, report.objects))
    return 0


def _progress(line: Callable[[Any], str]) -> Callable[[Any], None]:
    """A progress callback: ``line`` of the report so far, rewritten in place on stderr."""
    def progress(report: Any) -> None:
        sys.stderr.write('\r' + line(report))
        sys.stderr.flush()
    return progress


def _when(epoch: Optional[float]) -> str:
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(epoch or 0))


def cmd_dlq_redrive(args: argparse.Namespace) -> int:
    broker = default_app().command_broker
    queue = broker.queues.get_queue(args.queue)
    source, target = broker.dead_letter_name(queue), broker.sqs_name(queue)
    if not (args.yes or args.dry_run):
        _confirm_redrive(args.reason, source, target)
    progress = _progress(lambda done: 'redriving %s: %d %s, %d left in place' % (
        queue.name, done.moved, 'would move' if args.dry_run else 'moved',
        done.skipped + done.not_matching))
    report = admin.redrive(broker, queue, limit=args.limit, reason=args.reason,
                           dry_run=args.dry_run, progress=progress)
    sys.stderr.write('\n' if report.moved or report.skipped or report.not_matching else '')
    _print_moved(report, args.dry_run, source, target)
    _print_left(report, target)
    return 0


def _confirm_redrive(reason: Optional[str], source: Optional[str], target: str) -> None:
    """Ask before moving dead letters; CommandError when the answer is no."""
    which = 'dead letters of reason %r' % reason if reason else 'every dead letter'
    if not confirm('Move %s from %s back to %s, to run again?' % (which, source, target)):
        raise CommandError('redrive of %r cancelled (nothing was moved)' % source)


def _print_moved(report: admin.RedriveReport, dry_run: bool, source: Optional[str],
                 target: str) -> None:
    """How many dead letters were moved (or would be), for which reasons, and
    when they were first published."""
    print('%s %d dead letter%s from %s back to %s%s' % (
        'would move' if dry_run else 'moved', report.moved,
        '' if report.moved == 1 else 's', source, target,
        ' (%s)' % counts_text(report.reasons) if report.reasons else ''))
    if report.moved:
        print('first published between %s and %s; %s' % (
            _when(report.first_published_at), _when(report.last_published_at),
            'they would be issued afresh' if dry_run else 'the copies are issued afresh'))


def _print_left(report: admin.RedriveReport, target: str) -> None:
    """How many dead letters stayed in the dead-letter queue, and why."""
    if report.not_matching:
        print('left %d of other reasons in the dead-letter queue' % report.not_matching)
    if report.skipped:
        print('left %d in the dead-letter queue that cannot be decoded for %s (%s)'
              % (report.skipped, target, counts_text(report.skipped_reasons)))


def _json_option(text: Optional[str], option: str, kind: type, default: Any) -> Any:
    if text is None:
        return default
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CommandError('%s is not valid JSON: %s' % (option, exc)) from None
    if not isinstance(value, kind):
        raise CommandError('%s must be a JSON %s, got %s' % (
            option, 'array' if kind is list else 'object', type(value).__name__))
    return value


def cmd_publish(args: argparse.Namespace) -> int:
    positional = _json_option(args.args, '--args', list, [])
    keywords = _json_option(args.kwargs, '--kwargs', dict, {})
    print(admin.publish_by_path(default_app(), args.task_path, positional, keywords,
                                delay_sec=args.delay, app_data=args.app_data))
    return 0


def _app_data(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError('not valid JSON: %s' % exc) from None


QUEUE = arg('queue', metavar='QUEUE', help='queue name from the queue config')


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register the operator commands on the ``kale`` parser."""
    add_queue_commands(command(
        commands, 'queues', cmd_queues, 'show every configured queue and its message counts',
        'A table of every queue in the queue config: priority, and the approximate number of '
        'messages visible, in flight (being worked), delayed (scheduled retries) and in its '
        'dead-letter queue. Creates nothing.', flag('--json', 'print JSON for scripts')))
    command(commands, 'purge', cmd_purge, 'delete every message in a queue',
            'Delete every message in QUEUE (asks first unless --yes). SQS allows one purge per '
            'queue every 60 seconds. With PAYLOAD_BUCKET set, --dead-letters reads the dead '
            'letters ten at a time instead, to delete the payload objects in S3 they point at '
            'with them.', QUEUE, YES,
            flag('--dead-letters', "purge the queue's dead-letter queue instead"))
    dlq = group(commands, 'dlq', 'work with dead-letter queues', 'Dead-letter queue commands.')
    command(dlq, 'redrive', cmd_dlq_redrive, 'move dead letters back to their queue',
            "Move messages from QUEUE's dead-letter queue back to QUEUE with their retry and "
            'failure counts reset, ten at a time, each signed afresh for QUEUE with a new issue '
            'time (asks first unless --yes). Each copy is sent before its dead letter is '
            'deleted. Messages that do not verify for QUEUE stay where they are.', QUEUE,
            arg('--limit', type=positive_int, metavar='N', help='move at most N messages'),
            arg('--reason', metavar='REASON',
                help='move only dead letters of this reason (e.g. retries_exhausted, '
                     'non_retriable, max_receive_count)'),
            flag('--dry-run', 'move nothing; say what would move'), YES)
    command(commands, 'publish', cmd_publish, 'publish a task by its import path',
            'Publish one run of a task class, e.g. `kale publish myapp.tasks.HelloTask --args '
            '\'["world"]\'`. Prints the task id.',
            arg('task_path', metavar='TASK_PATH', help='module.ClassName of the task'),
            arg('--args', metavar='JSON', help="positional arguments, a JSON array"),
            arg('--kwargs', metavar='JSON', help='keyword arguments, a JSON object'),
            arg('--app-data', metavar='JSON', type=_app_data,
                help='app_data for the task, any JSON value'),
            arg('--delay', type=float, default=0, metavar='S',
                help='seconds before the task may run, up to 365 days (31536000)'))
