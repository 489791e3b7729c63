"""`python -m bench`: Kale beside the raw boto3 baseline, on the same endpoint, in one run.

    python -m bench                                  # embedded moto endpoint
    python -m bench --transport memory --latency-ms 20
    python -m bench --endpoint-url http://127.0.0.1:9324 --tasks 600 --runs 5 --json out.json

See bench/README.md for what each figure means and how to read them.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from typing import Any, Callable, Optional, Sequence

from bench import scenarios
from bench.environment import Environment

# figure -> (target text, check(kale median, baseline median, all figures) -> bool)
Check = Callable[[float, Optional[float], dict[str, Any]], bool]
TARGETS: dict[str, tuple[str, Check]] = {
    'worker drain (tasks/s)': ('>= 0.85 x boto3', lambda k, b, f: b is not None and k >= 0.85 * b),
    'requests per task, publish_batch': ('<= 0.35', lambda k, b, f: k <= 0.35),
    'requests per task, publish one by one': ('<= 1.25', lambda k, b, f: k <= 1.25),
    'publish_batch speed-up over one by one (x)': ('>= 5', lambda k, b, f: k >= 5),
    'publish-to-start latency p50 (ms)': ('<= 50', lambda k, b, f: k <= 50),
    'idle requests per minute, 3 empty queues': ('<= 12', lambda k, b, f: k <= 12),
    'worker peak memory (MB)': ('<= 80', lambda k, b, f: k <= 80),
    'messages settled past their budget': ('0', lambda k, b, f: k == 0),
}
MEMORY_DRAIN_TARGET = ('>= 400 at 20 ms', lambda k, b, f: k >= 400)


def summarize(values: Sequence[Optional[float]]) -> Optional[dict[str, float]]:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {'median': statistics.median(present), 'min': min(present), 'max': max(present),
            'runs': present}


def collect(env: Environment, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Run every chosen scenario ``args.runs`` times; medians with min and max."""
    runs: dict[str, list[tuple[Optional[float], Optional[float]]]] = {}
    plan: list[tuple[str, Callable[[], scenarios.Figures]]] = [
        ('publish', lambda: scenarios.publish_rates(env, args.tasks)),
        ('drain', lambda: scenarios.drain_and_requests(env, args.tasks)),
        ('latency', lambda: scenarios.latency(env, args.latency_samples)),
        ('idle', lambda: scenarios.idle_cost(env, args.idle_window)),
    ]
    for name, scenario in plan:
        if name not in args.scenarios:
            continue
        for number in range(args.runs):
            started = time.monotonic()
            for figure, pair in scenario().items():
                runs.setdefault(figure, []).append(pair)
            print('bench: %s run %d/%d done in %.1fs' % (name, number + 1, args.runs,
                                                         time.monotonic() - started),
                  file=sys.stderr, flush=True)
    results = {}
    for figure, pairs in runs.items():
        kale = summarize([k for k, _ in pairs])
        baseline = summarize([b for _, b in pairs])
        results[figure] = {'kale': kale, 'baseline': baseline}
    return results


def judge(results: dict[str, dict[str, Any]], memory: bool, latency_ms: float) -> None:
    for figure, result in results.items():
        kale, baseline = result['kale'], result['baseline']
        if kale and baseline and baseline['median']:
            result['ratio'] = kale['median'] / baseline['median']
        target = TARGETS.get(figure)
        if figure == 'worker drain (tasks/s)' and memory:
            target = MEMORY_DRAIN_TARGET if latency_ms == 20 else None
        if figure == 'publish-to-start latency p50 (ms)' and memory:
            target = None       # the 50 ms target is for the local endpoint
        if target and kale:
            result['target'] = target[0]
            result['met'] = bool(target[1](kale['median'], baseline and baseline['median'],
                                           results))


def _cell(summary: Optional[dict[str, float]]) -> str:
    if not summary:
        return '-'
    return '%s [%s..%s]' % (_number(summary['median']), _number(summary['min']),
                            _number(summary['max']))


def _number(value: float) -> str:
    return '%.3g' % value if abs(value) < 10 else '%.0f' % value


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [('scenario', 'kale: median [min..max]', 'boto3 baseline', 'ratio', 'target', 'met')]
    for figure, result in results.items():
        rows.append((figure, _cell(result['kale']), _cell(result['baseline']),
                     '%.2f' % result['ratio'] if 'ratio' in result else '-',
                     result.get('target', '-'),
                     {True: 'yes', False: 'NO'}.get(result.get('met'), '-')))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip()
                     for row in rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m bench', description=__doc__.split('\n')[0])
    parser.add_argument('--endpoint-url', help='an SQS endpoint (default: start the embedded one)')
    parser.add_argument('--transport', choices=['sqs', 'memory'], default='sqs')
    parser.add_argument('--latency-ms', type=float, default=0.0,
                        help='memory transport: added to every request (AWS in-region: 10-20)')
    parser.add_argument('--tasks', type=int, default=300, help='tasks per run (default 300)')
    parser.add_argument('--runs', type=int, default=3, help='runs per scenario (default 3)')
    parser.add_argument('--latency-samples', type=int, default=50, metavar='M')
    parser.add_argument('--idle-window', type=float, default=40.0, metavar='SEC',
                        help='how long idle cost is measured (default 40)')
    parser.add_argument('--scenarios', default='publish,drain,latency,idle',
                        type=lambda text: text.split(','), help='which to run (default: all)')
    parser.add_argument('--json', metavar='FILE', help='also write the results as JSON')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    env = Environment(args.transport, args.endpoint_url, args.latency_ms).start()
    try:
        results = collect(env, args)
    finally:
        env.stop()
    judge(results, args.transport == 'memory', args.latency_ms)
    print('Kale benchmark: %s; %d tasks, %d runs per scenario'
          % (env.describe(), args.tasks, args.runs))
    print(table(results))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'transport': args.transport, 'endpoint': env.endpoint,
                       'latency_ms': args.latency_ms, 'tasks': args.tasks, 'runs': args.runs,
                       'results': results}, f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
