"""A rate limit shared by a fleet: two, then four, real ``kale worker``
processes on the embedded endpoint and one SQLite records file, one
``rate_limit = '5/s'`` task.

The issue asks for 20/s over 60 s. This rig (the embedded endpoint, the
records on SQLite, every process on two cores) runs only some 12 plain
tasks a second with two workers, so 20/s would measure the rig: the test
runs 5/s, a 12 s window after a 2 s warm-up (the bucket starts full), and
asks that the runs in it are at most 5 % (+1) over the limit. It does not
ask how close under it they come: that measures the rig, and other suites
running beside it on the same cores (some runs reach 95 %, a loaded one 15 %)."""
import collections
import re
import signal
import time

import pytest

from kale import records
from tests import flow_tasks as ft
from tests.support.processes import WorkerProcess

pytestmark = pytest.mark.slow

RATE = 5
WARM_UP_SEC = 2.0
WINDOW_SEC = 12.0
#: Seconds a worker process takes to start serving, on a loaded machine.
START_SEC = 6.0


@pytest.mark.real_time('real worker processes under a rate limit on the machine\'s clock')
@pytest.mark.parametrize('processes', [2, 4])
def test_a_fleet_stays_within_five_percent_of_a_shared_rate(sqs, records_url, tmp_path,
                                                            processes):
    ft.FleetTask.publish_batch(None, [((n,), {}) for n in range(100)])
    ft.FleetTask.publish_batch(None, [((n,), {}) for n in range(100, 200)])
    workers = [WorkerProcess(tmp_path, '--queues', 'default') for _ in range(processes)]
    try:
        time.sleep(START_SEC + WARM_UP_SEC + WINDOW_SEC + 2)
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        codes = [worker.wait(30) for worker in workers]
    assert codes == [0] * processes, [w.output() for w in workers]
    with records.store().begin() as conn:
        starts = sorted(row[0] for row in conn.exec_driver_sql(
            "SELECT started_at FROM kale_tasks WHERE status = 'succeeded'"))
    assert starts, 'nothing ran'
    first = starts[0] + WARM_UP_SEC
    in_window = [t for t in starts if first <= t < first + WINDOW_SEC]
    expected = RATE * WINDOW_SEC
    assert len(in_window) <= expected * 1.05 + 1, (len(in_window), len(starts))
    print('fleet of %d: %d runs in the %g s window (limit %d)' % (
        processes, len(in_window), WINDOW_SEC, expected))
    # a refused message is released once, then runs on its token, reserved
    # for it: its receives are not burnt in a loop
    releases = collections.Counter(re.findall(
        r'task ([0-9a-f]+) \S+ on default released: rate_limit', ''.join(
            w.output() for w in workers)))
    assert releases and max(releases.values()) == 1
