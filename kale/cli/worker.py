"""``kale worker``: one worker in this process, or N under a supervisor."""
from __future__ import annotations

import argparse
import os
from typing import Any

from kale.cli.options import arg, command, flag, port_number, positive_int, queue_list
from kale.exceptions import CommandError
from kale.settings_check import WORKER_POOLS as POOLS


def cmd_worker(args: argparse.Namespace) -> int:
    from kale.app import default_app
    overrides: dict[str, Any] = {}           # the options stand for the settings
    if args.metrics_port is not None:
        overrides['METRICS_PORT'] = args.metrics_port
    if args.executors:
        args.executors = os.path.abspath(args.executors)
        overrides['EXECUTOR_DIR'] = args.executors
    app = default_app()
    return run_worker(args, app.replace(**overrides) if overrides else app)


def run_worker(args: argparse.Namespace, app: Any) -> int:
    from kale.worker import Worker
    config = app.config
    pool = args.pool or config.WORKER_POOL
    if pool == 'serial' and args.max_in_flight is not None:
        raise CommandError('--max-in-flight needs --pool threads or --pool asyncio (the serial '
                           'pool runs one task at a time: use --concurrency for more processes)')
    if config.EXECUTOR_DIR:                 # a directory that cannot serve: said at start
        from kale.executors.task import catalog
        catalog(app)
    hooks: list[Any] = []
    if args.scheduler:              # no records or no schedules: one line, before starting
        from kale.schedules.scheduler import SchedulerHooks, records_state, runnable_schedules
        runnable_schedules(app)
        records_state(app)
        if args.concurrency is None:            # each supervised worker runs its own
            hooks.append(SchedulerHooks())
    worker = Worker(queue_names=args.queues, burst=args.burst, pool=pool,
                    max_in_flight=args.max_in_flight, dead_letters=args.dead_letters,
                    hooks=hooks, app=app)     # validates the configuration
    if args.concurrency is None:
        return worker.run()
    from kale.worker.supervisor import Supervisor, worker_command
    return Supervisor(worker_command(args), args.concurrency, config,
                      queue_names=args.queues or ()).run()


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    command(
        commands, 'worker', cmd_worker, 'run a worker on the configured queues',
        'Receive tasks from the configured queues (picked by QUEUE_SELECTOR) and run them until '
        'SIGTERM or Ctrl-C: the first signal finishes the running task and releases the rest of '
        'its batch; a second one stops the running task too. Exit codes: 0 stopped or burst '
        'done, 1 configuration error, 3 memory limit (DIE_ON_RESIDENT_SET_SIZE_MB), 4 a task '
        'stuck past its time limit (WORKER_STUCK_GRACE_SEC).',
        arg('--queues', type=queue_list, metavar='A,B',
            help='serve only these queues (default: every configured queue)'),
        arg('--executors', metavar='DIR',
            help='run executor tasks: a task whose method is NAME runs the program DIR/NAME, '
                 'arguments as a JSON list on its standard input, result as JSON on its '
                 'standard output (default: the EXECUTOR_DIR setting)'),
        flag('--dead-letters', "serve the dead-run queues of the queues instead: run the dead "
                               'runs (run_dead_task) of their tasks that failed for good'),
        flag('--scheduler', 'also run a scheduler on a thread of the worker, publishing the '
                            'periodic tasks while it leads (see kale scheduler)'),
        flag('--burst', 'exit once every served queue has nothing visible, in flight or delayed'),
        arg('--concurrency', type=positive_int, metavar='N',
            help='run N worker processes under a supervisor that restarts any that exit '
                 'abnormally (default: one worker, in this process)'),
        arg('--pool', choices=POOLS,
            help='how the worker runs its tasks: serial, one at a time (CPU-bound work); '
                 'threads, many at once on threads (blocking I/O); asyncio, many at once, async '
                 'def tasks on an event loop (default: the WORKER_POOL setting, serial)'),
        arg('--max-in-flight', type=positive_int, metavar='N',
            help='tasks one worker process runs at once on the threads and asyncio pools '
                 '(default: WORKER_MAX_IN_FLIGHT, or 16 for threads and 100 for asyncio)'),
        arg('--metrics-port', type=port_number, metavar='N',
            help='serve Prometheus metrics on http://METRICS_HOST:N/metrics (one endpoint for all '
                 'workers with --concurrency); 0 turns them off (default: the METRICS_PORT '
                 'setting)'))
