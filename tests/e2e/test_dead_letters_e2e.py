"""Dead-letter handlers with real `kale worker` processes over HTTP against
the embedded endpoint: a task that fails for good gets its dead run from
`kale worker --dead-letters`; a class without a handler, and a dead run that
fails for good, leave plain dead letters."""
from __future__ import annotations

import pytest

from kale import records
from kale.conf import settings
from kale.worker import Worker
from tests import dead_letter_tasks as dt
from tests.e2e import test_dashboard
from tests.support.processes import WorkerProcess, dead_letters, events
from tests.support.records import recorded_ids

pytestmark = pytest.mark.slow

#: The dashboard tests' Chromium and `kale web` process.
web, open_dashboard = test_dashboard.web, test_dashboard.open_dashboard


def work(broker, dead_letters=False):
    assert Worker(queue_names=['default'], burst=True, broker=broker,
                  dead_letters=dead_letters).run() == 0


def test_kale_worker_dead_letters_runs_the_dead_runs_of_tasks_that_failed_for_good(
        sqs, record, records_url, tmp_path):
    paid = dt.PaymentTask.publish(None, 'o-e2e', amount=4)
    hopeless = dt.HopelessTask.publish(None, 8)
    plain = dt.NoHandlerTask.publish(None, 2)
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst')
    assert worker.wait(60) == 0, worker.output()
    assert sorted(recorded_ids(record, 'start')) == sorted([paid, hopeless, plain])
    assert recorded_ids(record, 'dead') == []
    assert sqs.count('dlq-default-runs') == 2, worker.output()
    dead_worker = WorkerProcess(tmp_path, '--queues', 'default', '--dead-letters', '--burst')
    assert dead_worker.wait(60) == 0, dead_worker.output()
    assert 'serving queues dlq-default-runs' in dead_worker.output()
    [done] = events(record, 'dead_done')
    dead_id = done[1]
    assert done[4] == paid
    runs = [r for r in events(record, 'dead') if r[1] == dead_id]
    assert [r[4:] for r in runs] == [[paid, 'o-e2e', '4',
                                      'non_retriable:_NonRetriableTaskError:_card_o-e2e_refused']] * 2
    assert (records.get(paid).status, records.get(paid).dead_of) == ('failed', None)
    dead = records.get(dead_id)
    assert (dead.status, dead.dead_of, dead.attempts) == ('succeeded', paid, 2)
    # The handler of HopelessTask failed too (retried once): a plain dead
    # letter, as is NoHandlerTask's, and nothing is left on the dead-run side.
    letters = dead_letters(sqs, 'default')
    by_task = {sqs.decode(m['Body'], 'dlq-default-runs' if 'kale_dead_of' in m[
        'MessageAttributes'] else 'default').task_name: m for m in letters}
    assert set(by_task) == {dt.HopelessTask.task_path(), dt.NoHandlerTask.task_path()}
    attributes = by_task[dt.HopelessTask.task_path()]['MessageAttributes']
    assert attributes['kale_dead_of']['StringValue'] == hopeless
    assert attributes['kale_dead_letter_reason']['StringValue'].startswith(
        'retries_exhausted: RuntimeError: handler broke too')
    assert sqs.count('dlq-default-runs') == 0


def test_the_dashboard_links_a_dead_run_to_the_task_it_handles(browser, web, memory_broker,
                                                               records_url, record):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        task_id = dt.PaymentTask.publish(None, 'o-web')
        work(memory_broker)
        work(memory_broker, dead_letters=True)
    [dead_id] = recorded_ids(record, 'dead_done')
    assert records.get(dead_id).dead_of == task_id
    page = open_dashboard(browser, web, 'tasks')           # every status
    try:
        page.click('#tasks tr[data-id="%s"] a.id' % dead_id)
        page.wait_for_selector('#detail dl.facts')
        facts = page.inner_text('#detail dl.facts')
        assert 'dead run of' in facts and task_id in facts, facts
        page.click('#detail dl.facts a.id:has-text("%s")' % task_id)
        page.wait_for_function("(id) => (document.getElementById('detail-id') || {}).textContent"
                               " === id", arg=task_id)
        assert 'non_retriable: NonRetriableTaskError' in page.inner_text('#detail dl.facts')
    finally:
        page.close()
