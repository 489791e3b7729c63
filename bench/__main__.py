"""`python -m bench`: Kale beside the raw boto3 baseline, on the same endpoint, in one run.

    python -m bench                                  # embedded moto endpoint
    python -m bench --endpoint fauxqs --latency-ms 0,10 --tasks 2000
    python -m bench --transport memory --latency-ms 20
    python -m bench --endpoint-url http://127.0.0.1:9324 --tasks 600 --runs 5 --json out.json
    python -m bench --endpoint fauxqs --records --scenarios publish,drain --tasks 2000
    python -m bench --endpoint fauxqs --scenarios workflow-chord,workflow-chain --latency-ms 0,10
    python -m bench --endpoint fauxqs --scenarios outbox-relay,outbox-lag,outbox-publish --latency-ms 0,10
    python -m bench --endpoint fauxqs --scenarios flow-rate,flow-concurrency,flow-fleet --latency-ms 0,10
    python -m bench --endpoint fauxqs --scenarios fleet --latency-ms 10 --fleet-workers 1,2,4,8
    python -m bench --scenarios records-volume --runs 1

Each ``--latency-ms`` value is a configuration of its own; all scenarios run
in each, then a summary puts them side by side. See bench/README.md for what
each figure means and how to read them.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Callable, NoReturn, Optional, Sequence

from bench import (
    baseline,
    fleet_scale,
    flow,
    idle,
    outbox,
    pools,
    records,
    report,
    scenarios,
    volume,
    volume_rows,
    workflows,
)
from bench.environment import EQUAL_LONG_POLLS, ROOT, Environment, shipped_long_polls
from bench.servers import BenchError, Endpoint

SCENARIOS = ('publish', 'drain', 'latency', 'latency-shipped', 'idle', 'idle-shipped')
#: Run only when named in --scenarios.
OPTIONAL_SCENARIOS = ('drain-metrics', 'io-asyncio', pools.IO_RECORDS_SCENARIO, 'io-threads',
                      'drain-pools',
                      'drain-versus', 'workflow-chord', 'workflow-chain') + outbox.SCENARIOS \
    + flow.SCENARIOS + (fleet_scale.SCENARIO, volume.SCENARIO)
#: Of those, the ones that run worker processes (not on the memory transport).
PROCESS_SCENARIOS = ('drain-versus', 'workflow-chord', 'workflow-chain', 'flow-fleet',
                     fleet_scale.SCENARIO) + outbox.SCENARIOS
#: Kale with task records on beside off (bench/records.py); run with --records.
RECORDS_SCENARIOS = ('publish-records', 'drain-records')


def collect(env: Environment, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Run every chosen scenario ``args.runs`` times; medians with min and max."""
    runs: dict[str, list[tuple[Optional[float], Optional[float]]]] = {}
    shipped = shipped_long_polls()
    plan: dict[str, Callable[[], scenarios.Figures]] = {
        'publish': lambda: scenarios.publish_rates(env, args.tasks),
        'drain': lambda: scenarios.drain_and_requests(env, args.tasks),
        'latency': lambda: idle.latency(env, args.latency_samples, EQUAL_LONG_POLLS, 'equal'),
        'latency-shipped': lambda: idle.latency(env, args.latency_samples, shipped, 'shipped'),
        'idle': lambda: idle.idle_cost(env, args.idle_window, EQUAL_LONG_POLLS, 'equal'),
        'idle-shipped': lambda: idle.idle_cost(env, args.idle_window, shipped, 'shipped'),
        'drain-metrics': lambda: scenarios.drain_with_metrics(env, args.tasks),
        'io-asyncio': lambda: pools.io_figures(env, args.io_tasks or 3000, 'asyncio'),
        pools.IO_RECORDS_SCENARIO: lambda: pools.io_records_figures(env, args.io_tasks or 3000),
        'io-threads': lambda: pools.io_figures(env, args.io_tasks or 2000, 'threads'),
        'drain-pools': lambda: pools.drain_pools(env, args.tasks),
        'drain-versus': lambda: scenarios.drain_versus(env, args.tasks, args.versus),
        'publish-records': lambda: records.publish_rates(env, args.tasks),
        'drain-records': lambda: records.drain_rates(env, args.tasks),
        'workflow-chord': lambda: workflows.chord_figures(
            env, args.chord_width, args.workflow_workers, args.workflow_records_url),
        'workflow-chain': lambda: workflows.chain_figures(
            env, args.chain_length, args.workflow_samples, args.workflow_workers,
            args.workflow_records_url),
        'outbox-relay': lambda: outbox.relay_figures(env, args.outbox_databases,
                                                     args.outbox_tasks, args.outbox_profile),
        'outbox-lag': lambda: outbox.lag_figures(env, args.outbox_databases, args.outbox_rate,
                                                 args.outbox_seconds, False, args.outbox_relays),
        'outbox-lag-poll': lambda: outbox.lag_figures(env, args.outbox_databases,
                                                      args.outbox_rate, args.outbox_seconds,
                                                      True, args.outbox_relays),
        'outbox-publish': lambda: outbox.publish_figures(env, args.outbox_databases,
                                                         args.outbox_transactions),
    }
    plan[fleet_scale.SCENARIO] = lambda: fleet_scale.figures(
        env, args.fleet_postgres, args.fleet_workers, args.fleet_tasks, args.fleet_in_flight,
        args.fleet_limit)
    plan[volume.SCENARIO] = lambda: volume.figures(env, args.rows, args.volume_databases,
                                                   args.volume_stores, args.volume_ids)
    for name in flow.SCENARIOS:
        plan[name] = lambda name=name: flow.figures(env, name, args.tasks, args.flow_seconds,
                                                    args.flow_databases)
    for name, scenario in plan.items():
        if name not in args.scenarios:
            continue
        for number in range(args.runs):
            started = time.monotonic()
            for figure, pair in scenario().items():
                runs.setdefault(figure, []).append(pair)
            print('bench: %s run %d/%d done in %.1fs' % (name, number + 1, args.runs,
                                                         time.monotonic() - started),
                  file=sys.stderr, flush=True)
    return {figure: {'kale': report.summarize([k for k, _ in pairs]),
                     'baseline': report.summarize([b for _, b in pairs])}
            for figure, pairs in runs.items()}


def measure(endpoint: Optional[Endpoint], latency_ms: float,
            args: argparse.Namespace) -> dict[str, Any]:
    """One configuration: every scenario at one added latency; prints its table."""
    started = time.monotonic()
    env = Environment(args.transport, endpoint.url if endpoint else '', latency_ms,
                      endpoint.describe() if endpoint else '')
    try:
        env.start()
        results = collect(env, args)
    finally:
        env.stop()
    report.TARGETS.update(workflows.targets(args.chord_width, args.chain_length))
    report.TARGETS.update(outbox.targets(args.outbox_rate))
    report.TARGETS.update(flow.targets())
    report.TARGETS.update(volume.targets())
    report.TARGETS.update(pools.targets())
    report.judge(results, env.memory, latency_ms)
    label = 'no added latency' if not latency_ms else '+%g ms per request' % latency_ms
    seconds = time.monotonic() - started
    print('\nKale benchmark, %s: %s; %d tasks, %d runs per scenario (%.0fs)'
          % (label, env.describe(), args.tasks, args.runs, seconds))
    print(report.table(results, args.transport), flush=True)
    return {'label': label, 'transport': args.transport, 'endpoint': env.endpoint,
            'upstream': env.upstream, 'latency_ms': latency_ms,
            'round_trips_ms': env.round_trips_ms, 'seconds': seconds, 'results': results}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.workflow_trace:
        os.environ[workflows.TRACE_VARIABLE] = '1'      # the workers' environment
    endpoint = None
    if args.transport == 'sqs':
        endpoint = Endpoint('url', args.endpoint_url) if args.endpoint_url \
            else Endpoint(args.endpoint or 'moto', cwd=ROOT)
    # The outbox scenarios' database: a throwaway PostgreSQL cluster started on first use.
    args.outbox_databases = outbox.Databases(args.outbox_url, args.outbox_sync_commit)
    args.flow_databases = flow.databases(args.flow_url)
    args.fleet_postgres = fleet_scale.Postgres()
    args.volume_stores = outbox.Databases()
    try:
        if endpoint is not None:
            endpoint.start()
        return [measure(endpoint, latency_ms, args) for latency_ms in args.latency_ms]
    finally:
        args.outbox_databases.stop()
        args.flow_databases.stop()
        args.fleet_postgres.stop()
        args.volume_stores.stop()
        if endpoint is not None:
            endpoint.stop()


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='python -m bench', description=__doc__.split('\n')[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument('--endpoint', choices=['moto', 'fauxqs'],
                       help='start this SQS endpoint for the run (default: moto, embedded)')
    where.add_argument('--endpoint-url', metavar='URL', help='an SQS endpoint already running')
    parser.add_argument('--transport', choices=['sqs', 'memory'], default='sqs')
    parser.add_argument('--latency-ms', default=[0.0], metavar='MS[,MS...]',
                        type=lambda text: [float(ms) for ms in text.split(',')],
                        help='added to every request, one configuration per value: by a latency '
                             'proxy in front of the SQS endpoint, or by the memory transport '
                             '(AWS in-region: 10-20)')
    parser.add_argument('--tasks', type=int, default=300, help='tasks per run (default 300)')
    parser.add_argument('--runs', type=int, default=3, help='runs per scenario (default 3)')
    parser.add_argument('--io-tasks', type=int, default=0, metavar='N',
                        help='tasks of io-asyncio and io-threads (default 3000 and 2000)')
    parser.add_argument('--latency-samples', type=int, default=50, metavar='M')
    parser.add_argument('--idle-window', type=float, default=40.0, metavar='SEC',
                        help='how long idle cost is measured (default 40)')
    parser.add_argument('--scenarios', default=','.join(SCENARIOS),
                        type=lambda text: text.split(','),
                        help='which to run, of %s (default: all), and %s (the drain with '
                             'Prometheus metrics on and off, I/O-bound tasks on a pool, the '
                             'drain on each pool, another checkout, workflows, the outbox, '
                             'flow control; see '
                             'bench/README.md)'
                             % (', '.join(SCENARIOS), ', '.join(OPTIONAL_SCENARIOS)))
    parser.add_argument('--versus', metavar='DIR',
                        help="drain-versus: another checkout of Kale (an earlier commit's "
                             "worktree) whose serial worker is the baseline")
    parser.add_argument('--versus-baseline', action='store_true',
                        help='drain-versus: against the commit bench/baseline pins (checked '
                             'out into the cache once); see bench/README.md')
    parser.add_argument('--chord-width', type=int, default=1000, metavar='W',
                        help='workflow-chord: tasks in the chord (default 1000)')
    parser.add_argument('--chain-length', type=int, default=10, metavar='L',
                        help='workflow-chain: nodes in the chain (default 10)')
    parser.add_argument('--workflow-samples', type=int, default=10, metavar='S',
                        help='workflow-chain: chains and single tasks timed each run (default 10)')
    parser.add_argument('--workflow-workers', type=int, default=2, metavar='N',
                        help='workflow-chord and -chain: worker processes (default 2)')
    parser.add_argument('--workflow-records-url', default='', metavar='URL',
                        help='workflow-chord and -chain: task records there (e.g. '
                             'postgresql://...) instead of a fresh SQLite file each run')
    parser.add_argument('--workflow-trace', action='store_true',
                        help='workflow-chord and -chain: time what the workers do (the workflow '
                             'hook, its SQL statements by kind, the records\' settle) and print '
                             'it per task on stderr; slows them down a little')
    parser.add_argument('--records', action='store_true',
                        help='also run %s: Kale with task records on (SQLite) beside records off'
                        % ' and '.join(RECORDS_SCENARIOS))
    outbox.add_arguments(parser)
    parser.add_argument('--flow-url', default='sqlite', metavar='URL',
                        help="flow-*: where the limits are kept: 'sqlite' (a fresh file a run, "
                             "the default), 'postgres' (a fresh database a run on a throwaway "
                             'cluster) or a URL')
    parser.add_argument('--flow-seconds', type=float, default=60.0, metavar='S',
                        help='flow-fleet: the window its runs are counted in (default 60)')
    parser.add_argument('--fleet-workers', default=list(fleet_scale.SIZES), metavar='N[,N...]',
                        type=lambda text: [int(n) for n in text.split(',')],
                        help='fleet: the fleet sizes, worker processes (default %s)'
                        % ','.join(map(str, fleet_scale.SIZES)))
    parser.add_argument('--fleet-tasks', type=int, default=fleet_scale.DEFAULT_TASKS, metavar='N',
                        help='fleet: chord members per fleet, in chords of %d (default %d)'
                        % (fleet_scale.CHORD_WIDTH, fleet_scale.DEFAULT_TASKS))
    parser.add_argument('--fleet-in-flight', type=int, default=fleet_scale.DEFAULT_IN_FLIGHT,
                        metavar='N', help='fleet: --max-in-flight of each worker (default %d)'
                        % fleet_scale.DEFAULT_IN_FLIGHT)
    parser.add_argument('--fleet-limit', choices=['rate', 'concurrency'], default='rate',
                        help="fleet: the members' flow limit, never reached (default rate)")
    parser.add_argument('--rows', type=int, default=1_000_000, metavar='N',
                        help='records-volume: records in the large store (default 1,000,000)')
    parser.add_argument('--volume-databases', default=('sqlite', 'postgres'), metavar='DB[,DB]',
                        type=lambda text: tuple(text.split(',')),
                        help='records-volume: sqlite, postgres or both (the default)')
    parser.add_argument('--volume-ids', choices=volume_rows.IDS, default='random',
                        help="records-volume: the records' ids random, as Kale makes them (the "
                        'default), or sorting by their publication time')
    parser.add_argument('--json', metavar='FILE', help='also write the results as JSON (a bare '
                        'file name goes to bench/results/)')
    args = parser.parse_args(argv)
    known = SCENARIOS + OPTIONAL_SCENARIOS + RECORDS_SCENARIOS
    unknown = [name for name in args.scenarios if name not in known]
    if unknown:
        parser.error('unknown scenario %s; choose from %s' % (', '.join(unknown), ', '.join(known)))
    if args.versus_baseline:
        if args.versus:
            parser.error('give --versus DIR or --versus-baseline, not both')
        try:
            args.versus = baseline.checkout()
        except BenchError as exc:
            parser.error(str(exc))
    if 'drain-versus' in args.scenarios and not (args.versus and os.path.isdir(
            os.path.join(args.versus, 'kale'))):
        parser.error('drain-versus needs --versus DIR, a checkout of Kale')
    for name in PROCESS_SCENARIOS:
        if name in args.scenarios and args.transport == 'memory':
            parser.error('%s runs worker processes: it needs the SQS transport' % name)
    if min(args.chord_width, args.chain_length, args.workflow_samples,
           args.workflow_workers) < 1:
        parser.error('--chord-width, --chain-length, --workflow-samples and --workflow-workers '
                     'must be at least 1')
    outbox.check_arguments(parser, args)
    if min(args.fleet_workers + [args.fleet_tasks, args.fleet_in_flight]) < 1:
        parser.error('--fleet-workers, --fleet-tasks and --fleet-in-flight must be at least 1')
    if set(args.volume_databases) - {'sqlite', 'postgres'} or args.rows < 1:
        parser.error('--volume-databases takes sqlite, postgres or both; --rows at least 1')
    if args.scenarios == [volume.SCENARIO] and not (args.endpoint or args.endpoint_url):
        args.transport = 'memory'               # it needs no SQS endpoint
    if args.records:
        args.scenarios += [name for name in RECORDS_SCENARIOS if name not in args.scenarios]
    if args.transport == 'memory' and (args.endpoint or args.endpoint_url):
        parser.error('--transport memory runs without an SQS endpoint')
    if any(ms < 0 for ms in args.latency_ms):
        parser.error('--latency-ms must not be negative')
    return args


def _terminated(signum: int, frame: Any) -> NoReturn:
    raise SystemExit(128 + signum)      # stop what was started, as after Ctrl-C


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    signal.signal(signal.SIGTERM, _terminated)
    started = time.monotonic()
    try:
        configurations = run(args)
    except BenchError as exc:
        print('python -m bench: error: %s' % exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('python -m bench: interrupted', file=sys.stderr)
        return 130
    print('\nSummary (medians of %d runs; %d tasks; long polls equal %s s, shipped %s s; %.0fs in all)'
          % (args.runs, args.tasks, ','.join(map(str, EQUAL_LONG_POLLS)),
             ','.join(map(str, shipped_long_polls())), time.monotonic() - started))
    headline = report.summary(configurations)
    if '\n' in headline:           # not only the header: figures of the default scenarios
        print(headline)
    flows = workflows.summary(configurations, args.chord_width, args.chain_length)
    if flows:
        print('\nWorkflows (medians; baseline in brackets; %d worker process%s, records on %s)\n%s'
              % (args.workflow_workers, 'es' if args.workflow_workers > 1 else '',
                 'the given URL' if args.workflow_records_url else 'SQLite', flows))
    boxes = outbox.summary(configurations, args.outbox_rate)
    if boxes:
        print('\nOutbox (medians; baseline in brackets; the database: %s; %d relay process%s '
              'in the lag scenarios)\n%s'
              % (outbox.Databases(args.outbox_url, args.outbox_sync_commit).describe(),
                 args.outbox_relays, 'es' if args.outbox_relays > 1 else '', boxes))
    fleets = fleet_scale.summary(configurations, args.fleet_workers)
    if fleets:
        print('\nFleet (medians of %d runs; %d chord members a fleet, asyncio pool, %d in flight '
              'a worker; records, workflows and a %s limit on PostgreSQL)\n%s'
              % (args.runs, args.fleet_tasks, args.fleet_in_flight, args.fleet_limit, fleets))
    volumes = volume.summary(configurations, args.rows)
    if volumes:
        print('\nRecords at volume (medians; %s ids; the baseline column: %d rows, and for the '
              "writer today's writer)\n%s" % (args.volume_ids, volume.SMALL_ROWS, volumes))
    if args.json:
        path = report.json_path(args.json)
        with open(path, 'w') as f:
            json.dump({'transport': args.transport, 'tasks': args.tasks, 'runs': args.runs,
                       'latency_samples': args.latency_samples, 'idle_window': args.idle_window,
                       'long_polls': {'equal': EQUAL_LONG_POLLS, 'shipped': shipped_long_polls()},
                       'workflows': {'chord_width': args.chord_width,
                                     'chain_length': args.chain_length,
                                     'samples': args.workflow_samples,
                                     'workers': args.workflow_workers,
                                     'records': 'given URL' if args.workflow_records_url
                                     else 'sqlite'},
                       'outbox': outbox.describe(args),
                       'fleet': {'workers': args.fleet_workers, 'tasks': args.fleet_tasks,
                                 'in_flight': args.fleet_in_flight, 'limit': args.fleet_limit,
                                 'database': args.fleet_postgres.describe()},
                       'flow': {'store': args.flow_databases.describe(),
                                'fleet_seconds': args.flow_seconds},
                       'configurations': configurations}, f, indent=2)
        print('bench: results written to %s' % path, file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
