"""Executor programs in shell, Python and Node run as tasks by real worker
loops (in-memory SQS, records on SQLite): every exit status, the time limit
on a whole process group, bounded output, kept standard error, hostile
method names, every pool, and a workflow mixing a Python task and a program."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import textwrap
import threading
import time

import pytest

from kale import records, workflow
from kale.conf import settings
from kale.exceptions import PublishError
from kale.executors import executor_task
from kale.executors import task as executor_task_module
from tests import workflow_tasks as wt
from tests.support.processes import wait_for
from tests.support.unavailable import unavailable
from tests.support.work import work

NODE = shutil.which('node')


@pytest.fixture
def programs(tmp_path, memory_broker, records_url):
    """An executor directory (EXECUTOR_DIR) of this test's own; ``add(name,
    text)`` writes an executable program in it."""
    directory = tmp_path / 'executors'
    directory.mkdir()

    def add(name: str, text: str, mode: int = 0o755) -> str:
        path = directory / name
        path.write_text(textwrap.dedent(text).lstrip())
        path.chmod(mode)
        return str(path)

    with settings.override(EXECUTOR_DIR=str(directory), EXECUTOR_KILL_GRACE_SEC=0.5,
                           RETRY_DELAY_MULTIPLE_SEC=0):
        add.directory = directory          # type: ignore[attr-defined]
        add.broker = memory_broker         # type: ignore[attr-defined]
        yield add


def run(programs, method: str, *args, rounds: int = 4):
    """Publish one run of ``method``, work until it ends; its record."""
    task_id = executor_task(method).publish(None, *args)
    for _ in range(rounds):
        work(programs.broker)
        record = records.get(task_id)
        if record is not None and record.status in ('succeeded', 'failed'):
            return record
    return records.get(task_id)


SHELL_ECHO = '''
    #!/bin/sh
    read -r args
    echo "shell says hello" >&2
    printf '{"got": %s}\\n' "$args"
'''

PYTHON_SUM = '''
    #!/usr/bin/env python3
    import json, sys
    print(json.dumps(sum(json.load(sys.stdin))))
'''

NODE_UPPER = '''
    #!/usr/bin/env node
    let input = '';
    process.stdin.on('data', (chunk) => { input += chunk; });
    process.stdin.on('end', () => {
      const [text] = JSON.parse(input);
      process.stdout.write(JSON.stringify({upper: text.toUpperCase()}));
    });
'''


@pytest.mark.usefixtures('pool')        # on each pool: serial, threads, asyncio
def test_a_shell_program_gets_its_arguments_and_gives_its_result(programs):
    programs('echo-args', SHELL_ECHO)
    record = run(programs, 'echo-args', 1, 'two', {'three': 3})
    assert record.status == 'succeeded' and record.result == {'got': [1, 'two', {'three': 3}]}
    assert record.task == 'executor:echo-args'
    assert record.stderr == 'shell says hello\n'


def test_a_python_program(programs):
    programs('sum', PYTHON_SUM)
    assert run(programs, 'sum', 1, 2, 39).result == 42


def test_a_node_program(programs):
    if NODE is None:
        unavailable('Node.js is not installed: the test runs a Node program')
    programs('upper', NODE_UPPER)
    assert run(programs, 'upper', 'mail').result == {'upper': 'MAIL'}


def test_exit_status_65_fails_for_good_as_bad_input(programs):
    programs('picky', '''
        #!/bin/sh
        echo "uid must be a number" >&2
        exit 65
    ''')
    record = run(programs, 'picky', 'x')
    assert record.status == 'failed' and record.attempts == 1
    assert record.dead_letter_reason.startswith('bad_input')
    assert 'exited 65 (EX_DATAERR): uid must be a number' in record.error_message
    assert record.stderr == 'uid must be a number\n'


def test_another_exit_status_is_retried_by_the_policy(programs):
    programs('executors.yaml', 'methods:\n  flaky:\n    max_retries: 1\n', mode=0o644)
    counter = programs.directory / 'count'
    programs('flaky', '''
        #!/bin/sh
        echo run >> count
        echo "database busy" >&2
        exit 3
    ''')
    record = run(programs, 'flaky', rounds=6)
    assert record.status == 'failed' and record.attempts == 2
    assert counter.read_text().split() == ['run', 'run']
    assert 'failed: flaky ended with exit status 3: database busy' in record.error_message
    assert record.dead_letter_reason.startswith('retries_exhausted')


def test_death_by_a_signal_is_a_failure(programs):
    programs('executors.yaml', 'defaults:\n  max_retries: 0\n', mode=0o644)
    programs('crash', '''
        #!/bin/sh
        kill -SEGV $$
    ''')
    record = run(programs, 'crash')
    assert record.status == 'failed' and 'killed by SIGSEGV' in record.error_message


def test_output_that_is_not_one_json_value_is_bad_output(programs):
    programs('executors.yaml', 'defaults:\n  max_retries: 0\n', mode=0o644)
    programs('chatty', '''
        #!/bin/sh
        echo "starting"
        echo '{"ok": true}'
    ''')
    record = run(programs, 'chatty')
    assert record.status == 'failed'
    assert "bad_output: the standard output of chatty is not one JSON value" in \
        record.error_message


@pytest.mark.real_time('a real program writes 10 MB through a real pipe')
def test_ten_megabytes_of_output_fail_the_run_without_holding_it_up(programs):
    programs('executors.yaml', 'defaults:\n  max_retries: 0\n', mode=0o644)
    programs('flood', '''
        #!/bin/sh
        head -c 10000000 /dev/zero | tr '\\0' 'a'
    ''')
    started = time.monotonic()
    with settings.override(EXECUTOR_STDOUT_MAX_BYTES=1024 * 1024):
        record = run(programs, 'flood')
    assert record.status == 'failed'
    assert 'bad_output: flood wrote more than EXECUTOR_STDOUT_MAX_BYTES (1048576)' in \
        record.error_message
    assert time.monotonic() - started < 20


def test_only_the_end_of_standard_error_is_kept(programs):
    programs('noisy', '''
        #!/usr/bin/env python3
        import sys
        sys.stderr.write('x' * 100000 + 'THE END')
        print('null')
    ''')
    with settings.override(EXECUTOR_STDERR_MAX_BYTES=1000):
        record = run(programs, 'noisy')
    assert record.status == 'succeeded' and record.result is None
    assert len(record.stderr) == 1000 and record.stderr.endswith('xTHE END')


@pytest.mark.real_time('a real program runs into its time limit and kill grace')
def test_the_time_limit_kills_the_whole_group_even_a_program_ignoring_sigterm(programs):
    programs('executors.yaml', 'methods:\n  stubborn:\n    time_limit: 1\n    max_retries: 0\n',
             mode=0o644)
    programs('stubborn', '''
        #!/bin/sh
        trap '' TERM
        sleep 60 &
        echo $! > child.pid
        while true; do sleep 1; done
    ''')
    started = time.monotonic()
    record = run(programs, 'stubborn')
    assert record.status == 'failed' and record.error_type == 'TimeLimitExceeded'
    assert time.monotonic() - started < 15
    child = int((programs.directory / 'child.pid').read_text())
    # the grandchild went with the group (its 60 s sleep is not waited out)
    wait_for(lambda: not alive(child), 30, 'the grandchild to end')


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init to reap it does not)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


@pytest.mark.parametrize('name', ['../x', '.hidden', 'a b', '', 'x' * 129, 'a/b'])
def test_a_hostile_method_name_is_refused_at_publish(programs, name):
    with pytest.raises(PublishError, match='unknown_method: .* is not a method name'):
        executor_task(name)


def test_nothing_outside_the_directory_runs(programs, tmp_path):
    programs('executors.yaml', 'defaults:\n  max_retries: 3\n', mode=0o644)
    outside = tmp_path / 'outside.sh'
    outside.write_text('#!/bin/sh\necho 1\n')
    outside.chmod(0o755)
    os.symlink(str(outside), str(programs.directory / 'escape'))
    programs('not-executable', '#!/bin/sh\necho 1\n', mode=0o644)
    for method, why in [('escape', 'leads outside the executor directory'),
                        ('not-executable', 'is not an executable file'),
                        ('missing', 'no program missing in the executor directory'),
                        ('executors.yaml', 'is the settings file')]:
        record = run(programs, method)
        assert record.status == 'failed' and record.attempts == 1, method
        assert record.dead_letter_reason.startswith('unknown_method'), method
        assert why in record.error_message, method


def test_a_message_naming_a_bad_method_fails_as_unknown_method(programs):
    """A name no publisher accepts, signed anyway (a publisher of another
    version): the worker fails it for good, running nothing."""
    from kale.executors.task import executor_task as make
    task_class = make('../../bin/sh', checked=False)
    task_id = task_class.publish(None)
    work(programs.broker)
    record = records.get(task_id)
    assert record.status == 'failed' and record.dead_letter_reason.startswith('unknown_method')


def test_a_worker_without_executor_dir_fails_them_as_unknown_method(programs):
    programs('echo-args', SHELL_ECHO)
    task_id = executor_task('echo-args').publish(None, 1)
    with settings.override(EXECUTOR_DIR=''):
        work(programs.broker)
    record = records.get(task_id)
    assert record.status == 'failed' and 'this worker runs no executor programs' in \
        record.error_message


def test_keyword_arguments_and_what_json_cannot_hold_are_refused_at_publish(programs):
    with pytest.raises(PublishError, match='executor sum takes positional arguments only'):
        executor_task('sum').publish(None, 1, b=2)
    with pytest.raises(PublishError, match='executor sum: its arguments are not JSON'):
        executor_task('sum').publish(None, {1, 2})


def test_executors_yaml_sets_queue_time_limit_and_retries(programs):
    programs('executors.yaml', '''
        defaults:
          max_retries: 2
          time_limit: 20
        methods:
          send-mail:
            queue: low
            time_limit: 5
    ''', mode=0o644)
    mail, other = executor_task('send-mail'), executor_task('other')
    assert (mail.queue, mail.program_time_limit, mail.max_retries) == ('low', 5.0, 2)
    assert (other.queue, other.program_time_limit) == ('default', 20.0)


def test_a_bad_executors_yaml_is_one_line_naming_the_key(programs):
    from kale.exceptions import ImproperlyConfigured
    from kale.executors.catalog import Catalog
    programs('executors.yaml', 'methods:\n  x:\n    timelimit: 5\n', mode=0o644)
    with pytest.raises(ImproperlyConfigured, match=r'method x: unknown key timelimit'):
        Catalog(str(programs.directory))


def test_a_python_task_and_a_program_in_one_workflow(programs):
    programs('sum', PYTHON_SUM)
    first = wt.Add.s(1, 2)
    flow = workflow.chain(first, executor_task('sum').s(10, 100))   # sum(3, 10, 100)
    wf = workflow.submit(flow)
    for _ in range(4):
        if wf.status() != 'running':
            break
        work(programs.broker)
    assert wf.result() == 113


@pytest.mark.parametrize('codec', [
    {'SERIALIZER': 'json'},
    {'SERIALIZER': 'pickle', 'COMPRESSION_MIN_BYTES': 1},
    {'MESSAGE_ENCRYPTION_KEY': 'an-encryption-secret-of-32-chars!!', 'COMPRESSION_MIN_BYTES': 1},
])
def test_executor_tasks_go_through_every_codec_setting(programs, codec):
    programs('echo-args', SHELL_ECHO)
    with settings.override(**codec):
        record = run(programs, 'echo-args', 'x' * 300)
    assert record.status == 'succeeded' and record.result == {'got': ['x' * 300]}


def test_kale_worker_with_a_bad_executor_dir_says_so_in_one_line(tmp_path, capsys):
    from kale.cli import main
    assert main(['worker', '--burst', '--executors', str(tmp_path / 'nope')]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ['kale: error: EXECUTOR_DIR %s is not a directory' % (tmp_path / 'nope')]


LEAVES_A_DAEMON = '''
    #!/usr/bin/env python3
    # A child that leaves the program's session (setsid) and outlives its
    # parent, written as a daemon would be; then the program {then}.
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open('daemon.pid', 'w') as out:
                out.write(str(os.getpid()))
            time.sleep(120)
        os._exit(0)
    os.wait()
    while not os.path.exists('daemon.pid'):
        time.sleep(0.01)
    {end}
'''


@pytest.mark.real_time('a real program runs into its time limit and kill grace')
@pytest.mark.parametrize('then, end', [
    ('runs past its time limit', 'time.sleep(60)'),
    ('exits at once', 'print("1")'),
])
def test_a_descendant_that_left_the_session_is_ended_with_the_run(programs, then, end):
    programs('executors.yaml', 'methods:\n  daemonic:\n    time_limit: 1\n    max_retries: 0\n',
             mode=0o644)
    programs('daemonic', LEAVES_A_DAEMON.replace('{then}', then).replace('{end}', end))
    record = run(programs, 'daemonic')
    assert record.status == ('failed' if 'past' in then else 'succeeded'), record.error_message
    daemon = int((programs.directory / 'daemon.pid').read_text())
    deadline = time.monotonic() + 30
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(daemon)
    assert not os.path.exists('/proc/%d' % daemon)      # reaped too: no zombie left


def test_a_program_that_cannot_be_started_is_unknown_method(programs):
    programs('badline', '#!/no/such/interpreter\n')
    record = run(programs, 'badline')
    assert record.status == 'failed' and 'cannot be started' in record.error_message


TREE = '''
    #!{python} -S
    # A tree of four: the reaper's program, a child in a process group of its
    # own (as a job-control shell makes), and a daemon that left the session
    # (setsid) after its parent exited. It writes their pids (the reaper's
    # first) to tree.pids, does what the test makes it do to its reaper, and
    # runs past its time limit.
    import os, signal, time

    def child():
        os.setpgid(0, 0)
        time.sleep(120)

    def daemon():
        os.setsid()
        if os.fork() == 0:
            with open('daemon.tmp', 'w') as out:
                out.write(str(os.getpid()))
            os.rename('daemon.tmp', 'daemon.pid')
            time.sleep(120)

    pids = [os.getppid(), os.getpid()]
    for work in (child, daemon):
        pid = os.fork()
        if pid == 0:
            work()
            os._exit(0)
        pids.append(pid)
    os.waitpid(pids[-1], 0)
    while not os.path.exists('daemon.pid'):
        time.sleep(0.01)
    with open('daemon.pid') as f:
        pids[-1] = int(f.read())
    with open('tree.tmp', 'w') as out:
        out.write(' '.join(map(str, pids)))
    os.rename('tree.tmp', 'tree.pids')
    {escape}
    time.sleep(60)
'''


def run_tree(programs, method: str, escape: str):
    """Run the program TREE as ``method`` (time limit 3 s: room to start on a
    loaded machine; no retry) with the ``escape`` line; its record, once no
    process of its tree runs (a failure after 30 s), and no thread of the
    worker still ends it."""
    programs('executors.yaml', 'methods:\n  %s:\n    time_limit: 3\n    max_retries: 0\n'
             % method, mode=0o644)
    programs(method, TREE.replace('{python}', sys.executable).replace('{escape}', escape))
    pids: list[int] = []
    try:
        record = run(programs, method)
        pids[:] = map(int, (programs.directory / 'tree.pids').read_text().split())
        wait_for(lambda: not any(alive(pid) for pid in pids), 30,
                 'the tree of %s to end: %s run' % (method, [p for p in pids if alive(p)]))
        wait_for(lambda: not any(t.name == 'kale-executor-run' for t in threading.enumerate()),
                 30, 'the worker to finish ending the tree')
        return record
    finally:
        for pid in pids:        # a failing test leaves nothing behind either
            for signum in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass


@pytest.mark.slow
@pytest.mark.real_time('a real program runs into its time limit and kill grace')
@pytest.mark.parametrize('pool, margin', [
    ('serial', None), ('serial', 0.0), ('threads', 0.0), ('asyncio', 0.0),
], ids=['serial-guard-margin', 'serial-no-margin', 'threads-no-margin', 'asyncio-no-margin'],
    indirect=['pool'])
def test_a_reaper_stopped_by_its_program_has_its_whole_tree_killed_by_the_worker(
        programs, monkeypatch, pool, margin):
    # The worker's guard (the task's time limit) fires GUARD_MARGIN_SEC after
    # the program's limit and kill grace, and again every 0.25 s; with no
    # margin it interrupts the worker right as it ends the tree, which must
    # end all the same, on each pool's guard (SIGALRM, or an exception
    # raised in the run's thread).
    if margin is not None:
        monkeypatch.setattr(executor_task_module, 'GUARD_MARGIN_SEC', margin)
        monkeypatch.setattr(executor_task_module, '_classes', {})
    record = run_tree(programs, 'stopper', 'os.kill(os.getppid(), signal.SIGSTOP)')
    assert record.status == 'failed' and record.error_type == 'TimeLimitExceeded'


@pytest.mark.slow
@pytest.mark.real_time('a real program runs and its tree is watched ending')
def test_a_reaper_killed_by_its_program_has_its_whole_tree_killed_by_the_worker(programs):
    record = run_tree(programs, 'killer', 'os.kill(os.getppid(), signal.SIGKILL)')
    assert record.status == 'failed' and 'killed by SIGKILL' in record.error_message


@pytest.mark.slow
@pytest.mark.real_time('a real program runs into its time limit and kill grace')
def test_a_grandchild_that_called_setsid_is_killed_at_the_time_limit(programs):
    record = run_tree(programs, 'daemonizer', 'pass')
    assert record.status == 'failed' and record.error_type == 'TimeLimitExceeded'
