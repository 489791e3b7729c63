"""Real `kale worker` processes against the embedded endpoint over HTTP.

Tasks record what happened in a shared file (see tests/tasks.py); every test
checks those records, and what is left in the queues, with raw boto3. Tests
wait for what a worker logs, records or sends, not for a guessed time.
"""
from __future__ import annotations

import base64
import collections
import itertools
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from urllib.parse import urlparse

import pytest

from kale import message as kale_message
from kale.conf import settings
from kale.worker.signals import SECOND_SIGNAL_MIN_GAP_SEC
from tests import tasks
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.hostile import OTHER_KEY, CreatesFileWhenUnpickled
from tests.support.processes import WorkerProcess, dead_letters, events, reasons, wait_for
from tests.support.records import recorded_ids
from tests.support.tcp_proxy import TCPProxy

pytestmark = pytest.mark.slow

#: A ReceiveMessage request that long-polls for 20 seconds (JSON or query protocol).
LONG_POLL_REQUEST = re.compile(rb'WaitTimeSeconds\W{1,4}20\b')


ids = recorded_ids


def test_100_tasks_over_three_queues_two_workers_none_lost(sqs, record, tmp_path):
    # Both serving before anything is published: a worker slow to start on a
    # loaded machine would otherwise find the other one done with the lot.
    workers = [WorkerProcess(tmp_path, '--queues', 'high,default,low') for _ in range(2)]
    for worker in workers:
        worker.wait_for_log('serving queues', 60)
    # Each run takes 50 ms: one worker cannot drain a queue while the other's
    # long poll waits on it (an instant run let one worker take all 100 on a
    # loaded machine, the other's poll seeing each queue's messages in flight).
    published = []
    pause = {'pause_sec': 0.05}
    published += tasks.HighRecordTask.publish_batch(None, [((i,), pause) for i in range(34)])
    published += tasks.RecordTask.publish_batch(None, [((i,), pause) for i in range(33)])
    published += tasks.LowRecordTask.publish_batch(None, [((i,), pause) for i in range(33)])
    try:
        wait_for(lambda: len(set(ids(record, 'ran'))) >= 100, 120, 'the 100 tasks to run')
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        codes = [w.wait(30) for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    ran = ids(record, 'ran')
    assert set(ran) == set(published)
    assert len(published) == 100
    assert len({r[2] for r in events(record, 'ran')}) == 2, 'both workers took part'


def test_a_slow_task_is_stopped_at_its_limit_retried_then_dead_lettered_once(sqs, record, tmp_path):
    task_id = tasks.SleepTask.publish(None, 30)
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst')
    assert worker.wait(90) == 0, worker.output()
    starts = [float(r[3]) for r in events(record, 'start')]
    failures = [float(r[3]) for r in events(record, 'failed')]
    assert len(starts) == tasks.SleepTask.max_retries + 1, worker.output()
    for started, failed in zip(starts, failures, strict=False):
        # The record's times are wall-clock milliseconds; the limit's timer
        # counts on its own clock, and may end a few ms either side of them.
        # Cut at its limit, not after its 30 s, however long a loaded
        # machine holds up the worker's record of it.
        assert tasks.SleepTask.time_limit - 0.02 <= failed - started \
            <= tasks.SleepTask.time_limit + 5
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=1):
        delays = [tasks.SleepTask.retry_delay_sec(n) for n in range(tasks.SleepTask.max_retries)]
    for n, delay in enumerate(delays):
        assert starts[n + 1] - failures[n] >= delay - 0.1
    assert ids(record, 'permanent') == [task_id]
    [dead] = dead_letters(sqs, 'default')
    reason = dead['MessageAttributes']['kale_dead_letter_reason']['StringValue']
    assert reason.startswith('retries_exhausted: TimeLimitExceeded')
    assert sqs.decode(dead['Body']).task_id == task_id


def test_a_non_retriable_exception_goes_straight_to_the_dead_letter_queue(sqs, record, tmp_path):
    task_id = tasks.NonRetriableTask.publish(None)
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst')
    assert worker.wait(60) == 0, worker.output()
    assert ids(record, 'start') == [task_id]
    assert ids(record, 'permanent') == [task_id]
    assert reasons(dead_letters(sqs, 'default')) == ['non_retriable']


def test_hostile_messages_are_dead_lettered_and_never_unpickled(sqs, record, tmp_path):
    marker = tmp_path / 'pwned'
    evil = base64.b64encode(pickle.dumps(CreatesFileWhenUnpickled(str(marker)))).decode()
    tasks.RecordTask.publish(None, 'before')     # creates the queues
    with settings.override(MESSAGE_SIGNING_KEY=OTHER_KEY):
        other_key_body = sqs.encode(kale_message.Message('x', 'tests.tasks.RecordTask'))
    url = sqs.queue_url('default')
    forged = 'kale2:s=p;c=-;d=b;k=00000000:%s:%s' % ('A' * 43, evil)
    for body in ['garbage', other_key_body, evil, forged, 'kale1:p-:%s:%s' % ('A' * 43, evil)]:
        sqs.client.send_message(QueueUrl=url, MessageBody=body)
    after = tasks.RecordTask.publish(None, 'after')
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst')
    assert worker.wait(60) == 0, worker.output()
    assert after in ids(record, 'ran')
    assert reasons(dead_letters(sqs, 'default')) == ['bad_signature', 'bad_signature',
                                                     'not_kale_message', 'not_kale_message',
                                                     'not_kale_message']
    assert not marker.exists()


@pytest.mark.real_time('a real worker process and a real signal')
def test_sigterm_finishes_the_running_task_and_releases_the_rest_at_once(sqs, record, tmp_path):
    published = tasks.SlowTask.publish_batch(None, [((2.0,), {}) for _ in range(10)])
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    wait_for(lambda: events(record, 'start'), 30, 'the first task to start')
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    # The running task's 2 s and a loaded machine's pauses; the ten tasks
    # run one after another would take 20 s.
    assert time.monotonic() - signalled < 2.0 + 8.0
    [finished] = ids(record, 'ran')
    assert ids(record, 'start') == [finished]
    # Visible at once: what the worker held would come back only at the end
    # of its 30 s visibility timeout, after this 10 s wait.
    visible = sqs.receive_all('default', expected=9, timeout=10)
    assert sorted(sqs.decode(m['Body']).task_id for m in visible) == \
        sorted(set(published) - {finished})


def test_a_second_signal_stops_the_running_task_and_releases_it(sqs, record, tmp_path):
    published = tasks.SlowTask.publish_batch(None, [((20.0,), {}) for _ in range(3)])
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    wait_for(lambda: events(record, 'start'), 30, 'the first task to start')
    worker.signal(signal.SIGTERM)
    worker.wait_for_log('SIGTERM received; finishing the running task')
    time.sleep(SECOND_SIGNAL_MIN_GAP_SEC)     # a second signal counts only this long after the first
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.output()
    assert ids(record, 'ran') == []
    visible = sqs.receive_all('default', expected=3, timeout=10)      # not after 30 s
    assert sorted(sqs.decode(m['Body']).task_id for m in visible) == sorted(published)


def test_kill_9_loses_nothing(sqs, record, tmp_path):
    published = tasks.ShortVisibilityTask.publish_batch(None, [((), {'seconds': 1.0})] * 5)
    worker = WorkerProcess(tmp_path, '--queues', 'short')
    wait_for(lambda: events(record, 'start'), 30, 'the first task to start')
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    second = WorkerProcess(tmp_path, '--queues', 'short', '--burst')
    assert second.wait(90) == 0, second.output()
    assert set(ids(record, 'ran')) == set(published)


def test_an_endpoint_outage_is_survived(sqs, record, tmp_path):
    endpoint = urlparse(sqs.url)
    proxy = TCPProxy(endpoint.hostname, endpoint.port).start()
    try:
        published = tasks.QuickTask.publish_batch(None, [((i,), {}) for i in range(30)])
        worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst', endpoint=proxy.url)
        wait_for(lambda: len(events(record, 'ran')) >= 3, 30, 'some tasks to run')
        proxy.stop()
        worker.wait_for_log('unreachable')      # the outage lasts until the worker has met it
        proxy.start()
        assert worker.wait(120) == 0, worker.output()
    finally:
        proxy.close()
    assert set(ids(record, 'ran')) == set(published)
    assert 'unreachable' in worker.output()


def test_a_task_that_no_longer_fits_the_budget_is_released_and_runs_later(sqs, record, tmp_path):
    published = tasks.BudgetTask.publish_batch(None, [((), {})] * 3)
    worker = WorkerProcess(tmp_path, '--queues', 'budget', '--burst')
    assert worker.wait(90) == 0, worker.output()
    assert sorted(ids(record, 'ran')) == sorted(published)
    assert len(ids(record, 'start')) == 3, 'released tasks were not started'
    assert 'does not fit' in worker.output()
    starts = sorted(float(r[3]) for r in events(record, 'start'))
    assert all(later - earlier >= 2.0 for earlier, later in itertools.pairwise(starts))


def test_concurrency_runs_supervised_workers_that_share_the_work(sqs, record, tmp_path):
    published = tasks.QuickTask.publish_batch(None, [((i,), {}) for i in range(30)])
    supervisor = WorkerProcess(tmp_path, '--queues', 'default', '--burst', '--concurrency', '2')
    assert supervisor.wait(90) == 0, supervisor.output()
    assert set(ids(record, 'ran')) == set(published)
    assert len({r[2] for r in events(record, 'ran')}) == 2


def test_supervisor_restarts_a_worker_that_dies(sqs, record, tmp_path):
    crasher = tasks.CrashOnceTask.publish(None)
    supervisor = WorkerProcess(tmp_path, '--queues', 'short', '--burst', '--concurrency', '1')
    assert supervisor.wait(90) == 0, supervisor.output()
    assert ids(record, 'crash') == [crasher]
    assert ids(record, 'ran') == [crasher]
    assert 'restarting' in supervisor.output()


def test_supervisor_forwards_sigterm_to_its_workers(sqs, record, tmp_path):
    tasks.SlowTask.publish_batch(None, [((2.0,), {}) for _ in range(4)])
    supervisor = WorkerProcess(tmp_path, '--queues', 'default', '--concurrency', '2')
    wait_for(lambda: len(events(record, 'start')) >= 2, 30, 'both workers to start a task')
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(15) == 0, supervisor.output()
    assert len(ids(record, 'ran')) == len(ids(record, 'start'))


def test_worker_command_errors_are_one_line(sqs, tmp_path):
    worker = WorkerProcess(tmp_path, '--queues', 'nope')
    assert worker.wait(30) == 1
    lines = worker.output().strip().splitlines()
    assert lines == ["kale: error: --queues: queue 'nope' is not in the queue config %s "
                     "(queues: high, default, low, budget, short, beat, ordered, slowpoll, tenants, "
                     "recovery)"
                     % os.path.join(ROOT, 'tests', 'queue_config.yaml')]


def test_sigterm_while_long_polling_waits_for_the_answer_and_gives_back_what_it_brings(
        sqs, tmp_path):
    """The worker talks to the endpoint through a proxy that shows the test
    when the 20-second long poll has been sent. A task published after the
    SIGTERM is taken by that poll: the worker waits for its answer and gives
    the message back before it exits, instead of leaving it invisible for
    its visibility timeout."""
    endpoint = urlparse(sqs.url)
    sent: list[bytes] = []
    proxy = TCPProxy(endpoint.hostname, endpoint.port, on_request=sent.append).start()
    try:
        worker = WorkerProcess(tmp_path, '--queues', 'slowpoll', endpoint=proxy.url)
        wait_for(lambda: LONG_POLL_REQUEST.search(b''.join(sent)), 30,
                 'the worker to send a 20-second long poll')
        worker.signal(signal.SIGTERM)
        tasks.RecordTask.with_options(queue='slowpoll').publish(None, 'late')
        assert worker.wait(30) == 0, worker.output()
        assert sqs.visible('slowpoll') == 1, worker.output()
    finally:
        proxy.close()


def test_the_worker_runs_from_python_as_in_the_original(sqs, record, tmp_path):
    published = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(5)])
    code = 'from kale import worker; worker.Worker(queue_names=["default"]).run()'
    process = subprocess.Popen([sys.executable, '-c', code], cwd=ROOT, env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: set(ids(record, 'ran')) == set(published), 30, 'every task to run')
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0


def test_a_task_that_kills_its_worker_every_time_is_redriven_alone(sqs, record, tmp_path):
    """With the default MAX_RECEIVE_COUNT (10) a killer is dead-lettered by
    the redrive policy after ten crashes, as many as the policy allows (up to
    ten more if it still shared a group with a task left unsettled as often
    when it was to run alone: one of the two goes back then, its receive
    count starting anew); every other task runs, none is dead-lettered."""
    killer = tasks.CrashEveryTimeTask.publish(None)
    others = tasks.ShortRecordTask.publish_batch(None, [((i,), {}) for i in range(6)])
    for _ in range(30):                 # a worker at a time, each until it is killed
        worker = WorkerProcess(tmp_path, '--queues', 'short', '--burst')
        if worker.wait(60) == 0:
            break
    assert set(ids(record, 'ran')) == set(others)
    assert set(ids(record, 'crash')) == {killer}
    assert 10 <= len(ids(record, 'crash')) <= 20
    [dead] = dead_letters(sqs, 'short')
    assert sqs.decode(dead['Body'], 'short').task_id == killer
    assert 'kale_dead_letter_reason' not in dead['MessageAttributes']   # moved by SQS's redrive


def test_process_isolation_turns_crashes_and_hangs_into_ordinary_failures(sqs, record, tmp_path):
    crasher = tasks.CrashEveryTimeTask.publish(None)
    hung = tasks.RegexHangTask.publish(None)
    fine = tasks.ShortRecordTask.publish(None)
    worker = WorkerProcess(tmp_path, '--queues', 'short,default', '--burst',
                           KALE_TEST_TASK_ISOLATION='process')
    assert worker.wait(90) == 0, worker.output()      # the worker itself never died
    assert ids(record, 'ran') == [fine]
    assert ids(record, 'crash') == [crasher] * (tasks.CrashEveryTimeTask.max_retries + 1)
    assert ids(record, 'start') == [hung] * (tasks.RegexHangTask.max_retries + 1)
    assert [m['MessageAttributes']['kale_dead_letter_reason']['StringValue']
            for m in dead_letters(sqs, 'short')] == [
        'retries_exhausted: TaskProcessDied: task process killed by SIGKILL before reporting']
    assert reasons(dead_letters(sqs, 'default')) == ['retries_exhausted']


def test_a_worker_stopped_while_it_starts_exits_0(tmp_path):
    """The worker's settings module says when it is being loaded, then keeps
    loading until the worker is stopped: the signal arrives during start-up."""
    loading = tmp_path / 'loading'
    (tmp_path / 'loading_settings.py').write_text(
        'import os\n'
        'import time\n'
        'open(os.environ["KALE_TEST_LOADING"], "w").close()\n'
        'while True:\n'
        '    time.sleep(0.01)\n')
    worker = WorkerProcess(tmp_path, '--queues', 'default', KALE_SETTINGS_MODULE='loading_settings',
                           KALE_TEST_LOADING=str(loading),
                           PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]))
    wait_for(loading.exists, 30, 'the worker to load its settings')
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert 'serving queues' not in worker.output()


def test_a_task_longer_than_the_visibility_timeout_runs_once_among_two_workers(sqs, record,
                                                                                tmp_path):
    long_id = tasks.LongTask.publish(None, 7.0)           # the 'beat' queue's timeout is 3 s
    quick = tasks.BeatRecordTask.publish_batch(None, [((i,), {}) for i in range(4)])
    workers = [WorkerProcess(tmp_path, '--queues', 'beat', '--burst') for _ in range(2)]
    codes = [w.wait(90) for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    assert ids(record, 'start').count(long_id) == 1, 'the long task ran twice'
    assert sorted(ids(record, 'ran')) == sorted(quick + [long_id])
    assert not any('could not extend' in w.output() for w in workers)


def test_a_long_task_whose_worker_is_killed_comes_back_within_one_visibility_timeout(
        sqs, record, tmp_path):
    long_id = tasks.LongTask.publish(None, 7.0)
    worker = WorkerProcess(tmp_path, '--queues', 'beat')
    wait_for(lambda: events(record, 'start'), 30, 'the long task to start')
    # The second worker starts first (its start-up is not SQS's redelivery
    # time): it waits, the message invisible while the first one's heartbeat lasts.
    second = WorkerProcess(tmp_path, '--queues', 'beat', '--burst')
    second.wait_for_log('serving queues', 30)
    time.sleep(max(0.0, 3.5 - (time.time() - float(events(record, 'start')[0][3]))))
    worker.signal(signal.SIGKILL)                         # past the first extension
    killed_at = time.time()
    worker.wait(10)
    assert second.wait(60) == 0, second.output()
    starts = [float(r[3]) for r in events(record, 'start')]
    assert len(starts) == 2 and ids(record, 'ran') == [long_id]
    assert starts[1] - killed_at <= 3 + 1.5, 'it came back later than one visibility timeout'


@pytest.mark.parametrize('retry_delay, failing', [('2', 2), ('1', 1)],
                         ids=['second-fails-wait-2', 'first-fails-wait-1'])
def test_two_workers_share_a_fifo_queue_and_keep_each_group_in_order(sqs, record, tmp_path,
                                                                      retry_delay, failing):
    """One task of each group fails once, and the group's later messages are
    released behind its retry: held until a second before it, never for 0 s
    (behind a 1 s wait the retry is held 2 s). moto must hand them out in
    order, and so must LocalStack (KALE_TEST_SQS_ENDPOINT, see
    docs/how-to/testing.md), which delivers a message made visible by a
    change to 0 while an earlier one of its group is held."""
    groups = 'abcd'
    # Both workers serve before the groups are published: started after
    # them, a loaded machine's second start-up can take longer than the
    # first worker needs for all twenty.
    workers = [WorkerProcess(tmp_path, '--queues', 'ordered',
                             KALE_TEST_RETRY_DELAY=retry_delay) for _ in range(2)]
    try:
        for worker in workers:
            worker.wait_for_log('serving queues', 60)
        for group in groups:
            calls = [(('%s%d' % (group, i), 1 if i == failing else 0, 0.05), {})
                     for i in range(1, 6)]
            tasks.OrderedTask.publish_batch(None, calls, group_id=group)
        wait_for(lambda: len(events(record, 'ran')) >= 5 * len(groups), 90,
                 'the groups to run')
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        codes = [w.wait(30) for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    ran = [r[4] for r in events(record, 'ran')]
    for group in groups:
        assert [label for label in ran if label.startswith(group)] == \
            ['%s%d' % (group, i) for i in range(1, 6)]
    assert sorted(r[4] for r in events(record, 'failed')) == ['%s%d' % (g, failing)
                                                               for g in groups]
    assert len({r[2] for r in events(record, 'ran')}) == 2, 'both workers took part'
    [url] = [u for u in sqs.client.list_queues()['QueueUrls']
             if u.endswith('/' + settings.QUEUE_PREFIX + 'ordered.fifo')]
    attributes = sqs.client.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])
    assert attributes['Attributes']['FifoQueue'] == 'true'


def test_concurrency_shares_slow_tasks_between_its_workers(sqs, record, tmp_path):
    """Six 1.5-second tasks and two workers: each worker receives only what it
    starts soon, so the two run side by side instead of one taking all six."""
    published = tasks.SlowTask.publish_batch(None, [((1.5,), {}) for _ in range(6)])
    supervisor = WorkerProcess(tmp_path, '--queues', 'default', '--burst', '--concurrency', '2')
    assert supervisor.wait(90) == 0, supervisor.output()
    assert sorted(ids(record, 'ran')) == sorted(published)
    by_pid = collections.Counter(r[2] for r in events(record, 'ran'))
    assert len(by_pid) == 2 and min(by_pid.values()) >= 2, by_pid
    starts = sorted(float(r[3]) for r in events(record, 'start'))
    assert starts[-1] - starts[0] < 6.0          # one worker alone needs 7.5 s to start the sixth
