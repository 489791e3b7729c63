"""The dashboard in a real headless Chromium, served by a real `kale web`
process: it shows the counts, queues, workers and failures of real records,
and its retry button publishes a failed task again."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from kale import records
from tests import records_tasks as rt
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.work import work

pytestmark = pytest.mark.slow

#: Set to a path (e.g. docs/dashboard.png) to keep the test's screenshot there.
SCREENSHOT_VARIABLE = 'KALE_DASHBOARD_SCREENSHOT'


@pytest.fixture
def web(sqs, records_url):
    """`kale web --port 0` on this test's records and queues; yields its URL."""
    process = subprocess.Popen([sys.executable, '-m', 'kale', 'web', '--port', '0'], cwd=ROOT,
                               env=subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    line = process.stdout.readline()          # the line that says where it listens
    match = re.search(r'at (http://\S+/) and', line)
    assert match, 'kale web said %r' % line
    yield match.group(1)
    process.terminate()
    process.wait(10)


@pytest.fixture
def some_records(memory_broker, records_url):
    rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(6)], labels={'tenant': 't1'})
    failed = rt.BrokenTask.publish(None, labels={'tenant': 't2'})
    work(memory_broker)
    rt.PlainTask.publish(None, 99)              # stays queued
    records.get(failed)
    return failed


def test_the_dashboard_shows_the_records_and_retries_a_failure(browser, web, some_records):
    page = browser.new_page(viewport={'width': 1280, 'height': 1000})
    try:
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        cards = {card.get_attribute('data-status'): card.query_selector('.n').inner_text()
                 for card in page.query_selector_all('#counts .card')}
        assert cards['succeeded'] == '6' and cards['failed'] == '1' and cards['queued'] == '1'
        page.wait_for_selector('#queues tbody tr')
        assert 'default' in page.inner_text('#queues')
        assert 'stopped' in page.inner_text('#workers')
        assert 'ValueError: bad input 42' in page.inner_text('#tasks')
        assert page.query_selector('#chart-throughput svg polyline') is not None
        keep = os.environ.get(SCREENSHOT_VARIABLE)
        if keep:
            page.screenshot(path=os.path.join(ROOT, keep), full_page=True)
        page.click('#tasks button:has-text("retry")')
        page.wait_for_selector('#banner:has-text("published again as")')
        new_id = page.inner_text('#banner').split()[-1]
        assert records.get(new_id).labels['retry_of'] == some_records
    finally:
        page.close()


def test_the_page_loads_with_no_console_error_and_no_csp_violation(browser, web,
                                                                   some_records):
    """The page draws its cards, tables and charts (a legend with its
    swatches) under its own Content-Security-Policy: nothing is blocked."""
    page = browser.new_page(viewport={'width': 1280, 'height': 1000})
    errors = []
    page.on('console', lambda message: errors.append(message.text)
            if message.type == 'error' else None)
    page.on('pageerror', lambda exc: errors.append(str(exc)))
    page.on('response', lambda r: errors.append('%d %s' % (r.status, r.url)) if r.status >= 400 else None)
    try:
        page.add_init_script("window.__violations = []; document.addEventListener("
                             "'securitypolicyviolation', (e) => window.__violations.push("
                             "e.violatedDirective + ' ' + e.blockedURI));")
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.wait_for_selector('.legend i')
        assert page.evaluate('window.__violations') == []
        assert errors == []
        color = page.eval_on_selector('#counts .card[data-status=failed] .n',
                                      'node => getComputedStyle(node).color')
        assert color == 'rgb(197, 48, 48)'             # --failed, from the stylesheet
        swatch = page.eval_on_selector('.legend i',
                                       'node => getComputedStyle(node).backgroundColor')
        assert swatch != 'rgba(0, 0, 0, 0)'
    finally:
        page.close()


def test_search_by_label_and_by_task_id(browser, web, some_records):
    page = browser.new_page()
    try:
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.fill('#search-text', 'tenant=t2')
        page.click('#search button[type=submit]')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 1")
        page.fill('#search-text', some_records[:8])           # a unique prefix of the id
        page.click('#search button[type=submit]')
        page.wait_for_selector('#detail:not([hidden])')
        assert page.inner_text('#detail-id') == some_records
        assert 'ValueError: bad input 42' in page.inner_text('#detail-body')
    finally:
        page.close()


def test_the_cancel_button_cancels_a_queued_task_and_the_page_refreshes_itself(
        browser, web, some_records):
    page = browser.new_page()
    try:
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.click('#tabs button[data-status=pending]')
        page.click('#tasks button:has-text("cancel")')
        page.wait_for_selector('#banner:has-text("cancelled ")')
        cancelled = page.inner_text('#banner').split()[-1]
        assert records.get(cancelled).status == 'cancelled'
        queued = "document.querySelector('#counts .card[data-status=queued] .n').innerText"
        page.wait_for_function('() => %s === "0"' % queued)
        rt.PlainTask.publish(None, 7)              # no reload: the page's own timer shows it
        page.wait_for_function('() => %s === "1"' % queued, timeout=10000)
    finally:
        page.close()


def test_a_delayed_task_shows_when_it_is_due(browser, web, some_records):
    delayed = rt.PlainTask.publish(None, 8, delay_sec=600)
    due = records.get(delayed).next_attempt_at
    assert due is not None and due > records.get(delayed).published_at + 590
    page = browser.new_page()
    try:
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.click('#tabs button[data-status=pending]')
        row = page.wait_for_selector('#tasks tbody tr:has-text("%s")' % delayed[:16])
        assert re.search(r'due in (9|10)m', row.inner_text()), row.inner_text()
        assert row.query_selector('.due').get_attribute('title')       # the time, on hover
    finally:
        page.close()


# --- the task detail, filters, paging, bulk actions -----------------------------------------

def confirm_the_second_time(page):
    """Answer the page's confirmations: no to the first, yes to the others;
    returns the list their questions go into."""
    asked = []

    def answer(dialog):
        asked.append(dialog.message)
        dialog.accept() if len(asked) > 1 else dialog.dismiss()
    page.on('dialog', answer)
    return asked


def open_dashboard(browser, web):
    page = browser.new_page(viewport={'width': 1400, 'height': 1100})
    page.goto(web)
    page.wait_for_selector('body[data-loaded=true]', timeout=15000)
    return page


def test_the_task_page_shows_arguments_traceback_and_every_attempt(browser, web, memory_broker,
                                                                  records_url):
    from kale.conf import settings
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0, RETRY_DELAY_JITTER=0):
        task_id = rt.TwiceBrokenTask.publish(None, labels={'tenant': 't9'})
        work(memory_broker)
    broken = rt.BrokenTask.publish(None)
    work(memory_broker)
    records.get(broken)
    page = open_dashboard(browser, web)
    try:
        page.click('#tabs button[data-status=""]')
        page.click('#tasks tr[data-id="%s"] a.id' % task_id)
        page.wait_for_selector('#detail:not([hidden]) table.attempts')
        rows = [row.inner_text() for row in page.query_selector_all('#detail table.attempts tbody tr')]
        assert [row.split('\t')[:2] for row in rows] == [['1', 'failed'], ['2', 'failed'],
                                                         ['3', 'succeeded']]
        assert 'attempt 1 fails' in rows[0] and '@' in rows[0]          # its worker's id
        assert [row.split('\t')[-1].strip() for row in rows] == ['0 s', '0 s', '']   # retried after
        assert '"args": []' in page.inner_text('#detail-body')
        page.click('#tasks tr[data-id="%s"] a.id' % broken)
        page.wait_for_selector('#detail pre.traceback')
        assert 'Traceback (most recent call last)' in page.inner_text('#detail pre.traceback')
        # The detail's retry button, clicked twice: one new task.
        page.click('#detail-actions button:has-text("retry")')
        page.wait_for_function("() => document.getElementById('banner').innerText !== ''")
        said = page.inner_text('#banner')
        assert 'published again as' in said, said
        first = said.split()[-1]
        api = page.evaluate("""(id) => fetch('api/tasks/' + id + '/retry',
                                      {method: 'POST', headers: {'X-Kale-Request': '1'}})
                                .then((r) => r.json())""", broken)
        assert api['id'] == first and api['published'] is False
        assert records.get(broken).retried_as == first
        from kale.records.queries import TaskFilter
        assert records.queries().count(TaskFilter(labels=(('retry_of', broken),))) == 1
    finally:
        page.close()


def test_full_ids_filters_sorting_paging_and_cards_that_follow_the_filter(browser, web,
                                                                          some_records):
    rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(30)], labels={'tenant': 't3'})
    records.get(some_records)
    page = open_dashboard(browser, web)
    try:
        page.click('#tabs button[data-status=""]')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 25")
        first_id = page.get_attribute('#tasks tbody tr', 'data-id')
        assert page.inner_text('#tasks tbody tr a.id') == first_id and len(first_id) == 32
        assert page.get_attribute('#tasks tbody tr time', 'title')        # absolute, on hover
        assert 'showing 25 of 38' in page.inner_text('#shown')
        page.click('#more')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 38")
        assert page.is_hidden('#more')
        page.click('#tasks th[data-sort=attempts]')
        page.click('#tasks th[data-sort=attempts]')                        # descending
        assert page.inner_text('#tasks tbody tr td:nth-child(4)') == '1'
        page.fill('#filter-task', 'BrokenTask')
        page.click('#filters button[type=submit]')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 1")
        cards = "document.querySelector('#counts .card[data-status=%s] .n').innerText"
        page.wait_for_function('() => %s === "0"' % (cards % 'succeeded'))          # the filter's counts
        assert page.inner_text('#counts .card[data-status=failed] .n') == '1'
        page.fill('#filter-task', '')
        page.select_option('#filter-queue', 'default')
        page.click('#filters button[type=submit]')
        page.wait_for_function('() => %s === "6"' % (cards % 'succeeded'))
    finally:
        page.close()


def test_bulk_retry_and_a_queue_purge_with_its_name_typed(browser, web, memory_broker,
                                                          records_url):
    failed = [rt.BrokenTask.publish(None) for _ in range(3)]
    work(memory_broker)
    waiting = rt.PlainTask.publish(None, 5)
    records.get(waiting)
    page = open_dashboard(browser, web)
    answers = iter(['wrong', 'default'])
    page.on('dialog', lambda dialog: dialog.accept(next(answers, '')) if dialog.type == 'prompt'
            else dialog.accept())
    try:
        page.wait_for_selector('#bulk-retry:not([hidden])')
        page.click('#bulk-retry')
        page.wait_for_selector('#banner:has-text("published 3 again")')
        assert all(records.get(task_id).retried_as for task_id in failed)
        page.click('#bulk-retry')
        page.wait_for_selector('#banner:has-text("published 0 again; 3 retried before")')
        page.click('#queues tr[data-queue=default] button.danger')
        page.wait_for_selector('#banner:has-text("purge of default cancelled")')
        assert records.get(waiting).status == 'queued'
        page.click('#queues tr[data-queue=default] button.danger')
        page.wait_for_selector('#banner:has-text("purged default")')
        assert records.get(waiting).status == 'purged'
    finally:
        page.close()


def test_old_stopped_workers_are_collapsed_and_a_quiet_system_still_charts(browser, web,
                                                                           records_url):
    import time
    store = records.store()
    now = time.time()
    old = {'id': 'h:1@old', 'role': 'worker', 'host': 'h', 'pid': 1, 'queues': [],
           'version': '0', 'started_at': now - 5 * 86400, 'heartbeat_at': now - 3 * 86400,
           'heartbeat_sec': 15, 'stopped_at': now - 3 * 86400, 'counts': {}}
    store.write([], [], [old, dict(old, id='h:2@recent', pid=2, stopped_at=now - 60,
                                   heartbeat_at=now - 60)])
    finished = now - 5 * 3600                    # the last work, five hours ago
    store.write([{'id': 'quiet', 'task': 't.Quiet', 'queue': 'default', 'status': 'queued',
                  'attempts': 0, 'published_at': finished - 1, 'updated_at': finished - 1}],
                [{'id': 'quiet', 'task': 't.Quiet', 'queue': 'default', 'status': 'succeeded',
                  'attempts': 1, 'published_at': finished - 1, 'started_at': finished - 0.5,
                  'finished_at': finished, 'duration_sec': 0.5, 'updated_at': finished}], [])
    page = open_dashboard(browser, web)
    try:
        workers = page.inner_text('#workers tbody')
        assert 'h:2@recent' in workers and 'h:1@old' not in workers
        assert page.inner_text('#old-workers') == 'show 1 workers stopped more than a day ago'
        page.click('#old-workers')
        page.wait_for_function("() => document.querySelector('#workers tbody').innerText"
                               ".includes('h:1@old')")
        assert page.inner_text('.charts .window') == 'last day'
        assert page.query_selector('#chart-throughput svg polyline, #chart-throughput svg circle')
    finally:
        page.close()


#: Markup that runs script if a page ever treats it as HTML.
HOSTILE = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def test_markup_in_every_stored_field_is_shown_as_text_and_never_runs(browser, web,
                                                                       records_url):
    import time
    now = time.time()
    store = records.store()
    store.write([], [{'id': 'xss-task', 'task': 'app.' + HOSTILE, 'queue': HOSTILE,
                      'status': 'failed', 'attempts': 1, 'published_at': now - 5,
                      'started_at': now - 4, 'finished_at': now - 3, 'updated_at': now - 3,
                      'labels': {'tenant': HOSTILE, HOSTILE[:20]: 'x'},
                      'inputs': {'args': [HOSTILE], 'kwargs': {'k': HOSTILE}},
                      'worker': HOSTILE[:150], 'error_type': HOSTILE,
                      'error_message': HOSTILE, 'error_traceback': 'Traceback\n' + HOSTILE,
                      'dead_letter_reason': HOSTILE, 'result': HOSTILE,
                      'stderr': 'the program said ' + HOSTILE}],
                [{'id': HOSTILE[:150], 'role': 'worker', 'host': HOSTILE[:100], 'pid': 1,
                  'queues': [HOSTILE], 'version': '1', 'started_at': now,
                  'heartbeat_at': now, 'heartbeat_sec': 10.0, 'current_task': 'xss-task',
                  'current_task_name': HOSTILE}], attempt_rows=[])
    page = open_dashboard(browser, web)
    try:
        page.click('#tabs button[data-status=""]')
        page.wait_for_selector('#tasks tr[data-id="xss-task"]')
        page.click('#tasks tr[data-id="xss-task"] a.id')
        page.wait_for_selector('#detail pre.traceback')
        assert HOSTILE in page.inner_text('#detail')              # shown, as text
        assert page.inner_text('#detail pre.stderr') == 'the program said ' + HOSTILE
        assert HOSTILE in page.inner_text('#tasks')
        assert HOSTILE[:100] in page.inner_text('#workers')
        assert page.evaluate('window.__xss') is None
        assert page.query_selector('img[src="x"]') is None
        assert page.query_selector('body script:not([src])') is None
    finally:
        page.close()


def test_an_executor_task_is_shown_by_its_program_name(browser, web, records_url):
    """``executor:resize.sh`` reads as resize.sh, not as its extension."""
    import time
    now = time.time()
    records.store().write([], [{'id': 'exec-task', 'task': 'executor:resize.sh',
                                'queue': 'default', 'status': 'succeeded', 'attempts': 1,
                                'published_at': now - 3, 'started_at': now - 2,
                                'finished_at': now - 1, 'updated_at': now - 1}],
                          [], attempt_rows=[])
    page = open_dashboard(browser, web)
    try:
        page.click('#tabs button[data-status=""]')
        page.wait_for_selector('#tasks tr[data-id="exec-task"]')
        row = page.inner_text('#tasks tr[data-id="exec-task"]')
        assert 'resize.sh' in row, row
    finally:
        page.close()


def test_a_page_on_another_site_cannot_change_anything(browser, web, memory_broker, records_url,
                                                       tmp_path):
    """The attack itself: the operator visits a page on another origin that
    submits a form and fires no-cors fetches at kale web."""
    import http.server
    import threading
    task_id = rt.PlainTask.publish(None, 5)
    records.get(task_id)
    target = web + 'api/tasks/%s/cancel' % task_id
    (tmp_path / 'evil.html').write_text(
        '<form method="POST" enctype="text/plain" action="%s"><input name="x" value="y"></form>'
        '<script>fetch("%s", {method: "POST", mode: "no-cors", body: "x"});'
        'fetch("%s", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}});'
        'setTimeout(() => document.forms[0].submit(), 200);</script>' % (target, target, target))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(('127.0.0.2', 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = browser.new_page()
    try:
        page.goto('http://127.0.0.2:%d/evil.html' % server.server_address[1])
        page.wait_for_url(target, timeout=10000)          # the form was submitted
        assert 'another site' in page.inner_text('body') or 'X-Kale-Request' in page.inner_text(
            'body')
    finally:
        page.close()
        server.shutdown()
    assert records.get(task_id).status == 'queued'


# --- workflows ---------------------------------------------------------------------------------

def run_workflows(tmp_path, *flows):
    """Each workflow's final status, its nodes run by a real `kale worker`
    (in this process, Playwright's event loop would be taken for the worker's)."""
    import signal

    from tests.support.processes import WorkerProcess
    worker = WorkerProcess(tmp_path, '--queues', 'default,low')
    try:
        return [flow.wait(60) for flow in flows]
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output()


def drawn_nodes(page):
    """{task id: the state written in its box} of the workflow's graph."""
    return {box.get_attribute('data-task-id'): box.query_selector('text.state').text_content()
            for box in page.query_selector_all('#workflow svg g.node')}


#: For each edge drawn: does it start on its upstream box's right side and end
#: on its downstream box's left side?
EDGES_JOIN_BOXES = """() => [...document.querySelectorAll('#workflow svg path.edge')].map((edge) => {
    const box = (id) => document.querySelector('#workflow svg g.node[data-task-id="' + id + '"]')
        .getBoundingClientRect();
    const from = box(edge.dataset.from); const to = box(edge.dataset.to);
    const start = edge.getPointAtLength(0); const end = edge.getPointAtLength(edge.getTotalLength());
    const at = (point) => edge.ownerSVGElement.getBoundingClientRect();
    const x = (p) => at(p).left + p.x; const y = (p) => at(p).top + p.y;
    const near = (a, b) => Math.abs(a - b) < 1.5;
    return [edge.dataset.from, edge.dataset.to,
            near(x(start), from.right) && y(start) > from.top && y(start) < from.bottom
            && near(x(end), to.left) && y(end) > to.top && y(end) < to.bottom];
})"""


def test_a_workflow_is_drawn_as_its_graph_and_a_node_opens_its_task(browser, web, records_url,
                                                                    tmp_path):
    from kale import workflow
    from tests import workflow_tasks as wt
    a = wt.Add.s(1, 2)
    b, c = wt.Add.s(workflow.ref(a), 10), wt.Add.s(workflow.ref(a), 20)
    d = wt.Pair.s(workflow.ref(b), workflow.ref(c))
    diamond = workflow.submit(workflow.group(a, b, c, d))
    first, broken, after = wt.Add.s(1), wt.Broken.s(), wt.Add.s(1)
    failing = workflow.submit(workflow.chain(first, broken, after))
    assert run_workflows(tmp_path, diamond, failing) == ['succeeded', 'failed']
    page = open_dashboard(browser, web)
    try:
        row = page.wait_for_selector('#workflows tr[data-id="%s"]' % diamond.id)
        assert '4 succeeded' in row.inner_text() and 'succeeded' in row.query_selector(
            '.badge').inner_text()
        page.click('#workflows tr[data-id="%s"] a.id' % diamond.id)
        page.wait_for_selector('#workflow:not([hidden]) svg g.node')
        assert drawn_nodes(page) == {node.task_id: 'succeeded' for node in (a, b, c, d)}
        layers = {box.get_attribute('data-task-id'): box.get_attribute('data-layer')
                  for box in page.query_selector_all('#workflow svg g.node')}
        assert layers == {a.task_id: '0', b.task_id: '1', c.task_id: '1', d.task_id: '2'}
        assert page.text_content('#workflow svg g.node[data-task-id="%s"] text.task'
                                 % d.task_id) == 'Pair'
        edges = page.evaluate(EDGES_JOIN_BOXES)
        assert sorted((start, end) for start, end, _ in edges) == sorted([
            (a.task_id, b.task_id), (a.task_id, c.task_id),
            (b.task_id, d.task_id), (c.task_id, d.task_id)])
        assert all(joined for _, _, joined in edges), edges
        assert page.is_hidden('#workflow-cancel'), 'a workflow that ended cannot be cancelled'
        assert page.is_hidden('#workflow-retry'), 'nor retried, when it succeeded'
        page.click('#workflow svg g.node[data-task-id="%s"]' % d.task_id)
        page.wait_for_function("(id) => !document.getElementById('detail').hidden && "
                               "document.getElementById('detail-id').innerText === id", arg=d.task_id)
        assert 'tests.workflow_tasks.Pair' in page.inner_text('#detail-body')
        assert json.loads(page.text_content('#detail-body pre.json')) == \
            {'args': [13, 23], 'kwargs': {}}                  # b's and c's results, passed on

        page.click('#workflows tr[data-id="%s"] a.id' % failing.id)
        page.wait_for_function("(id) => document.getElementById('workflow-id').innerText === id",
                               arg=failing.id)
        assert drawn_nodes(page) == {first.task_id: 'succeeded', broken.task_id: 'failed',
                                     after.task_id: 'failed'}
        assert page.locator('#workflow svg path.edge').count() == 2
        assert page.get_attribute('#workflow svg g.node[data-task-id="%s"]' % broken.task_id,
                                  'class') == 'node failed link'
        nodes_table = page.inner_text('#workflow table.nodes')
        assert 'cannot use 1' in nodes_table and 'upstream_failed' in nodes_table
        assert '1 succeeded' in page.inner_text('#workflow-body') and \
            '2 failed' in page.inner_text('#workflow-body')
        assert page.is_visible('#workflow-retry'), 'a failed workflow can be retried'
    finally:
        page.close()


def test_a_running_workflow_is_cancelled_from_its_panel_after_a_confirmation(
        browser, web, records_url):
    from kale import workflow
    from tests import workflow_tasks as wt
    first, then = wt.Add.s(1), wt.Add.s(2)
    running = workflow.submit(workflow.chain(first, then), labels={'tenant': HOSTILE})
    page = open_dashboard(browser, web)
    asked = confirm_the_second_time(page)
    try:
        page.click('#workflows tr[data-id="%s"] a.id' % running.id)
        page.wait_for_selector('#workflow:not([hidden]) svg g.node')
        assert drawn_nodes(page) == {first.task_id: 'queued', then.task_id: 'pending'}
        assert page.get_attribute('#workflow svg g.node[data-task-id="%s"]' % then.task_id,
                                  'class') == 'node pending', 'no task yet: no link'
        assert HOSTILE in page.inner_text('#workflow-body')          # the label, as text
        page.click('#workflow-cancel')
        assert len(asked) == 1 and running.id in asked[0]
        assert running.status() == 'running', 'not confirmed: nothing changes'
        page.click('#workflow-cancel')
        page.wait_for_selector('#banner:has-text("cancelled workflow %s")' % running.id)
        assert running.status() == 'cancelled'
        assert drawn_nodes(page) == {first.task_id: 'cancelled', then.task_id: 'cancelled'}
        assert page.is_hidden('#workflow-cancel')
        assert records.get(first.task_id).status == 'cancelled'
        page.click('#workflow-tabs button[data-status=cancelled]')
        page.wait_for_function("() => document.querySelectorAll('#workflows tbody tr[data-id]')"
                               ".length === 1")
        assert page.evaluate('window.__xss') is None
        assert page.query_selector('img[src="x"]') is None
    finally:
        page.close()


def test_a_cancelled_workflow_is_retried_from_its_panel_after_a_confirmation(
        browser, web, records_url, tmp_path):
    from kale import workflow
    from tests import workflow_tasks as wt
    first, then = wt.Add.s(1), wt.Add.s(2)
    wf = workflow.submit(workflow.chain(first, then))
    workflow.cancel(wf.id)
    page = open_dashboard(browser, web)
    asked = confirm_the_second_time(page)
    try:
        page.click('#tabs button[data-status=succeeded]')        # a task tab adds no listener
        page.click('#workflows tr[data-id="%s"] a.id' % wf.id)
        page.wait_for_selector('#workflow:not([hidden]) svg g.node')
        assert page.is_hidden('#workflow-cancel') and page.is_visible('#workflow-retry')
        page.click('#workflow-retry')
        assert len(asked) == 1 and wf.id in asked[0]
        assert wf.status() == 'cancelled', 'not confirmed: nothing changes'
        page.click('#workflow-retry')
        page.wait_for_selector('#banner:has-text("retrying workflow %s")' % wf.id)
        assert len(asked) == 2 and wf.status() == 'running'
        assert drawn_nodes(page) == {first.task_id: 'queued', then.task_id: 'pending'}
        assert page.is_hidden('#workflow-retry') and page.is_visible('#workflow-cancel')
    finally:
        page.close()
    assert run_workflows(tmp_path, wf) == ['succeeded'] and wf.result() == 3


@pytest.fixture
def outbox_waiting(tmp_path, monkeypatch, memory_broker, records_url, settings_env):
    """An application database (OUTBOX_URL, also for `kale web`) holding two
    committed outbox rows no relay has sent."""
    from kale import outbox
    url = 'sqlite:///%s' % (tmp_path / 'app.db')
    engine = outbox.open_database(url)
    outbox.init(engine)
    with engine.begin() as conn:
        outbox.publish_batch(conn, rt.PlainTask, None, [((1,), {}), ((2,), {})])
    engine.dispose()
    settings_env(KALE_TEST_OUTBOX_URL=url)
    yield url


def test_the_queues_panel_shows_what_waits_in_the_outbox(browser, outbox_waiting, web):
    page = open_dashboard(browser, web)
    try:
        page.wait_for_selector('#outbox:not([hidden])')
        assert re.fullmatch(r'outbox: 2 waiting for the relay, the oldest waiting [0-9.]+ s',
                            page.inner_text('#outbox'))
    finally:
        page.close()


def test_a_webhooks_deliveries_show_each_attempts_answer_and_the_panel_disables_it(
        browser, web, memory_broker, records_url):
    """A delivery answered 503, then 200: the webhooks panel lists the
    webhook, its deliveries button finds the task, whose page shows both
    attempts (status, latency, the answer) and the result."""
    from kale import webhooks
    from kale.conf import settings
    from kale.webhooks import fanout, sender
    from tests.support.webhook_receiver import Receiver, Reply
    receiver = Receiver()
    receiver.answer('/hook', Reply(503, b'busy, come back'))
    try:
        with settings.override(WEBHOOK_ALLOWED_HOSTS=('127.0.0.1',), RETRY_DELAY_MULTIPLE_SEC=0):
            hook = webhooks.add('orders', receiver.url())
            [task_id] = fanout.deliver('orders', 'evt_1', {'order': 7})
            work(memory_broker)
    finally:
        sender.close()
        receiver.close()
    page = open_dashboard(browser, web)
    try:
        row = '#webhooks tr[data-webhook="%s"]' % hook.id
        page.wait_for_selector(row)
        assert 'orders' in page.inner_text(row) and 'active' in page.inner_text(row)
        page.click(row + ' button:has-text("deliveries")')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 1")
        page.click('#tasks tr[data-id="%s"] a.id' % task_id)
        page.wait_for_selector('#detail:not([hidden]) table.attempts')
        rows = [r.inner_text() for r in page.query_selector_all('#detail table.attempts tbody tr')]
        assert [r.split('\t')[:2] for r in rows] == [['1', 'failed'], ['2', 'succeeded']]
        assert re.search(r'WebhookDeliveryError: HTTP 503 in \d+ ms: busy, come back', rows[0])
        assert '"status": 200' in page.inner_text('#detail-body')
        page.click(row + ' button:has-text("disable")')
        page.wait_for_selector('#banner:has-text("disabled")')
        assert not webhooks.get(hook.id).active
        assert hook.secret not in page.content()
    finally:
        page.close()


def is_summary(request) -> bool:
    return '/api/tasks/summary' in request.url


def test_an_unchanged_refresh_asks_with_its_etag_and_gets_a_304(browser, web, some_records):
    """The refresh sends each answer's ETag back: the summary and the
    timeline, unchanged, come back as 304s and the counts stay drawn."""
    page = browser.new_page()
    try:
        with page.expect_response(lambda r: is_summary(r) and r.status == 304,
                                  timeout=20000) as summary, \
                page.expect_response(lambda r: '/api/timeline' in r.url and r.status == 304,
                                     timeout=20000):
            page.goto(web)
        assert summary.value.request.headers['if-none-match'].startswith('W/"')
        assert page.inner_text('#counts .card[data-status=succeeded] .n') == '6'
    finally:
        page.close()


def set_visibility(page, state: str) -> None:
    page.evaluate("(state) => { Object.defineProperty(document, 'visibilityState', "
                  "{configurable: true, get: () => state}); "
                  "document.dispatchEvent(new Event('visibilitychange')); }", state)


def test_no_refresh_while_the_tab_is_hidden_and_one_at_once_when_shown(browser, web,
                                                                      some_records):
    page = browser.new_page()
    asked = []
    page.on('request', lambda request: asked.append(request.url) if is_summary(request) else None)
    try:
        start = time.time()
        page.clock.install(time=start)
        page.clock.pause_at(start + 1)              # the page's timers wait for run_for
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.wait_for_selector('body[data-refresh-ms]')        # the next refresh is set
        with page.expect_request(is_summary):                   # the page's own clock drives it
            page.clock.run_for(3500)
        page.wait_for_load_state('networkidle')
        set_visibility(page, 'hidden')
        page.wait_for_load_state('networkidle')
        before = len(asked)
        page.clock.run_for(120_000)                             # forty refreshes' worth
        page.evaluate('1')                                      # its requests seen by now
        assert len(asked) == before
        with page.expect_request(is_summary):
            set_visibility(page, 'visible')
    finally:
        page.close()


def test_a_slow_refresh_doubles_the_pause_before_the_next(browser, web, some_records):
    """A refresh whose answers take over a second (on the page's clock) is
    followed by a pause of twice REFRESH_MS; a quick one brings it back."""
    page = browser.new_page()
    held = []
    try:
        start = time.time()
        page.clock.install(time=start)
        page.clock.pause_at(start + 1)
        page.goto(web)
        page.wait_for_selector('body[data-refresh-ms="3000"]', timeout=15000)
        page.route('**/api/tasks/summary*', lambda route: held.append(route))  # answered later
        page.clock.run_for(3500)                                 # the next refresh starts
        while not held:
            page.wait_for_timeout(50)
        page.clock.run_for(1500)                                 # the answer takes 1.5 s
        held[0].continue_()
        page.unroute('**/api/tasks/summary*')
        page.wait_for_selector('body[data-refresh-ms="6000"]')
        with page.expect_request(is_summary):
            page.clock.run_for(6500)
        page.wait_for_selector('body[data-refresh-ms="3000"]')
    finally:
        page.close()
