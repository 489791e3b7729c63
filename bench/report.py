"""Figures into tables: medians of the runs, targets, one full table per
configuration and a summary with one column per configuration."""
from __future__ import annotations

import os
import statistics
from typing import Any, Callable, Optional, Sequence

from bench import records
from bench.environment import ROOT, implied_idle_per_minute, shipped_long_polls
from bench.idle import idle_figure, latency_figures
from bench.scenarios import METRICS_DRAIN

RESULTS_DIR = os.path.join(ROOT, 'bench', 'results')
DRAIN = 'worker drain (tasks/s)'
CPU = 'worker CPU per task (µs)'
SPEED_UP = 'publish_batch speed-up over one by one (x)'

# figure -> (target text, check(kale median, baseline median) -> bool)
Check = Callable[[float, Optional[float]], bool]
TARGETS: dict[str, tuple[str, Check]] = {
    DRAIN: ('>= 0.85 x boto3', lambda k, b: b is not None and k >= 0.85 * b),
    'requests per task, publish_batch': ('<= 0.35', lambda k, b: k <= 0.35),
    'requests per task, publish one by one': ('<= 1.25', lambda k, b: k <= 1.25),
    SPEED_UP: ('>= 5', lambda k, b: k >= 5),
    latency_figures('equal')[0]: ('<= 50', lambda k, b: k <= 50),
    latency_figures('shipped')[0]: ('<= 50', lambda k, b: k <= 50),
    idle_figure('equal'): ('<= 12', lambda k, b: k <= 12),
    'worker peak memory (MB)': ('<= 80', lambda k, b: k <= 80),
    'messages settled past their budget': ('0', lambda k, b: k == 0),
    METRICS_DRAIN: ('>= 0.95 x off', lambda k, b: b is not None and k >= 0.95 * b),
    # Records on beside records off (the baseline of these rows), issue 12.
    records.DRAIN: ('>= 0.9 x off', lambda k, b: b is not None and k >= 0.9 * b),
    records.PUBLISH_SINGLE: ('>= 0.85 x off', lambda k, b: b is not None and k >= 0.85 * b),
    records.PUBLISH_BATCH: ('>= 0.85 x off', lambda k, b: b is not None and k >= 0.85 * b),
    records.RECORDED: ('100', lambda k, b: k == 100),
}
MEMORY_DRAIN_TARGET: tuple[str, Check] = ('>= 400 at 20 ms', lambda k, b: k >= 400)


def shipped_idle_target() -> tuple[str, Check]:
    """What the shipped long polls imply: each queue polled again as soon as
    its long poll ends (60 / long poll a minute each), within -15%..+10%."""
    implied = implied_idle_per_minute(shipped_long_polls())
    return ('~%.0f (own long polls)' % implied,
            lambda k, b: 0.85 * implied <= k <= 1.1 * implied)


def summarize(values: Sequence[Optional[float]]) -> Optional[dict[str, Any]]:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {'median': statistics.median(present), 'min': min(present), 'max': max(present),
            'runs': present}


def judge(results: dict[str, dict[str, Any]], memory: bool, latency_ms: float) -> None:
    """Add each figure's ratio to the baseline, its target and whether it is met."""
    for figure, result in results.items():
        kale, baseline = result['kale'], result['baseline']
        if kale and baseline and baseline['median']:
            result['ratio'] = kale['median'] / baseline['median']
        target = TARGETS.get(figure)
        if figure == idle_figure('shipped'):
            target = shipped_idle_target()
        if figure == DRAIN and memory:
            target = MEMORY_DRAIN_TARGET if latency_ms == 20 else None
        if figure in latency_figures('equal') + latency_figures('shipped') and memory:
            target = None       # the 50 ms target is for an SQS endpoint
        if target and kale:
            result['target'] = target[0]
            result['met'] = bool(target[1](kale['median'], baseline and baseline['median']))


def number(value: float) -> str:
    return '%.3g' % value if abs(value) < 10 else '%.0f' % value


def _cell(summary: Optional[dict[str, Any]]) -> str:
    if not summary:
        return '-'
    return '%s [%s..%s]' % (number(summary['median']), number(summary['min']),
                            number(summary['max']))


def _aligned(rows: list[tuple[str, ...]], separator: str = '  ') -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join(separator.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


#: What the baseline is, by transport: the plainest consumer of the same queues.
BASELINES = {'sqs': 'raw boto3 loop', 'memory': 'raw memory-transport loop'}


def table(results: dict[str, dict[str, Any]], transport: str = 'sqs') -> str:
    """Every figure of one configuration: medians with min and max, ratio, target."""
    rows = [('scenario', 'kale: median [min..max]',
             'baseline (%s; records: off)' % BASELINES[transport], 'ratio', 'target', 'met')]
    for figure, result in results.items():
        rows.append((figure, _cell(result['kale']), _cell(result['baseline']),
                     '%.2f' % result['ratio'] if 'ratio' in result else '-',
                     result.get('target', '-'),
                     {True: 'yes', False: 'NO'}.get(result.get('met'), '-')))
    return _aligned(rows)


# --- the summary: one column per configuration ------------------------------------------

# (row label, figure, how, unit). how: 'raw' the baseline's median, 'kale' Kale's,
# 'ratio' Kale's with its ratio to the baseline, 'both' Kale's with the baseline's,
# 'off' records on with records off and their ratio.
SUMMARY_ROWS: list[tuple[str, str, str, str]] = [
    ('drain: raw boto3 loop', DRAIN, 'raw', '/s'),
    ('drain: Kale', DRAIN, 'ratio', '/s'),
    ('CPU per task: raw boto3 loop', CPU, 'raw', ' µs'),
    ('CPU per task: Kale worker', CPU, 'ratio', ' µs'),
    ('publish_batch speed-up: Kale (raw)', SPEED_UP, 'both', 'x'),
    ('requests per task, batch: Kale (raw)', 'requests per task, publish_batch', 'both', ''),
    ('requests per task, one by one: Kale (raw)', 'requests per task, publish one by one',
     'both', ''),
    ('p50 start, equal long polls: Kale (raw)', latency_figures('equal')[0], 'both', ' ms'),
    ('p99 start, equal long polls: Kale (raw)', latency_figures('equal')[1], 'both', ' ms'),
    ('p50 start, shipped long polls: Kale (raw)', latency_figures('shipped')[0], 'both', ' ms'),
    ('p99 start, shipped long polls: Kale (raw)', latency_figures('shipped')[1], 'both', ' ms'),
    ('idle req/min, equal long polls: Kale (raw)', idle_figure('equal'), 'both', ''),
    ('idle req/min, shipped long polls: Kale (raw)', idle_figure('shipped'), 'both', ''),
    ('peak memory: Kale (raw)', 'worker peak memory (MB)', 'both', ' MB'),
    ('messages settled past their budget', 'messages settled past their budget', 'kale', ''),
    ('drain: records on (off)', records.DRAIN, 'off', '/s'),
    ('publish one by one: records on (off)', records.PUBLISH_SINGLE, 'off', '/s'),
    ('publish_batch: records on (off)', records.PUBLISH_BATCH, 'off', '/s'),
    ('CPU per task: records on (off)', records.CPU, 'off', ' µs'),
]


def _median(result: dict[str, Any], side: str) -> Optional[float]:
    summary = result.get(side)
    return summary['median'] if summary else None


def summary_cell(result: Optional[dict[str, Any]], how: str, unit: str) -> str:
    if result is None:
        return ''
    kale, raw = _median(result, 'kale'), _median(result, 'baseline')
    shown = raw if how == 'raw' else kale
    if shown is None:
        return '-'
    text = number(shown) + unit
    if how == 'ratio' and 'ratio' in result:
        text += ' (%.2fx raw)' % result['ratio']
    elif how == 'both' and raw is not None:
        text += ' (raw %s%s)' % (number(raw), unit.strip())
    elif how == 'off' and raw is not None:
        text += ' (off %s%s, %.2fx)' % (number(raw), unit.strip(), shown / raw if raw else 0)
    return text


def summary(configurations: list[dict[str, Any]]) -> str:
    """The headline figures side by side, one column per configuration (medians)."""
    rows = [('',) + tuple(c['label'] for c in configurations)]
    baseline = BASELINES[configurations[0].get('transport', 'sqs')] if configurations \
        else BASELINES['sqs']                     # one transport per run of the benchmark
    for label, figure, how, unit in SUMMARY_ROWS:
        label = label.replace(BASELINES['sqs'], baseline)
        cells = tuple(summary_cell(c['results'].get(figure), how, unit) for c in configurations)
        if any(cells):
            rows.append((label,) + cells)
    return _aligned(rows, ' | ')


def json_path(name: str) -> str:
    """Where ``--json`` writes: a bare file name lands in bench/results/ (ignored by git)."""
    if os.path.dirname(name):
        return name
    os.makedirs(RESULTS_DIR, exist_ok=True)
    return os.path.join(RESULTS_DIR, name)
