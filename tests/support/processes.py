"""Real ``kale`` processes for the end-to-end tests, and waiting on what they do."""
from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable, Optional

import pytest

from tests.support.endpoint import ROOT, subprocess_env
from tests.support.records import read_records


class WorkerProcess:
    """`kale worker ...` in a subprocess with its log captured to a file.
    One the test left running (it failed before stopping it) is killed after
    the test (:func:`kill_leftovers`), so no worker outlives the suite."""

    #: Every worker started and not yet waited for.
    started: list['WorkerProcess'] = []

    def __init__(self, tmp_path, *args: str, endpoint: Optional[str] = None, **extra_env: str):
        self.log_path = tmp_path / ('worker-%d.log' % time.monotonic_ns())
        env = subprocess_env(**extra_env)
        if endpoint:
            env['KALE_TEST_ENDPOINT'] = endpoint
        self.log = open(self.log_path, 'w')
        self.process = subprocess.Popen([sys.executable, '-m', 'kale', 'worker', *args],
                                        stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        WorkerProcess.started.append(self)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail('worker did not exit within %ss; log:\n%s' % (timeout, self.output()))
        finally:
            self.log.close()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        """Wait until the worker has logged ``text``."""
        wait_for(lambda: text in self.output(), timeout, 'the worker to log %r' % text)



def kill_leftovers() -> None:
    """Kill the workers a test started and left running."""
    for worker in WorkerProcess.started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
        if not worker.log.closed:
            worker.log.close()
    WorkerProcess.started.clear()


def events(path, event):
    return [r for r in read_records(path) if r[0] == event]


def wait_for(condition, timeout: float, what: str, log: Optional[Callable[[], str]] = None) -> None:
    """Wait until ``condition()`` holds; fail after ``timeout`` seconds,
    with what ``log()`` gives (the processes' output) when there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail('timed out waiting for %s%s' % (what, '; log:\n%s' % log() if log else ''))


def dead_letters(sqs, queue):
    return sqs.receive_all('dlq-' + queue)


def reasons(messages):
    return sorted(m['MessageAttributes']['kale_dead_letter_reason']['StringValue'].split(':')[0]
                  for m in messages)


def console_script(*args, **env):
    """``python -m kale ...`` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, '-m', 'kale', *args], cwd=ROOT, capture_output=True,
                          text=True, env=subprocess_env(**env), timeout=120)


def one_line_error(result):
    """The message of a command that failed with one ``kale: error:`` line."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith('kale: error: ')
    return lines[0][len('kale: error: '):]
