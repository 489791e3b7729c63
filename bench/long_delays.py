"""What a long wait costs in SQS requests (kale.delays), measured.

    python -m bench.long_delays [--tasks 100] [--days 1] [--prefetch N]

``--tasks`` tasks are published with ``delay_sec`` of ``--days`` days to the
in-memory transport, whose clock this script moves, never sleeping: to each
moment a copy becomes visible, where a new burst worker (a restart, each
time) receives what is visible, sends on what arrived early and runs what
is due. Counted, per waiting task and per day of its wait: the receives
that brought messages, the sends and the deletes (the workers' empty
receives and queue counts are theirs whatever waits, and are left out).
Also printed: how late after its due time each task ran, at most.

The tasks are published at once, so their copies arrive together and
share each receive, send and delete (ten to a request). ``--tasks 1`` gives
the figure for a task that waits alone: each of its copies costs its own
receive, send and delete. ``--prefetch N`` fixes the queue's receives at
N messages (the default, ``auto``, takes a whole batch from a queue whose
tasks the worker has not seen run, as each of these new workers has not).
The queue is the shipped ``default`` one, with no long poll
(a burst's last empty receive would otherwise wait a second each time).
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from kale import task
from kale.conf import settings

QUEUE_CONFIG = """\
default:
  name: default
  priority: 40
  batch_size: 10
  visibility_timeout_sec: 60
  long_poll_time_sec: 0
  num_iterations: 5
  prefetch: %s
"""


class MovedClock:
    """The machine's clocks moved ahead by ``offset`` seconds; a sleep moves
    them on at once instead of waiting (a worker's idle pause is simulated
    time, like the rest)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def time(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        self.offset += seconds


class Waiter(task.Task):
    """Notes when it ran, by the script's clock."""

    queue = 'default'
    time_limit = 5
    ran: dict[str, float] = {}
    clock: Any = None

    def run_task(self) -> None:
        Waiter.ran[self.task_id] = Waiter.clock.time()


def measure(tasks: int, days: float) -> dict[str, Any]:
    from bench.long_delays import Waiter  # importable by its path, run as __main__ too
    from kale import publisher
    from kale.broker import Broker
    from kale.queue_config import build_queue_config
    from kale.transport.memory import MemoryTransport
    from kale.worker import Worker

    clock = MovedClock()
    ran: dict[str, float] = {}
    due: dict[str, float] = {}

    class Counting(MemoryTransport):
        """Counts the receives that brought messages apart from the empty ones."""

        brought = 0

        def receive(self, *args: Any, **kwargs: Any) -> Any:
            found = super().receive(*args, **kwargs)
            if found:
                self.brought += 1
            return found

    transport = Counting(clock=clock)
    broker = Broker(transport, build_queue_config(settings.config), config=settings.config)
    queue = broker.queues['default']
    previous = publisher.set_publisher(publisher.Publisher(broker, clock=clock))
    try:
        for _ in range(tasks):
            task_id = Waiter.publish(None, delay_sec=days * 86400)
            due[task_id] = clock.time() + days * 86400
        Waiter.ran = ran
        Waiter.clock = clock
        before = collections.Counter(transport.requests)
        brought_before = transport.brought
        workers = 0
        stored = transport._queues[broker.sqs_name(queue)].messages
        while stored:
            visible_at = min(message.visible_at for message in stored.values())
            clock.offset += max(0.0, visible_at - clock.monotonic()) + 0.001
            Worker(queue_names=[queue.name], burst=True, broker=broker, clock=clock,
                   pool='serial').run()
            workers += 1
        requests = transport.requests - before
    finally:
        publisher.set_publisher(previous)
    task_days = tasks * days
    return {
        'tasks': tasks, 'days': days, 'workers': workers,
        'receives_per_task_day': (transport.brought - brought_before) / task_days,
        'sends_per_task_day': (requests['SendMessage'] + requests['SendMessageBatch']) / task_days,
        'deletes_per_task_day': requests['DeleteMessageBatch'] / task_days,
        'latest_sec': max(ran[task_id] - due[task_id] for task_id in due),
        'earliest_sec': min(ran[task_id] - due[task_id] for task_id in due),
        'all_ran': sorted(ran) == sorted(due),
    }


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m bench.long_delays', description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--tasks', type=int, default=100)
    parser.add_argument('--days', type=float, default=1.0)
    parser.add_argument('--prefetch', default='auto', help="the queue's prefetch (default auto)")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix='kale-bench-delays-')
    path = os.path.join(folder, 'queues.yaml')
    with open(path, 'w') as f:
        f.write(QUEUE_CONFIG % args.prefetch)
    os.environ.update({'KALE_SETTINGS_MODULE': 'bench.settings', 'KALE_BENCH_QUEUE_CONFIG': path})
    logging.disable(logging.INFO)
    started = time.monotonic()
    try:
        figures = measure(args.tasks, args.days)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    total = sum(figures[key] for key in ('receives_per_task_day', 'sends_per_task_day',
                                         'deletes_per_task_day'))
    print('%d tasks waiting %g days, prefetch %s: %d worker runs (each a restart), %.0f s'
          % (args.tasks, args.days, args.prefetch, figures['workers'],
             time.monotonic() - started))
    print('requests per waiting task per day: %.1f receives (with messages), %.1f sends, '
          '%.1f deletes: %.1f in all' % (figures['receives_per_task_day'],
                                         figures['sends_per_task_day'],
                                         figures['deletes_per_task_day'], total))
    print('ran %.2f to %.2f s after its due time; every task ran once: %s'
          % (figures['earliest_sec'], figures['latest_sec'], figures['all_ran']))
    return 0 if figures['all_ran'] else 1


if __name__ == '__main__':
    sys.exit(main())
