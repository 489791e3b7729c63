"""`kale tasks ...` and `kale workers`, run in-process on real records."""
import json
import re

import pytest

from kale import records
from kale.cli import main
from tests import records_tasks as rt
from tests.support.work import work


@pytest.fixture
def published(memory_broker, records_url):
    ok = rt.PlainTask.publish(None, 1, labels={'tenant': 't1'})
    bad = rt.BrokenTask.publish(None, labels={'tenant': 't2'})
    work(memory_broker)
    return ok, bad


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_is_a_table_and_json_on_request(published, capsys):
    _, bad = published
    code, out, _ = run(capsys, 'tasks', 'list')
    assert code == 0 and out.splitlines()[0].split()[:4] == ['ID', 'TASK', 'QUEUE', 'STATUS']
    code, out, _ = run(capsys, 'tasks', 'list', '--status', 'failed', '--json')
    assert [t['id'] for t in json.loads(out)['tasks']] == [bad]


def test_show_count_and_summary_take_the_same_filters(published, capsys):
    _, bad = published
    assert run(capsys, 'tasks', 'count', '--label', 'tenant=t1')[1].strip() == '1'
    _, out, _ = run(capsys, 'tasks', 'show', bad)
    assert 'ValueError' in out and 'Traceback' in out
    _, out, _ = run(capsys, "tasks", "summary", "--json")
    assert json.loads(out)['by_status']['failed'] == 1


def test_a_bad_filter_is_one_line_and_exit_1(published, capsys):
    code, _, err = run(capsys, 'tasks', 'list', '--status', 'finished')
    assert code == 1 and err.startswith("kale: error: unknown status 'finished'")
    assert len(err.strip().splitlines()) == 1


def test_retry_and_cancel(published, capsys):
    ok, bad = published
    code, out, _ = run(capsys, 'tasks', 'retry', bad)
    new_id = out.strip()
    assert code == 0 and records.get(new_id).status == 'queued'
    code, out, _ = run(capsys, 'tasks', 'cancel', new_id)
    assert code == 0 and 'cancelled %s' % new_id in out
    code, _, err = run(capsys, 'tasks', 'cancel', ok)
    assert code == 1 and 'it is succeeded' in err


def test_purge_by_filter_and_by_ttl(published, capsys, monkeypatch):
    assert re.fullmatch(r'deleted 1 records in \d+\.\ds', run(
        capsys, 'tasks', 'purge', '--label', 'tenant=t2', '--yes')[1].strip())
    code, out, _ = run(capsys, 'tasks', 'purge')
    assert code == 0 and re.match(r'purged 0 expired records in \d+\.\ds', out)


def test_workers_lists_the_worker_that_ran(published, capsys):
    _, out, _ = run(capsys, 'workers', '--json')
    [worker] = json.loads(out)['workers']
    assert worker['state'] == 'stopped' and worker['counts'] == {'succeeded': 1,
                                                                 'dead_letter': 1}
