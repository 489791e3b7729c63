"""``kale workers stop ID`` and ``kale queues pause|resume NAME``: what
operators ask of running workers, kept in the task records (see
:mod:`kale.records.controls`); workers read it with their heartbeat."""
from __future__ import annotations

import argparse
import sys

from kale.cli.options import arg, command, subcommands


def cmd_stop_worker(args: argparse.Namespace) -> int:
    from kale.records import controls
    worker = controls.stop_worker(args.worker_id)
    print('asked %s %s to stop: it receives no more, finishes what it runs and exits '
          '(within a few seconds of its next heartbeat)' % (worker['role'], worker['id']))
    return 0


def cmd_pause_queue(args: argparse.Namespace) -> int:
    from kale.records import controls
    answer = controls.pause_queue(args.queue)
    print('paused queue %s (since %s): workers stop receiving from it within a few seconds; '
          'its messages wait in SQS' % (answer['queue'], answer['paused_at']))
    return 0


def cmd_resume_queue(args: argparse.Namespace) -> int:
    from kale.records import controls
    answer = controls.resume_queue(args.queue)
    if not answer['was_paused']:
        print('queue %s was not paused' % answer['queue'], file=sys.stderr)
    else:
        print('resumed queue %s: workers receive from it again within a few seconds'
              % answer['queue'])
    return 0


def print_paused() -> None:
    """After ``kale queues``' table: the paused queues, when records are on."""
    from kale.app import default_app
    if not default_app().config.RECORDS_URL:
        return
    from kale.records import controls
    from kale.store.record import iso
    for name, since in sorted(controls.paused_queues().items()):
        print('paused: %s since %s (kale queues resume %s)' % (name, iso(since), name))


def add_worker_commands(workers: argparse.ArgumentParser) -> None:
    """``kale workers stop ID`` under ``kale workers``."""
    command(subcommands(workers, 'workers', required=False), 'stop', cmd_stop_worker,
            'stop a worker gracefully',
            'Ask a worker (an id from `kale workers`, or a unique prefix of it such as host:pid) to '
            'stop: it receives no more, finishes what it runs and exits 0; a --concurrency '
            'supervisor does not restart it. Asked of a supervisor, it stops all its workers. '
            'Read with its heartbeat, within a few seconds.', arg('worker_id', metavar='ID'))


def add_queue_commands(queues: argparse.ArgumentParser) -> None:
    """``kale queues pause|resume NAME`` under ``kale queues``."""
    sub = subcommands(queues, 'queues', required=False)
    for name, func, text in (
            ('pause', cmd_pause_queue, 'every worker stops receiving from the queue within a '
                                       'few seconds; its messages wait in SQS, nothing is lost'),
            ('resume', cmd_resume_queue, 'workers receive from the queue again')):
        command(sub, name, func, text.split(';')[0], '%s NAME: %s. Kept in the task records '
                '(RECORDS_URL).' % (name.capitalize(), text),
                arg('queue', metavar='NAME', help='queue name from the queue config'))
