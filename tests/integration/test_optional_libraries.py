"""Kale imports, publishes and works without prometheus_client and
opentelemetry, and imports neither while its metrics and tracing are off.
Each test runs a process in which importing them fails."""
import json
import subprocess
import sys

from tests.support.endpoint import ROOT, subprocess_env

#: Runs in a fresh interpreter: the two libraries cannot be imported; a task
#: is published and worked over the in-memory transport with the settings
#: given as JSON in argv[1]; prints what got imported, or the error.
SCRIPT = r'''
import json, sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('opentelemetry', 'prometheus_client'):
            raise ImportError('No module named %r (blocked by the test)' % name)

sys.meta_path.insert(0, Missing())

from kale import publisher, worker
from kale.broker import Broker
from kale.conf import settings
from kale.exceptions import KaleError
from kale.queue_config import build_queue_config
from kale.transport.memory import MemoryTransport
from tests import tasks

with settings.override(**json.loads(sys.argv[1])):
    broker = Broker(MemoryTransport(), build_queue_config(settings.config), config=settings.config)
    publisher.set_publisher(publisher.Publisher(broker))
    try:
        tasks.AddTask.publish(None, 1, 2)
        code = worker.Worker(queue_names=['default'], burst=True, broker=broker).run()
    except KaleError as exc:
        print(json.dumps({'error': str(exc)}))
        sys.exit(0)
loaded = sorted(name for name in sys.modules
                if name.split('.')[0] in ('opentelemetry', 'prometheus_client')
                or name.startswith('kale.contrib'))
print(json.dumps({'code': code, 'loaded': loaded}))
'''


def run(**overrides):
    result = subprocess.run([sys.executable, '-c', SCRIPT, json.dumps(overrides)], cwd=ROOT,
                            env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_with_metrics_and_tracing_off_kale_works_and_imports_neither():
    outcome = run()
    assert outcome['code'] == 0
    assert outcome['loaded'] == []


def test_tracing_on_without_opentelemetry_is_one_clear_error():
    outcome = run(TRACING=True)
    assert outcome['error'].startswith('TRACING is on, but opentelemetry is not installed: '
                                       "pip install 'kale-sqs[otel]'")


def test_metrics_on_without_prometheus_client_is_one_clear_error():
    outcome = run(METRICS_PORT=9)
    assert outcome['error'].startswith('METRICS_PORT is set, but prometheus_client is not '
                                       "installed: pip install 'kale-sqs[metrics]'")
