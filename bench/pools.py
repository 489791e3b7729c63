"""The pools: I/O-bound tasks many at a time in one worker process, beside the
ideal bound and the serial pool; the no-op drain on each pool beside the
serial one. Each returns {figure: (kale, baseline)} for one run.

- ``io-asyncio``: tasks that each ``await asyncio.sleep(0.1)``, one worker
  with ``--pool asyncio --max-in-flight 200``; the ideal is 200 / 0.1 s.
- ``io-threads``: tasks that each ``time.sleep(0.1)``, ``--pool threads
  --max-in-flight 32``; the ideal is 32 / 0.1 s.
- ``drain-pools``: the no-op drain (publish_batch, one burst worker) on the
  asyncio pool (a coroutine no-op) and the threads pool (a plain one) beside
  the serial pool, in alternating order.

The serial pool's rate on the I/O tasks is measured too, on
:data:`SERIAL_TASKS` of them (it runs one at a time: 10 a second).
"""
from __future__ import annotations

from typing import Any

from bench import tasks
from bench.environment import Environment, read_report
from bench.hooks import REPORT_VARIABLE
from bench.scenarios import Figures, _rates, environment_variable, kale_pipeline
from kale.worker import Worker

#: How long each I/O task waits.
IO_SEC = 0.1
#: I/O tasks the serial pool runs (its rate is about 1 / IO_SEC whatever the count).
SERIAL_TASKS = 30
#: In-flight limits of the I/O scenarios.
IN_FLIGHT = {'asyncio': 200, 'threads': 32}


def io_drain(env: Environment, n: int, task_class: Any, pool: str, in_flight: int,
             records_url: str = '') -> dict:
    """Publish ``n`` I/O tasks; one burst worker with ``pool`` drains them
    (with task records on ``records_url``, when given)."""
    run = env.new_run(records_url=records_url)
    for start in range(0, n, 500):
        task_class.publish_batch(None, [((IO_SEC,), {}) for _ in range(min(500, n - start))])
    published = run.counter.total
    path = env.report_path()
    if env.memory:
        worker = Worker(queue_names=[q.name for q in run.queues], burst=True, broker=run.broker,
                        pool=pool, max_in_flight=in_flight)
        with environment_variable(REPORT_VARIABLE, path):
            worker.run()
        report = read_report(path)
        requests = run.counter.total - published
    else:
        options = ['--pool', pool] + (['--max-in-flight', str(in_flight)]
                                      if pool != 'serial' else [])
        env.start_worker('--burst', *options, **{REPORT_VARIABLE: path}).wait(900)
        report = read_report(path)
        requests = len(report['requests'])
    run.close()
    return _rates(report, published + requests, n)


def io_figures(env: Environment, n: int, pool: str) -> Figures:
    task_class = tasks.IoAsyncTask if pool == 'asyncio' else tasks.IoSleepTask
    in_flight = IN_FLIGHT[pool]
    pooled = io_drain(env, n, task_class, pool, in_flight)
    serial = io_drain(env, SERIAL_TASKS, task_class, 'serial', 1)
    name = 'io-%s' % pool
    return {
        '%s drain, %d in flight (tasks/s; baseline: ideal %d / %g s)'
        % (name, in_flight, in_flight, IO_SEC): (pooled['rate'], in_flight / IO_SEC),
        '%s drain, serial pool (tasks/s; baseline: ideal 1 / %g s)'
        % (name, IO_SEC): (serial['rate'], 1 / IO_SEC),
        '%s worker peak memory (MB; baseline: serial pool)' % name: (
            pooled['peak_rss_mb'], serial['peak_rss_mb']),
        '%s worker CPU per task (µs; baseline: serial pool)' % name: (
            pooled['cpu_us_per_task'], serial['cpu_us_per_task']),
        '%s requests per task (baseline: serial pool)' % name: (
            pooled['requests_per_task'], serial['requests_per_task']),
    }


#: The asyncio pool's I/O drain with task records on, beside off.
IO_RECORDS_SCENARIO = 'io-asyncio-records'
#: Its target: records on at least this fraction of records off.
TARGET_IO_RECORDS = 0.85


IO_RECORDS_FIGURE = ('io-asyncio drain, %d in flight, records on (tasks/s; baseline: records '
                     'off)' % IN_FLIGHT['asyncio'])


def targets() -> dict[str, tuple[str, Any]]:
    """Entries for bench.report.TARGETS."""
    return {IO_RECORDS_FIGURE: ('>= %g x off' % TARGET_IO_RECORDS,
                                lambda k, b: b is not None and k >= TARGET_IO_RECORDS * b)}


def io_records_figures(env: Environment, n: int) -> Figures:
    """The asyncio pool's I/O drain (``io-asyncio``) with task records on a
    SQLite file of its own beside records off, in alternating order."""
    from bench import records
    in_flight = IN_FLIGHT['asyncio']

    def on() -> dict:
        url = records.new_records_url(env)
        try:
            return io_drain(env, n, tasks.IoAsyncTask, 'asyncio', in_flight, records_url=url)
        finally:
            records.forget_records()

    with_records, without = records.both(
        lambda: io_drain(env, n, tasks.IoAsyncTask, 'asyncio', in_flight), on)
    return {
        IO_RECORDS_FIGURE: (with_records['rate'], without['rate']),
        'io-asyncio worker CPU per task, records on (µs; baseline: records off)': (
            with_records['cpu_us_per_task'], without['cpu_us_per_task']),
    }


_pool_first = [False]


def drain_pools(env: Environment, n: int) -> Figures:
    """The no-op drain on the asyncio and threads pools beside the serial
    pool (in alternating order from run to run)."""
    _pool_first[0] = not _pool_first[0]
    order = ['asyncio', 'threads', 'serial'] if _pool_first[0] else ['serial', 'threads',
                                                                      'asyncio']
    reports = {pool: kale_pipeline(env, n, True, pool=pool) for pool in order}
    figures: Figures = {}
    for pool in ('asyncio', 'threads'):
        figures['worker drain, %s pool (tasks/s; baseline: serial pool)' % pool] = (
            reports[pool]['rate'], reports['serial']['rate'])
        figures['worker CPU per task, %s pool (µs; baseline: serial pool)' % pool] = (
            reports[pool]['cpu_us_per_task'], reports['serial']['cpu_us_per_task'])
    return figures

