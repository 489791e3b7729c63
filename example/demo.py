"""`make demo`: start the embedded endpoint, publish example tasks, show them queued.

Everything it starts, it stops, also on Ctrl-C.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = 'example.taskworker.settings'


def start_endpoint() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, '-m', 'kale', 'sqs-local', '--port', '0'],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    assert process.stdout is not None
    deadline = time.time() + 30
    while time.time() < deadline:
        line = process.stdout.readline()
        match = re.search(r'(http://\S+)', line)
        if match:
            return process, match.group(1)
        if not line:
            break
    process.kill()
    raise SystemExit('demo: the embedded SQS endpoint did not start')


def main() -> int:
    endpoint, url = start_endpoint()
    try:
        os.environ['KALE_SQS_ENDPOINT'] = url
        os.environ['KALE_SETTINGS_MODULE'] = SETTINGS
        from kale.broker import get_broker
        from kale.queue_config import get_queue_config

        from example.taskworker import tasks
        print('demo: embedded SQS endpoint at %s' % url)
        tasks.FibonacciTask.publish_batch(None, [((n,), {}) for n in range(20, 40)])
        tasks.FlakyTask.publish_batch(None, [(('order-%d' % i,), {}) for i in range(5)])
        tasks.AlwaysFailsTask.publish(None)
        tasks.SlowReportTask.publish_batch(None, [((), {'seconds': 0.2}) for _ in range(3)])
        broker = get_broker()
        for name, queue in get_queue_config().items():
            print('demo: %-14s %3d visible' % (name, broker.counts(queue).visible))
        print('demo: worker not built yet')
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        endpoint.terminate()
        endpoint.wait(10)


if __name__ == '__main__':
    sys.exit(main())
