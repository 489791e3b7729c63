"""Publish example tasks: `python -m example.publisher --count 20 [--task fib]`.

Run from the repository root with KALE_SETTINGS_MODULE=example.taskworker.settings.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from example.taskworker import tasks
from kale.exceptions import KaleError


def publish_fibonacci(count: int) -> list[str]:
    return tasks.FibonacciTask.publish_batch(None, [((20 + i % 20,), {}) for i in range(count)])


def publish_flaky(count: int) -> list[str]:
    return tasks.FlakyTask.publish_batch(None, [(('order-%d' % i,), {}) for i in range(count)])


def publish_failing(count: int) -> list[str]:
    return tasks.AlwaysFailsTask.publish_batch(None, [((i,), {}) for i in range(count)])


def publish_slow(count: int) -> list[str]:
    return tasks.SlowReportTask.publish_batch(None, [((), {'seconds': 0.2})] * count)


PUBLISHERS: dict[str, Callable[[int], list[str]]] = {
    'fib': publish_fibonacci, 'flaky': publish_flaky, 'fail': publish_failing,
    'slow': publish_slow}


def mix(count: int) -> dict[str, int]:
    """How ``count`` tasks split over the kinds: mostly quick work, some of everything."""
    split = {'flaky': count // 5, 'fail': max(1, count // 20) if count >= 4 else 0,
             'slow': count // 10}
    split['fib'] = count - sum(split.values())
    return split


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description='Publish example tasks to the three queues.')
    parser.add_argument('--count', type=int, default=20, help='how many tasks (default 20)')
    parser.add_argument('--task', choices=['mix'] + sorted(PUBLISHERS), default='mix',
                        help='which task to publish (default: a mix of all of them)')
    args = parser.parse_args(argv)
    if args.count < 0:
        parser.error('--count must be 0 or more')
    plan = mix(args.count) if args.task == 'mix' else {args.task: args.count}
    try:
        for kind, count in plan.items():
            if count:
                PUBLISHERS[kind](count)
                print('published %d %s task(s)' % (count, kind))
    except KaleError as exc:
        print('publisher: error: %s' % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
