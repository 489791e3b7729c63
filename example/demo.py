"""`make demo`: the example task worker, start to finish, on the embedded endpoint.

It starts `kale sqs-local` on a free port, publishes a mix of example tasks
(among them a coroutine task under a rate limit, a tenant per site on a fair
queue) to three priority queues, commits orders with their tasks through the
outbox (and `kale relay` sends them), publishes events to a topic with two
subscribers, lists a periodic task and runs it once (`kale schedules`),
submits a small workflow (a chord: word counts side by side, then their sum)
and a chain of programs in other languages (`kale submit`), runs `kale
worker --burst --concurrency 2 --pool asyncio` on them
with a live progress line, prints a summary per queue and outcome, and stops
everything it started, also on Ctrl-C. It exits 0 only when every task ended
as expected: done, or dead-lettered after its retries.

Task records are on (a SQLite file in the demo's scratch directory): at the
end the demo starts `kale web` and reads the counts back through its REST
API. With KALE_DEMO_WEB=1 (`make demo WEB=1`) it leaves `kale web` and the
endpoint running, prints the dashboard's URL, and waits for Ctrl-C, which
stops them; the demo then ends as it would have (exit 0 when every task
ended as expected).
"""
from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional

from kale.cli.sqs_local import SQSLocalProcess
from kale.exceptions import KaleError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = 'example.taskworker.settings'
TIMEOUT_SEC = 90

# (task class, queue, how many, args) and what each should end as.
PLAN = [('FibonacciTask', 'high_priority', 30), ('FlakyTask', 'default', 8),
        ('FetchPageTask', 'default', 40), ('AlwaysFailsTask', 'default', 2),
        ('SlowReportTask', 'low_priority', 4)]
EXPECTED = {'FibonacciTask': {'done': 30}, 'FlakyTask': {'done': 8, 'retried': 8},
            'FetchPageTask': {'done': 40},
            'AlwaysFailsTask': {'retried': 2, 'dead-lettered': 2},
            'SlowReportTask': {'done': 4}, 'CountWordsTask': {'done': 3},
            'SumCountsTask': {'done': 1}}
#: The workflow's tasks in the summary, with their queues.
WORKFLOW_ROWS = [('CountWordsTask', 'high_priority', 3), ('SumCountsTask', 'low_priority', 1)]
#: The texts of the demo's workflow, and the sum of their words it should give.
WORKFLOW_TEXTS = ['the quick brown fox', 'jumps over', 'the lazy dog']
WORKFLOW_RESULT = 9
#: The worker the demo runs: two processes, each running many tasks at once
#: (coroutines on its event loop, the others on its threads).
WORKER_OPTIONS = ['--burst', '--concurrency', '2', '--pool', 'asyncio',
                  '--executors', 'example/executors']
#: Programs in any language (example/executors): a chain submitted as JSON
#: with `kale submit`; its Node step needs node on the PATH.
EXECUTOR_FILE = 'example/executors/signup.json'
EXECUTOR_ROWS = [('executor:save-user-data', 'default', 1), ('executor:send-mail', 'default', 1)]
EXECUTOR_RESULT = {'to': 'user-1234@example.com', 'subject': 'Welcome, Ada', 'sent': True}
#: Orders committed with their task through the outbox (one more is rolled back).
OUTBOX_ORDERS = [101, 102]
#: Events of the topic ``orders``, and its subscribers (a copy of each event each).
TOPIC_EVENTS = [1, 2, 3]
TOPIC_ROWS = [('SendReceiptTask', 'default', 3), ('UpdateStockTask', 'low_priority', 3)]
#: The periodic task `kale schedules run` publishes once.
SCHEDULE = 'example.taskworker.tasks.DailyDigestTask'
EXTRA_ROWS = [('ConfirmOrderTask', 'default', len(OUTBOX_ORDERS))] + TOPIC_ROWS \
    + [('DailyDigestTask', 'low_priority', 1)]
#: FetchPageTask's pages are on this many sites: a tenant each on fair queue default.
SITES = 4
OUTCOMES = ['done', 'retried', 'dead-lettered']


def publish() -> int:
    from example.taskworker import tasks
    total = 0
    for name, _, count in PLAN:
        task_class = getattr(tasks, name)
        if name == 'FibonacciTask':
            calls = [((25 + i,), {}) for i in range(count)]
        elif name == 'FlakyTask':
            calls = [(('order-%d' % i,), {}) for i in range(count)]
        elif name == 'SlowReportTask':
            calls = [((), {'seconds': 0.3})] * count
        elif name == 'FetchPageTask':
            calls = [(('https://site-%d.example/page/%d' % (i % SITES, i),), {})
                     for i in range(count)]
        else:
            calls = [((i,), {}) for i in range(count)]
        task_class.publish_batch(None, calls)
        total += count
    return total


def publish_outbox(workdir: str) -> int:
    """Orders stored with their confirmation task in one transaction (the
    outbox, in a SQLite database of the demo's), one rolled back with its
    task, then `kale relay --burst` sends what committed; how many were sent."""
    from sqlalchemy import Column, Integer, MetaData, Table

    from example.taskworker import tasks
    from kale import outbox
    from kale.outbox import open_database
    url = 'sqlite:///%s' % os.path.join(workdir, 'shop.db')
    subprocess.run([sys.executable, '-m', 'kale', 'outbox', 'init', '--url', url], cwd=ROOT,
                   check=True, capture_output=True)
    engine = open_database(url)
    orders = Table('orders', MetaData(), Column('id', Integer, primary_key=True))
    orders.create(engine)
    for order_id in OUTBOX_ORDERS:
        with engine.begin() as conn:
            conn.execute(orders.insert().values(id=order_id))
            outbox.publish(conn, tasks.ConfirmOrderTask, None, order_id)
    try:
        with engine.begin() as conn:
            conn.execute(orders.insert().values(id=999))
            outbox.publish(conn, tasks.ConfirmOrderTask, None, 999)
            raise RuntimeError('payment declined')
    except RuntimeError:
        pass                            # the order and its task are gone together
    engine.dispose()
    relay = subprocess.run([sys.executable, '-m', 'kale', 'relay', '--url', url, '--burst'],
                           cwd=ROOT, capture_output=True, text=True)
    if relay.returncode != 0:
        raise SystemExit('demo: kale relay failed: %s' % relay.stderr.strip()[-300:])
    print('demo: outbox: %d orders committed with their ConfirmOrderTask, 1 rolled back with its '
          'task; `kale relay --burst` sent the %d' % (len(OUTBOX_ORDERS), len(OUTBOX_ORDERS)))
    return len(OUTBOX_ORDERS)


def publish_events() -> int:
    """Events of the topic ``orders``, each copied by SNS to its two
    subscribers' queues; how many tasks that makes."""
    from kale import topics
    topics.publish_batch('orders', [{'order_id': n, 'sku': 'sku-%d' % n} for n in TOPIC_EVENTS])
    subscribers = ', '.join(name for name, _, _ in TOPIC_ROWS)
    print('demo: published %d events to topic orders: each reaches %s'
          % (len(TOPIC_EVENTS), subscribers))
    return len(TOPIC_EVENTS) * len(TOPIC_ROWS)


def run_schedule() -> int:
    """`kale schedules list --json` and `kale schedules run`, as a user runs
    them: the periodic task's next run, then one run published now."""
    def kale(*args: str) -> str:
        done = subprocess.run([sys.executable, '-m', 'kale', 'schedules', *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise SystemExit('demo: kale schedules %s failed: %s' % (args[0], done.stderr.strip()))
        return done.stdout
    [found] = [row for row in json.loads(kale('list', '--json'))['schedules']
               if row['name'] == SCHEDULE]
    kale('run', SCHEDULE)
    print("demo: `kale schedules list`: %s runs at '%s' (%s), next %s; `kale schedules run` "
          'published one now' % (SCHEDULE.rsplit('.', 1)[-1], found['schedule'], found['tz'],
                                 found['next_runs'][0][:16] + 'Z'))
    return 1


def flow_line(outcomes: list[dict]) -> str:
    """What the rate limit and the fair queue did to FetchPageTask."""
    runs = sorted(o['at'] for o in outcomes
                  if o['task'] == 'FetchPageTask' and o['outcome'] == 'done')
    released = sum(1 for o in outcomes if o['task'] == 'FetchPageTask'
                   and o['outcome'] == 'released')
    spread = runs[-1] - runs[0] if runs else 0.0
    return ('demo: flow control: %d FetchPageTask under rate_limit 20/s across both workers, '
            'over %.1fs; %d released unrun until their reserved token, none counted as a '
            'failure; %d sites, each a tenant of fair queue default'
            % (len(runs), spread, released, SITES))


def submit_workflow() -> tuple[str, int]:
    """The example workflow, submitted: its id and its number of nodes."""
    from example.taskworker import tasks
    from kale import workflow
    wf = workflow.submit(tasks.workflow_flow(WORKFLOW_TEXTS), labels={'demo': 'word-count'})
    return wf.id, len(wf.nodes())


def workflow_line(workflow_id: str) -> tuple[str, bool]:
    """What became of the workflow, and whether it gave the expected result."""
    from kale import workflow
    from kale.exceptions import KaleError
    wf = workflow.get(workflow_id)
    try:
        result = wf.result()
    except KaleError as exc:
        return 'demo: workflow %s: %s' % (workflow_id, exc), False
    return ('demo: workflow %s (%d word counts, then their sum): %s, result %s'
            % (workflow_id, len(WORKFLOW_TEXTS), wf.status(), result), result == WORKFLOW_RESULT)


def submit_executors() -> Optional[dict]:
    """`kale submit` the executor chain, as a user would: the ids it prints
    (None, and a note, without node)."""
    if shutil.which('node') is None:
        print('demo: skipping the executor example (send-mail is a Node program and node is '
              'not installed)')
        return None
    done = subprocess.run([sys.executable, '-m', 'kale', 'submit', EXECUTOR_FILE], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit('demo: kale submit %s failed: %s' % (EXECUTOR_FILE, done.stderr.strip()))
    ids: dict = json.loads(done.stdout)
    print('demo: `kale submit %s`: workflow %s, save-user-data (shell) then send-mail (Node)'
          % (EXECUTOR_FILE, ids['workflow_id']))
    return ids


def executor_line(ids: dict) -> tuple[str, bool]:
    from kale import workflow
    from kale.exceptions import KaleError
    try:
        result = workflow.get(ids['workflow_id']).result()
    except KaleError as exc:
        return 'demo: executor workflow %s: %s' % (ids['workflow_id'], exc), False
    return ('demo: executor workflow %s: send-mail gave %s' % (ids['workflow_id'],
                                                               json.dumps(result[1])),
            result[1] == EXECUTOR_RESULT)


def read_outcomes(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def progress_line(outcomes: list[dict], published: int) -> str:
    counts = collections.Counter(o['outcome'] for o in outcomes)
    finished = counts['done'] + counts['dead-lettered']
    return ('demo: done %3d | retried %3d | dead-lettered %2d | remaining %3d'
            % (counts['done'], counts['retried'], counts['dead-lettered'], published - finished))


def run_worker(outcomes_path: str, published: int, log_path: str) -> int:
    with open(log_path, 'w') as log:
        worker = subprocess.Popen(
            [sys.executable, '-m', 'kale', 'worker', *WORKER_OPTIONS,
             '--log-level', 'WARNING'], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        shown = ''
        interactive = sys.stdout.isatty()
        deadline = time.monotonic() + TIMEOUT_SEC
        try:
            while worker.poll() is None and time.monotonic() < deadline:
                line = progress_line(read_outcomes(outcomes_path), published)
                if line != shown:
                    print(('\r' + line) if interactive else line, end='' if interactive else '\n',
                          flush=True)
                    shown = line
                time.sleep(0.2)
        finally:
            if worker.poll() is None:
                worker.terminate()
                worker.wait(30)
        line = progress_line(read_outcomes(outcomes_path), published)
        if interactive:
            print('\r' + line, flush=True)
        elif line != shown:
            print(line, flush=True)
        return worker.returncode


def summary(outcomes: list[dict], extra_rows: list) -> tuple[str, dict[str, dict[str, int]]]:
    by_task: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for outcome in outcomes:
        if outcome['outcome'] in OUTCOMES:      # not a release: a message sent back unrun
            by_task[outcome['task']][outcome['outcome']] += 1
    rows = [('queue', 'task') + tuple(OUTCOMES)]
    totals: collections.Counter = collections.Counter()
    for name, queue, _ in PLAN + extra_rows:
        counts = by_task[name]
        rows.append((queue, name) + tuple(str(counts[o]) for o in OUTCOMES))
        totals.update(counts)
    rows.append(('total', '') + tuple(str(totals[o]) for o in OUTCOMES))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    text = '\n'.join('  '.join(cell.ljust(w) if i < 2 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=False))) for row in rows)
    return text, {name: dict(counts) for name, counts in by_task.items()}


def dead_letter_line() -> str:
    from kale.admin import queue_statuses
    from kale.app import default_app
    from kale.exceptions import KaleError
    try:
        rows = queue_statuses(default_app().broker)
    except KaleError as exc:
        return 'demo: cannot count dead letters: %s' % exc
    held = ['dlq-%s %d' % (row.name, row.dead_letters) for row in rows if row.dead_letters]
    return 'demo: dead-letter queues now hold: %s' % (', '.join(held) or 'nothing')


def start_web() -> tuple[subprocess.Popen, str]:
    """`kale web` on a free port of 127.0.0.1, on the demo's records; and its URL."""
    web = subprocess.Popen([sys.executable, '-m', 'kale', 'web', '--port', '0',
                            '--log-level', 'WARNING'], cwd=ROOT, stdout=subprocess.PIPE,
                           text=True)
    assert web.stdout is not None
    line = web.stdout.readline()
    match = re.search(r'at (http://\S+/) and', line)
    if not match:
        web.terminate()
        raise SystemExit('demo: kale web did not start: %r' % line)
    return web, match.group(1)


def api_counts(url: str, settle_sec: float = 10.0) -> str:
    """The records' counts by status, read back through the REST API (waiting
    up to ``settle_sec`` for records still pending: each process writes its
    records on a thread, a moment after the fact)."""
    deadline = time.monotonic() + settle_sec
    while True:
        with urllib.request.urlopen(url + 'api/tasks/summary', timeout=10) as answer:
            summary = json.load(answer)
        if not summary['by_status'].get('pending') or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    shown = ', '.join('%s %d' % (status, n) for status, n in summary['by_status'].items()
                      if n and status != 'pending')
    return 'demo: task records via %sapi/tasks/summary: %s' % (url, shown or 'none')


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM both end the demo through KeyboardInterrupt (even when
    the demo was started with SIGINT ignored, as background jobs are)."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)


def main() -> int:
    stop_on_signals()
    started = time.monotonic()
    endpoint: Optional[SQSLocalProcess] = None
    workdir = tempfile.mkdtemp(prefix='kale-demo-')
    outcomes_path = os.path.join(workdir, 'outcomes.jsonl')
    try:
        try:
            # A session of its own: Ctrl-C reaches the workers, which settle
            # their last batch, and the endpoint is stopped after them.
            endpoint = SQSLocalProcess(cwd=ROOT, new_session=True)
        except KaleError as exc:
            raise SystemExit('demo: %s' % exc) from None
        url = endpoint.url
        os.environ.update({'KALE_SQS_ENDPOINT': url, 'KALE_SETTINGS_MODULE': SETTINGS,
                           'KALE_EXAMPLE_OUTCOMES': outcomes_path, 'KALE_QUEUE_PREFIX': 'demo-',
                           'KALE_RECORDS_URL': 'sqlite:///%s' % os.path.join(workdir,
                                                                              'records.db')})
        print('demo: embedded SQS endpoint at %s' % url)
        published = publish()
        print('demo: published %d tasks: %s' % (published, ', '.join(
            '%d %s -> %s' % (count, name, queue) for name, queue, count in PLAN)))
        published += publish_outbox(workdir)
        published += publish_events()
        published += run_schedule()
        workflow_id, nodes = submit_workflow()
        published += nodes
        executor_ids = submit_executors()
        expected, rows = dict(EXPECTED), list(WORKFLOW_ROWS) + EXTRA_ROWS
        expected.update({name: {'done': count} for name, _, count in EXTRA_ROWS})
        if executor_ids is not None:
            published += len(executor_ids['tasks'])
            expected.update({name: {'done': count} for name, _, count in EXECUTOR_ROWS})
            rows += EXECUTOR_ROWS
        print('demo: submitted workflow %s: %d CountWordsTask side by side (workflow.map, on '
              'high_priority), then SumCountsTask with their counts' % (workflow_id, nodes - 1))
        print('demo: running `kale worker %s`' % ' '.join(WORKER_OPTIONS))
        code = run_worker(outcomes_path, published, os.path.join(workdir, 'worker.log'))
        outcomes = read_outcomes(outcomes_path)
        table, by_task = summary(outcomes, rows)
        print(table)
        print(flow_line(outcomes))
        print(dead_letter_line())
        line, workflow_ok = workflow_line(workflow_id)
        print(line)
        if executor_ids is not None:
            line, executors_ok = executor_line(executor_ids)
            print(line)
            workflow_ok = workflow_ok and executors_ok
        web, web_url = start_web()
        try:
            print(api_counts(web_url))
            elapsed = time.monotonic() - started        # not the time the dashboard stays open
            if os.environ.get('KALE_DEMO_WEB') not in (None, '', '0'):
                print('demo: the dashboard is at %s (the API at %sapi/); Ctrl-C stops it'
                      % (web_url, web_url), flush=True)
                try:
                    web.wait()
                except KeyboardInterrupt:       # how this mode is meant to end
                    print('\ndemo: kale web stopped')
        finally:
            if web.poll() is None:
                web.terminate()
                web.wait(10)
        if code != 0 or by_task != expected or not workflow_ok:
            print('demo: unexpected result (worker exit code %d); worker log: %s'
                  % (code, os.path.join(workdir, 'worker.log')))
            return 1
        print('demo: all %d tasks accounted for in %.1fs: every task done except the %d that '
              'always fail, which are in the dead-letter queue'
              % (published, elapsed, EXPECTED['AlwaysFailsTask']['dead-lettered']))
        return 0
    except KeyboardInterrupt:
        print('\ndemo: interrupted; stopping')
        return 130
    finally:
        if endpoint is not None:
            endpoint.stop()


if __name__ == '__main__':
    sys.exit(main())
