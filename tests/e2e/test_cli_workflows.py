"""`kale workflows list|show|cancel|retry`: in this process through ``kale.cli.main``
on workflows run by in-process workers, and as the console script for help
and for the one-line error without RECORDS_URL."""
import json

import pytest

from kale import records, workflow
from kale.cli import main
from kale.cli.workflows import roots_first
from tests import workflow_tasks as wt
from tests.support.processes import console_script, one_line_error
from tests.support.work import work


def run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def diamond():
    """a feeds b and c, which both feed d (on the 'low' queue)."""
    a = wt.Add.s(1, 2)
    b, c = wt.Add.s(workflow.ref(a), 10), wt.Add.s(workflow.ref(a), 20)
    d = wt.Pair.s(workflow.ref(b), workflow.ref(c))
    return a, b, c, d


@pytest.fixture
def broker(memory_broker, records_url):
    """The in-memory broker, with the records store made (its schema
    migrations are logged once, on first use)."""
    records.store().migrate()
    return memory_broker


def test_list_is_a_table_filtered_by_status_and_json_on_request(broker, capsys):
    done = workflow.submit(workflow.group(*diamond()))
    work(broker)
    running = workflow.submit(workflow.chain(wt.Add.s(1), wt.Add.s(1)), labels={'team': 'x'})
    code, out, _ = run(capsys, 'workflows', 'list')
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ['ID', 'STATUS', 'SUCCEEDED', 'FAILED', 'CREATED',
                                              'LABELS']
    rows = {line.split()[0]: line.split()[1:4] for line in lines[1:]}
    assert rows == {done.id: ['succeeded', '4/4', '0'], running.id: ['running', '0/2', '0']}
    code, out, _ = run(capsys, 'workflows', 'list', '--status', 'running', '--json')
    [listed] = json.loads(out)
    assert code == 0 and listed['id'] == running.id and listed['labels'] == {'team': 'x'}
    assert listed['node_states'] == {'queued': 1, 'pending': 1}
    _, out, _ = run(capsys, 'workflows', 'list', '--status', 'cancelled')
    assert out.strip() == 'no workflows cancelled'


def test_list_refuses_a_bad_status_in_one_line(broker, capsys):
    code, out, err = run(capsys, 'workflows', 'list', '--status', 'done')
    assert code == 1 and out == ''
    assert err.splitlines() == ["kale: error: workflow status must be one of running, succeeded, "
                                "failed, cancelled, got 'done'"]


@pytest.fixture
def half_done_diamond(memory_broker, any_records_url):
    """The diamond with a, b and c (queue 'default') run, d (queue 'low') queued."""
    nodes = diamond()
    wf = workflow.submit(workflow.group(*reversed(nodes)))
    work(memory_broker, queues=['default'])
    return wf, nodes


def test_show_lists_the_nodes_roots_first_with_states_and_upstream(half_done_diamond, capsys):
    wf, (a, b, c, d) = half_done_diamond
    code, out, _ = run(capsys, 'workflows', 'show', wf.id)
    assert code == 0
    head, nodes = out.split('\n\n')
    assert head.splitlines()[:2] == ['id           %s' % wf.id, 'status       running']
    assert 'nodes        4: queued 1, succeeded 3' in head
    lines = nodes.splitlines()
    assert lines[0].split() == ['TASK', 'ID', 'TASK', 'QUEUE', 'STATE', 'UPSTREAM', 'REASON']
    cells = [line.split() for line in lines[1:]]
    order = [row[0] for row in cells]
    assert order[0] == a.task_id and set(order[1:3]) == {b.task_id, c.task_id} and \
        order[3] == d.task_id
    assert cells[0][1:5] == ['tests.workflow_tasks.Add', 'default', 'succeeded', '-']
    assert cells[-1][1:5] == ['tests.workflow_tasks.Pair', 'low', 'queued',
                              '%s,%s' % (b.task_id[:8], c.task_id[:8])]


def test_show_json_is_the_description_with_its_edges(half_done_diamond, capsys):
    wf, (a, b, c, d) = half_done_diamond
    code, out, _ = run(capsys, 'workflows', 'show', wf.id, '--json')
    shown = json.loads(out)
    assert code == 0 and shown['id'] == wf.id and shown['status'] == 'running'
    assert sorted(shown['edges']) == sorted([[a.task_id, b.task_id], [a.task_id, c.task_id],
                                             [b.task_id, d.task_id], [c.task_id, d.task_id]])
    assert {n['task_id']: n['state'] for n in shown['nodes']}[d.task_id] == 'queued'


def test_nodes_are_put_roots_first_whatever_order_they_come_in():
    def node(task_id, upstream, downstream):
        return {'task_id': task_id, 'upstream': upstream, 'downstream': downstream}
    given = [node('d', ['b', 'c'], []), node('c', ['a'], ['d']), node('b', ['a'], ['d']),
             node('a', [], ['b', 'c']), node('e', [], [])]
    assert [n['task_id'] for n in roots_first(given)] == ['a', 'e', 'c', 'b', 'd']


def test_cancel_cancels_a_running_workflow_and_its_published_task(broker, capsys):
    first = wt.Add.s(1)
    wf = workflow.submit(workflow.chain(first, wt.Add.s(1), wt.Add.s(1)))
    code, out, _ = run(capsys, 'workflows', 'cancel', wf.id, '--json')
    cancelled = json.loads(out)
    assert code == 0 and cancelled['status'] == 'cancelled' and cancelled['cancelled_nodes'] == 3
    assert wf.status() == 'cancelled' and records.get(first.task_id).status == 'cancelled'
    code, out, _ = run(capsys, 'workflows', 'cancel', wf.id)
    assert code == 0
    assert out.strip() == 'workflow %s: cancelled; 0 nodes cancelled now (cancelled 3)' % wf.id


def test_cancel_leaves_an_ended_workflow_as_it_is(broker, capsys):
    wf = workflow.submit(wt.Add.s(1))
    work(broker)
    code, out, _ = run(capsys, 'workflows', 'cancel', wf.id)
    assert code == 0 and out.strip() == ('workflow %s: succeeded; 0 nodes cancelled now '
                                         '(succeeded 1); it had already ended' % wf.id)


def test_retry_runs_a_failed_workflow_again_and_refuses_a_running_one(broker, capsys):
    wt.FAILING.clear()
    wt.FAILING.add(2)
    first, second = wt.Tally.s(1), wt.Tally.s(2)
    wf = workflow.submit(workflow.chord(workflow.group(first, second), wt.TallyTotal.s()))
    work(broker)
    assert wf.status() == 'failed'
    wt.FAILING.clear()
    code, out, _ = run(capsys, 'workflows', 'retry', wf.id)
    assert code == 0
    assert out.strip() == ('workflow %s: running; 2 nodes to run again, 1 succeeded kept '
                           '(pending 1, queued 1, succeeded 1)' % wf.id)
    code, out, err = run(capsys, 'workflows', 'retry', wf.id)
    assert code == 1 and out == ''
    assert err.splitlines() == ['kale: error: workflow %s cannot be retried: it is running (only '
                                'a failed or cancelled one can be)' % wf.id]
    work(broker)
    assert wf.result() == 6 and records.get(second.task_id).attempts == 2
    workflow.cancel(workflow.submit(wt.Tally.s(3)).id)
    cancelled = workflow.list_workflows(status='cancelled')[0]['id']
    code, out, _ = run(capsys, 'workflows', 'retry', cancelled, '--json')
    answer = json.loads(out)
    assert code == 0 and answer['status'] == 'running' and answer['nodes_run_again'] == 1


@pytest.mark.parametrize('command', ['show', 'cancel', 'retry'])
def test_an_unknown_id_is_one_line_naming_it(broker, capsys, command):
    code, out, err = run(capsys, 'workflows', command, 'no-such-workflow')
    assert code == 1 and out == ''
    assert err.splitlines() == ['kale: error: no workflow no-such-workflow in the task records']


def test_without_records_url_the_command_says_what_is_missing():
    result = console_script('workflows', 'list', KALE_TEST_RECORDS_URL='')
    assert result.stdout == ''
    assert one_line_error(result).startswith('workflows keep their state in the task records: '
                                             'set RECORDS_URL')


def test_kale_help_lists_the_command_and_it_explains_itself():
    listed = console_script('--help')
    assert listed.returncode == 0
    assert any(line.split()[:1] == ['workflows'] for line in listed.stdout.splitlines())
    explained = console_script('workflows', '--help')
    assert explained.returncode == 0 and 'RECORDS_URL' in explained.stdout
    for command in ('list', 'show', 'cancel', 'retry'):
        assert command in explained.stdout
