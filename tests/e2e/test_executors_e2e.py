"""The example's executors (shell and Node) run by a real `kale worker
--executors` over HTTP, the chain submitted by the real `kale submit`, from
a file and from standard input."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from kale import records, workflow
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.processes import WorkerProcess
from tests.support.unavailable import unavailable

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(ROOT, 'example', 'executors')
SIGNUP = os.path.join(EXAMPLE, 'signup.json')
MAIL = {'to': 'user-1234@example.com', 'subject': 'Welcome, Ada', 'sent': True}


def kale_submit(*args, stdin=None):
    return subprocess.run([sys.executable, '-m', 'kale', 'submit', *args], cwd=ROOT,
                          env=subprocess_env(), input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_kale_submit_of_a_file_and_of_stdin_runs_the_chain(sqs, records_url, tmp_path):
    if shutil.which('node') is None:
        unavailable('Node.js is not installed: the example\'s send-mail is a Node program')
    from_file = kale_submit(SIGNUP)
    assert from_file.returncode == 0, from_file.stderr
    with open(SIGNUP) as f:
        document = json.load(f)
    document['tasks'][0]['args'] = [{'value': {'uid': 77, 'name': 'Lin'}}]
    from_stdin = kale_submit('-', stdin=json.dumps(document))
    assert from_stdin.returncode == 0, from_stdin.stderr
    ids = [json.loads(done.stdout) for done in (from_file, from_stdin)]
    worker = WorkerProcess(tmp_path, '--executors', EXAMPLE, '--pool', 'threads')
    try:
        results = [workflow.get(each['workflow_id']) for each in ids]
        assert [wf.wait(60) for wf in results] == ['succeeded', 'succeeded']
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert results[0].result()[1] == MAIL
    assert results[1].result()[1]['to'] == 'user-77@example.com'
    mail = records.get(ids[0]['tasks']['mail'])
    assert mail.task == 'executor:send-mail' and mail.result == MAIL
    assert mail.stderr == 'send-mail: welcome mail to user-1234@example.com\n'


def test_kale_submit_refuses_a_bad_document_in_one_line(sqs, records_url, tmp_path):
    bad = tmp_path / 'bad.json'
    bad.write_text('{"tasks": [{"id": "a", "method": "m", "args": [{"ref": "b"}]}]}')
    done = kale_submit(str(bad))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["kale: error: tasks[0] (a): ref 'b' names no entry"]
    missing = kale_submit(str(tmp_path / 'nope.json'))
    assert missing.returncode == 1 and 'cannot read' in missing.stderr
    assert workflow.list_workflows() == []


def test_save_user_data_works_without_jq(tmp_path):
    """Where jq is missing the shell program falls back on Python."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for tool in ('sh', 'cat', 'printf'):
        found = shutil.which(tool)
        if found:
            os.symlink(os.path.realpath(found), str(bin_dir / tool))
    os.symlink(os.path.realpath(sys.executable), str(bin_dir / 'python3'))
    env = {'PATH': str(bin_dir)}
    done = subprocess.run([os.path.join(EXAMPLE, 'save-user-data')], input='[{"uid": 3}]',
                          capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {'uid': 3, 'saved': True}
    assert '(python)' in done.stderr
    bad = subprocess.run([os.path.join(EXAMPLE, 'save-user-data')], input='[{}]',
                         capture_output=True, text=True, env=env, timeout=30)
    assert bad.returncode == 65
