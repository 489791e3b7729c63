"""`kale sqs-local --engine fauxqs`: the tutorial's first step runs on it as on moto,
its Node.js process ends with it, and without Node.js it is one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support import docs
from tests.support.endpoint import ROOT, subprocess_env


def children(pid):
    """The pids of a process's children (Linux)."""
    found = []
    for task in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/children' % (pid, task)) as f:
            found += [int(child) for child in f.read().split()]
    return found


def alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().split(') ', 1)[1][0] != 'Z'      # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_tutorials_first_step_runs_on_fauxqs(tmp_path, fauxqs_installed):
    docs.scratch(str(tmp_path))
    script = '\n'.join(block.code for block in docs.runnable('tutorial/first-task.md', 'sh'))
    result = docs.run_script(script, str(tmp_path), engine='fauxqs')
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'hello, world' in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize('command', [
    ['-m', 'kale', 'sqs-local', '--engine', 'fauxqs', '--port', '0'],
    ['-m', 'bench.fauxqs', 'PORT']])
def test_sigterm_stops_fauxqs_with_its_parent(fauxqs_installed, command):
    if 'PORT' in command:
        from tests.e2e.test_readme import free_port
        command = [part if part != 'PORT' else str(free_port()) for part in command]
    parent = subprocess.Popen([sys.executable, *command], cwd=ROOT, env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert 'SQS endpoint at http://127.0.0.1:' in line, line + parent.stderr.read()
        [node] = children(parent.pid)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(20) == 0, parent.stderr.read()
        deadline = time.monotonic() + 30
        while alive(node) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(node), 'fauxqs (pid %d) outlived its parent' % node
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@pytest.mark.slow
def test_fauxqs_ends_when_its_parent_is_killed(fauxqs_installed):
    """SIGKILL leaves `kale sqs-local` no time to stop its Node.js child: the
    child sees it has a new parent and ends by itself."""
    parent = subprocess.Popen([sys.executable, '-m', 'kale', 'sqs-local', '--engine', 'fauxqs',
                               '--port', '0'], cwd=ROOT, env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert 'SQS endpoint at http://127.0.0.1:' in line, line + parent.stderr.read()
        [node] = children(parent.pid)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while alive(node) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(node), 'fauxqs (pid %d) outlived its killed parent' % node


def test_without_node_it_is_one_line(tmp_path):
    env = subprocess_env(PATH=str(tmp_path), KALE_FAUXQS_CACHE=str(tmp_path / 'cache'))
    done = subprocess.run([sys.executable, '-m', 'kale', 'sqs-local', '--engine', 'fauxqs',
                           '--port', '0'], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ('kale: error: fauxqs needs Node.js 20 or later with npm on '
                                   'PATH (found neither node nor npm)'), done.stderr

