"""The hooks a `kale worker --concurrency N` supervisor calls, and the options
it passes its workers."""
import argparse
import sys

import pytest

from kale.app import default_app
from kale.conf import settings
from kale.exceptions import HookError
from kale.hooks import WorkerHooks
from kale.worker.supervisor import Supervisor, worker_command


class Recording(WorkerHooks):
    def __init__(self):
        self.calls = []

    def on_supervisor_startup(self, supervisor):
        self.calls.append(('startup',))
        supervisor.env['KALE_TEST_FROM_HOOK'] = 'yes'

    def on_worker_exited(self, supervisor, pid, exit_code):
        self.calls.append(('exited', exit_code))

    def on_supervisor_shutdown(self, supervisor):
        self.calls.append(('shutdown',))


CHILD = [sys.executable, '-c', 'import os, sys; sys.exit(0 if os.environ["KALE_TEST_FROM_HOOK"] '
                               '== "yes" else 5)']


def test_the_supervisor_calls_its_hooks_around_its_workers():
    hooks = Recording()
    with settings.override(WORKER_HOOKS=[hooks]):
        # the children saw the hook's variable
        assert Supervisor(CHILD, 2, default_app().config).run() == 0
    assert hooks.calls == [('startup',), ('exited', 0), ('exited', 0), ('shutdown',)]


class FailingStartup(WorkerHooks):
    def on_supervisor_startup(self, supervisor):
        raise OSError('port taken')


def test_a_failing_supervisor_startup_hook_starts_no_worker():
    with settings.override(WORKER_HOOKS=[FailingStartup()]):
        supervisor = Supervisor(CHILD, 2, default_app().config)
        with pytest.raises(HookError, match='FailingStartup.on_supervisor_startup failed'):
            supervisor.run()
    assert supervisor.children == {}


def test_workers_get_the_metrics_port_of_their_supervisor():
    args = argparse.Namespace(log_level='INFO', aws_log_level='WARNING', settings=None,
                              queues=None, burst=False, metrics_port=9200)
    assert worker_command(args)[-2:] == ['--metrics-port', '9200']
