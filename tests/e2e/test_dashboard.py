"""The dashboard in a real headless Chromium, served by a real `kale web`
process: each view at its own address (deep links, back and forward), the
counts, queues, workers and failures of real records, its actions (retry,
cancel, purge, pause a queue, stop a worker: the last two on real workers),
and no console error or CSP violation on any view."""
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


#: The bearer token of `kale web` in the tests that set one.
WEB_TOKEN = 'dashboard-test-token-0123456789'


def serve_web(*options):
    """`kale web --port 0` with ``options``, on this test's records and
    queues; yields its URL, then stops it."""
    process = subprocess.Popen([sys.executable, '-m', 'kale', 'web', '--port', '0', *options],
                               cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    line = process.stdout.readline()          # the line that says where it listens
    match = re.search(r'at (http://\S+/) and', line)
    assert match, 'kale web said %r' % line
    yield match.group(1)
    process.terminate()
    process.wait(60)


@pytest.fixture
def web(sqs, records_url):
    """`kale web --port 0` on this test's records and queues; yields its URL."""
    yield from serve_web()


@pytest.fixture
def web_with_token(sqs, records_url):
    """As ``web``, its API guarded by the bearer token WEB_TOKEN."""
    yield from serve_web('--token', WEB_TOKEN)


@pytest.fixture
def some_records(memory_broker, records_url):
    rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(6)], labels={'tenant': 't1'})
    failed = rt.BrokenTask.publish(None, labels={'tenant': 't2'})
    work(memory_broker)
    rt.PlainTask.publish(None, 99)              # stays queued
    records.get(failed)
    return failed


def attempt_rows(page):
    """The attempts table's rows, each a list of its cells' text, read in one
    go: the page's refresh may replace the table between two reads (a row
    that left the page has no layout, so its inner text loses its tabs)."""
    return page.eval_on_selector_all(
        '#detail table.attempts tbody tr',
        'rows => rows.map(row => Array.from(row.cells, cell => cell.innerText.trim()))')


def open_view(page, web, view):
    """Open the view at ``#/view`` and wait until its data is shown."""
    page.goto(web + '#/' + view)
    page.wait_for_selector('body[data-loaded=true]', timeout=15000)


def open_dashboard(browser, web, view='', width=1400, height=1100):
    page = browser.new_page(viewport={'width': width, 'height': height})
    open_view(page, web, view)
    return page


def watch_errors(page):
    """Every console error, page error, failed response and CSP violation of
    ``page`` from now on, in the list returned (the violations are read from
    the page: call ``violations(page)``)."""
    errors = []
    page.on('console', lambda message: errors.append(message.text)
            if message.type == 'error' else None)
    page.on('pageerror', lambda exc: errors.append(str(exc)))
    page.on('response', lambda r: errors.append('%d %s' % (r.status, r.url))
            if r.status >= 400 else None)
    page.add_init_script("window.__violations = []; document.addEventListener("
                         "'securitypolicyviolation', (e) => window.__violations.push("
                         "e.violatedDirective + ' ' + e.blockedURI));")
    return errors


def test_the_dashboard_shows_the_records_and_retries_a_failure(browser, web, some_records):
    page = browser.new_page(viewport={'width': 1280, 'height': 1000})
    try:
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        cards = {card.get_attribute('data-status'): card.query_selector('.n').inner_text()
                 for card in page.query_selector_all('#counts .card')}
        assert cards['succeeded'] == '6' and cards['failed'] == '1' and cards['queued'] == '1'
        page.wait_for_selector('#queues tbody tr[data-queue]')
        assert 'default' in page.inner_text('#queues')
        assert 'ValueError: bad input 42' in page.inner_text('#tasks')
        for chart in ('chart-queue-throughput', 'chart-queue-duration', 'chart-failures',
                      'chart-throughput', 'chart-duration'):
            assert page.query_selector('#%s canvas' % chart) is not None, chart
        legend = page.inner_text('#chart-throughput')
        assert 'PlainTask' in legend and 'BrokenTask' in legend        # the series, named
        assert 'failed' in page.inner_text('#chart-failures')
        assert 'retried' in page.inner_text('#chart-failures')
        open_view(page, web, 'workers')
        assert 'stopped' in page.inner_text('#workers')
        open_view(page, web, 'tasks?status=failed')
        keep = os.environ.get(SCREENSHOT_VARIABLE)
        if keep:
            page.screenshot(path=os.path.join(ROOT, keep), full_page=True)
        page.click('#tasks button:has-text("retry")')
        page.wait_for_selector('#banner:has-text("published again as")')
        new_id = page.inner_text('#banner').split()[-1]
        assert records.get(new_id).labels['retry_of'] == some_records
    finally:
        page.close()


#: Every view, by its address (the task's and the workflow's are added by the test).
VIEWS = ['', 'tasks', 'tasks?status=failed&queue=default&since=3600&sort=-attempts',
         'workflows', 'workflows?status=failed', 'queues', 'queues/default', 'workers',
         'schedules', 'webhooks', 'no-such-view']


@pytest.mark.parametrize('width', [1366, 390])
def test_every_view_loads_with_no_console_error_and_no_csp_violation(browser, web,
                                                                    some_records, width):
    """Each view draws its cards, tables and charts (legends naming their
    series) under its own Content-Security-Policy, at a laptop's width and
    at a phone's, without the page scrolling sideways (wide tables scroll
    in their panel)."""
    from kale import workflow
    from tests import workflow_tasks as wt
    flow = workflow.submit(workflow.chain(wt.Add.s(1), wt.Add.s(2)))
    worker_id = records.queries().workers()[0].id
    page = browser.new_page(viewport={'width': width, 'height': 900})
    errors = watch_errors(page)
    try:
        for view in VIEWS + ['tasks/' + some_records, 'workflows/' + flow.id,
                             'workers/' + worker_id]:
            open_view(page, web, view)
            assert page.query_selector('main h1') is not None, view
            assert page.evaluate('window.__violations') == [], view
            assert errors == [], (view, errors)
            assert page.evaluate('document.documentElement.scrollWidth <= innerWidth'), view
        open_view(page, web, '')
        page.wait_for_selector('#chart-throughput .u-legend .u-marker')
        color = page.eval_on_selector('#counts .card[data-status=failed] .n',
                                      'node => getComputedStyle(node).color')
        assert color == 'rgb(197, 48, 48)'             # --failed, from the stylesheet
        assert page.evaluate('window.__violations') == [] and errors == []
    finally:
        page.close()


def test_a_deep_link_opens_its_view_in_a_new_page_and_back_and_forward_work(browser, web,
                                                                             some_records):
    page = browser.new_page(viewport={'width': 1400, 'height': 1100})
    asked = []
    page.on('request', lambda request: asked.append(request.url.split('/api/')[-1]))
    open_view(page, web, 'tasks/' + some_records[:8])                 # a prefix will do
    try:
        # Shown by the first fill, which gives the address the whole id (the
        # same view: its fill goes on), not by a second one after a refresh.
        assert [path for path in asked if path.startswith('tasks/') and '?' not in path] == [
            'tasks/' + some_records[:8]]
        assert page.inner_text('#detail-id') == some_records
        assert 'ValueError: bad input 42' in page.inner_text('#detail-body')
        assert page.url.endswith('#/tasks/' + some_records)               # the whole id
        assert page.inner_text('#nav a[aria-current=page]') == 'Tasks'
        page.click('#detail a:has-text("default")')                      # its queue
        page.wait_for_selector('body[data-loaded=true] main[data-view=queue]')
        assert page.inner_text('#queue-name') == 'default'
        page.go_back()
        page.wait_for_selector('body[data-loaded=true] main[data-view=task]')
        assert page.inner_text('#detail-id') == some_records
        page.go_forward()
        page.wait_for_selector('body[data-loaded=true] main[data-view=queue]')
        page.click('#nav a:has-text("Workflows")')
        page.wait_for_selector('body[data-loaded=true] main[data-view=workflows]')
        page.go_back()
        page.wait_for_selector('body[data-loaded=true] main[data-view=queue]')
    finally:
        page.close()


def test_the_keyboard_reaches_every_view_and_every_control_is_labelled(browser, web,
                                                                       some_records):
    page = open_dashboard(browser, web, 'tasks')
    try:
        unlabelled = page.evaluate("""() => [...document.querySelectorAll(
            'input, select, button, a[href]')].filter((node) => !(
            (node.labels && node.labels.length) || node.getAttribute('aria-label')
            || node.textContent.trim() || node.getAttribute('placeholder')))
            .map((node) => node.outerHTML)""")
        assert unlabelled == []
        page.focus('#nav a[href="#/queues"]')
        page.keyboard.press('Enter')
        page.wait_for_selector('body[data-loaded=true] main[data-view=queues]')
        page.keyboard.press('Tab')                      # from the view, to its first link
        assert page.evaluate('document.activeElement.closest("main") !== null')
        page.focus('#queues a[href="#/queues/default"]')
        page.keyboard.press('Enter')
        page.wait_for_selector('body[data-loaded=true] main[data-view=queue]')
    finally:
        page.close()


def test_search_by_label_and_by_task_id(browser, web, some_records):
    page = open_dashboard(browser, web)
    try:
        page.fill('#search-text', 'tenant=t2')
        page.click('#search button[type=submit]')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr[data-id]')"
                               ".length === 1")
        assert 'label.tenant=t2' in page.url
        page.fill('#search-text', some_records[:8])           # a unique prefix of the id
        page.click('#search button[type=submit]')
        page.wait_for_function("(id) => (document.getElementById('detail-id') || {}).innerText"
                               " === id",
                               arg=some_records)
        assert 'ValueError: bad input 42' in page.inner_text('#detail-body')
    finally:
        page.close()


#: The view ``arg`` shown with its data, or the banner saying why not (never throws).
VIEW_OR_BANNER = """(view) => {
    const main = document.getElementById('view'); const banner = document.getElementById('banner');
    return Boolean((main && main.dataset.view === view && document.body.dataset.loaded === 'true')
                   || (banner && !banner.hidden));
}"""


def test_only_the_dashboards_own_token_address_sets_the_bearer_token(browser, web_with_token):
    """``#token=TOKEN`` at the start of the address sets the token; a ``token=``
    anywhere else in it (a link pasted with one in its filter, a search for
    the label token=abc) belongs to the view: the token kept stays, no
    prompt asks for one, and every request still carries it."""
    page = browser.new_page()
    sent = []               # (url, Authorization) of every API request
    page.on('request', lambda r: sent.append((r.url, r.headers.get('authorization')))
            if '/api/' in r.url else None)
    prompts = []
    page.on('dialog', lambda dialog: (prompts.append(dialog.message), dialog.dismiss()))

    def kept():
        return page.evaluate("() => sessionStorage.getItem('kale-token')")

    def settled_on(view):
        page.wait_for_function(VIEW_OR_BANNER, arg=view, timeout=15000)
        assert (kept(), prompts, page.inner_text('#banner')) == (WEB_TOKEN, [], '')

    try:
        page.goto(web_with_token + '#token=' + WEB_TOKEN)
        settled_on('overview')
        assert page.url == web_with_token + '#/'           # the token left the address
        page.goto(web_with_token + '#/tasks?status=failed&token=abc')     # a pasted link
        settled_on('tasks')
        assert page.url.endswith('#/tasks?status=failed&token=abc')
        page.goto(web_with_token + '#/')
        settled_on('overview')
        page.fill('#search-text', 'token=abc')                  # a search for a label
        page.click('#search button[type=submit]')
        settled_on('tasks')
        assert page.url.endswith('#/tasks?label.token=abc')
        assert any('label.token=abc' in url for url, _ in sent)
        assert {bearer for _, bearer in sent} == {'Bearer ' + WEB_TOKEN}, sent
    finally:
        page.close()


def test_the_cancel_button_cancels_a_queued_task_and_the_page_refreshes_itself(
        browser, web, some_records):
    page = open_dashboard(browser, web, 'tasks?status=pending')
    try:
        page.click('#tasks button:has-text("cancel")')
        page.wait_for_selector('#banner:has-text("cancelled ")')
        cancelled = page.inner_text('#banner').split()[-1]
        assert records.get(cancelled).status == 'cancelled'
        queued = "(document.querySelector('#counts .card[data-status=queued] .n') || {}).innerText"
        page.wait_for_function('() => %s === "0"' % queued)
        rt.PlainTask.publish(None, 7)              # no reload: the page's own timer shows it
        # (3 s apart, twice that after each slow refresh: a loaded machine's are)
        page.wait_for_function('() => %s === "1"' % queued, timeout=60000)
    finally:
        page.close()


def test_a_delayed_task_shows_when_it_is_due(browser, web, some_records):
    delayed = rt.PlainTask.publish(None, 8, delay_sec=600)
    due = records.get(delayed).next_attempt_at
    assert due is not None and due > records.get(delayed).published_at + 590
    page = open_dashboard(browser, web, 'tasks?status=pending')
    try:
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


def test_the_task_page_shows_arguments_traceback_and_every_attempt(browser, web, memory_broker,
                                                                  records_url):
    from kale.conf import settings
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0, RETRY_DELAY_JITTER=0):
        task_id = rt.TwiceBrokenTask.publish(None, labels={'tenant': 't9'})
        work(memory_broker)
    broken = rt.BrokenTask.publish(None)
    work(memory_broker)
    records.get(broken)
    page = open_dashboard(browser, web, 'tasks')
    try:
        page.click('#tasks tr[data-id="%s"] a.id' % task_id)
        page.wait_for_selector('#detail table.attempts')
        rows = attempt_rows(page)
        assert [row[:2] for row in rows] == [['1', 'failed'], ['2', 'failed'], ['3', 'succeeded']]
        first = ' '.join(rows[0])
        assert 'attempt 1 fails' in first and '@' in first              # its worker's id
        assert [row[-1] for row in rows] == ['0 s', '0 s', '']          # retried after
        assert '"args": []' in page.inner_text('#detail-body')
        page.go_back()
        page.wait_for_selector('body[data-loaded=true] main[data-view=tasks]')
        page.click('#tasks tr[data-id="%s"] a.id' % broken)
        page.wait_for_selector('#detail pre.traceback')
        assert 'Traceback (most recent call last)' in page.inner_text('#detail pre.traceback')
        # The detail's retry button, clicked twice: one new task.
        page.click('#detail-actions button:has-text("retry")')
        page.wait_for_function("() => (document.getElementById('banner') || {}).innerText")
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
    page = open_dashboard(browser, web, 'tasks')
    try:
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 25")
        first_id = page.get_attribute('#tasks tbody tr', 'data-id')
        assert page.inner_text('#tasks tbody tr a.id') == first_id and len(first_id) == 32
        assert page.get_attribute('#tasks tbody tr time', 'title')        # absolute, on hover
        assert 'showing 25 of 38' in page.inner_text('#shown')
        page.click('#more')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 38")
        assert page.is_hidden('#more')
        page.click('#tasks th[data-sort=attempts] a')
        page.wait_for_selector('#tasks th[data-sort=attempts][aria-sort=ascending]')
        page.click('#tasks th[data-sort=attempts] a')                      # descending
        page.wait_for_selector('#tasks th[data-sort=attempts][aria-sort=descending]')
        assert 'sort=-attempts' in page.url                                # in the address
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length >= 25")
        assert page.inner_text('#tasks tbody tr td:nth-child(4)') == '1'
        page.fill('#filter-task', 'BrokenTask')
        page.click('#filters button[type=submit]')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 1")
        assert 'task=BrokenTask' in page.url
        page.go_back()                                 # the filter was part of the address
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length > 1")
        page.go_forward()
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr').length === 1")
        cards = "(document.querySelector('#counts .card[data-status=%s] .n') || {}).innerText"
        page.wait_for_function('() => %s === "0"' % (cards % 'succeeded'))          # the filter's counts
        assert page.inner_text('#counts .card[data-status=failed] .n') == '1'
        page.fill('#filter-task', '')
        page.wait_for_selector('#filter-queue option[value=default]', state='attached')
        page.select_option('#filter-queue', 'default')
        page.click('#filters button[type=submit]')
        page.wait_for_function('() => %s === "6"' % (cards % 'succeeded'))
    finally:
        page.close()


def _poll(page, condition, turns=300):
    """Let the page run, 50 ms at a time, until ``condition()``."""
    for _ in range(turns):
        if condition():
            return True
        page.wait_for_timeout(50)
    return condition()


def test_a_fill_whose_address_was_left_meanwhile_leaves_the_next_address_alone(
        browser, web, some_records):
    """The tasks' list for #/tasks answers after #/tasks?status=failed was
    opened (a second click on a sort, a filter): its rows must not land in
    the failed tasks' table. A fresh clone's CI saw a second click on the
    attempts column show the rows of the first click's address."""
    page = open_dashboard(browser, web, 'workers')
    held = []
    page.route(lambda url: '/api/tasks?' in url, lambda route: held.append(route))   # answered later
    try:
        page.evaluate("location.hash = '#/tasks'")
        assert _poll(page, lambda: len(held) == 1)
        page.evaluate("location.hash = '#/tasks?status=failed'")
        page.wait_for_selector('main[data-view=tasks] #filter-task')
        held[0].continue_()                             # the list of every task, for the address left
        assert _poll(page, lambda: len(held) == 2)      # the refresh for the failed ones asks
        assert page.eval_on_selector_all('#tasks tbody tr[data-id]', 'rows => rows.length') == 0
        assert 'status=failed' in held[1].request.url
        held[1].continue_()
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr[data-id]')"
                               ".length === 1")
        assert page.get_attribute('#tasks tbody tr', 'data-id') == some_records
    finally:
        page.close()


def test_bulk_retry_and_a_queue_purge_with_its_name_typed(browser, web, memory_broker,
                                                          records_url):
    failed = [rt.BrokenTask.publish(None) for _ in range(3)]
    work(memory_broker)
    waiting = rt.PlainTask.publish(None, 5)
    records.get(waiting)
    page = open_dashboard(browser, web, 'tasks?status=failed')
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
        open_view(page, web, 'queues')
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
    page = open_dashboard(browser, web, 'workers')
    try:
        workers = page.inner_text('#workers tbody')
        assert 'h:2@recent' in workers and 'h:1@old' not in workers
        assert page.inner_text('#old-workers') == 'show 1 workers stopped more than a day ago'
        page.click('#old-workers')
        page.wait_for_function("() => ((document.querySelector('#workers tbody') || {}).innerText"
                               " || '').includes('h:1@old')")
        assert 'all=1' in page.url
        open_view(page, web, '')
        assert page.inner_text('#chart-throughput ~ .empty, figure .window') == 'last day'
        assert page.query_selector('#chart-throughput canvas')
        assert 'Quiet' in page.inner_text('#chart-throughput')
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
    page = open_dashboard(browser, web, 'tasks')
    try:
        page.wait_for_selector('#tasks tr[data-id="xss-task"]')
        assert HOSTILE in page.inner_text('#tasks')
        page.click('#tasks tr[data-id="xss-task"] a.id')
        page.wait_for_selector('#detail pre.traceback')
        assert HOSTILE in page.inner_text('#detail')              # shown, as text
        assert page.inner_text('#detail pre.stderr') == 'the program said ' + HOSTILE
        open_view(page, web, 'workers')
        assert HOSTILE[:100] in page.inner_text('#workers')
        page.click('#workers a.mono')                             # the worker's own view
        page.wait_for_selector('body[data-loaded=true] main[data-view=worker]')
        assert HOSTILE[:100] in page.inner_text('#worker-facts')
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
    page = open_dashboard(browser, web, 'tasks')
    try:
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
    page = open_dashboard(browser, web, 'workflows')
    try:
        row = page.wait_for_selector('#workflows tr[data-id="%s"]' % diamond.id)
        assert '4 succeeded' in row.inner_text() and 'succeeded' in row.query_selector(
            '.badge').inner_text()
        page.click('#workflows tr[data-id="%s"] a.id' % diamond.id)
        page.wait_for_selector('#workflow svg g.node')
        assert page.url.endswith('#/workflows/' + diamond.id)
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
        page.wait_for_selector('body[data-loaded=true] main[data-view=task]')
        assert page.inner_text('#detail-id') == d.task_id
        assert 'tests.workflow_tasks.Pair' in page.inner_text('#detail-body')
        assert json.loads(page.text_content('#detail-body pre.json')) == \
            {'args': [13, 23], 'kwargs': {}}                  # b's and c's results, passed on

        open_view(page, web, 'workflows')
        page.click('#workflows tr[data-id="%s"] a.id' % failing.id)
        # (a predicate that throws fails the wait: the id's element comes with the view)
        page.wait_for_function("(id) => (document.getElementById('workflow-id') || {}).innerText"
                               " === id", arg=failing.id)
        page.wait_for_selector('body[data-loaded=true] #workflow svg g.node')
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
    page = open_dashboard(browser, web, 'workflows')
    asked = confirm_the_second_time(page)
    try:
        page.click('#workflows tr[data-id="%s"] a.id' % running.id)
        page.wait_for_selector('#workflow svg g.node')
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
        page.wait_for_function("() => document.querySelectorAll("
                               "'#workflow svg g.node[data-state=cancelled]').length === 2")
        assert drawn_nodes(page) == {first.task_id: 'cancelled', then.task_id: 'cancelled'}
        assert page.is_hidden('#workflow-cancel')
        assert records.get(first.task_id).status == 'cancelled'
        open_view(page, web, 'workflows')
        page.click('#workflow-tabs a[data-status=cancelled]')
        page.wait_for_selector('body[data-loaded=true]')
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
    page = open_dashboard(browser, web, 'workflows/' + wf.id)          # a deep link
    asked = confirm_the_second_time(page)
    try:
        page.wait_for_selector('#workflow svg g.node')
        assert page.is_hidden('#workflow-cancel') and page.is_visible('#workflow-retry')
        page.click('#workflow-retry')
        assert len(asked) == 1 and wf.id in asked[0]
        assert wf.status() == 'cancelled', 'not confirmed: nothing changes'
        page.click('#workflow-retry')
        page.wait_for_selector('#banner:has-text("retrying workflow %s")' % wf.id)
        assert len(asked) == 2 and wf.status() == 'running'
        page.wait_for_selector('#workflow svg g.node[data-state=queued]')
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
    page = open_dashboard(browser, web, 'webhooks')
    try:
        page.wait_for_selector('#outbox:has-text("outbox:")')
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
    page = open_dashboard(browser, web, 'webhooks')
    try:
        row = '#webhooks tr[data-webhook="%s"]' % hook.id
        page.wait_for_selector(row)
        assert 'orders' in page.inner_text(row) and 'active' in page.inner_text(row)
        page.click(row + ' a.deliveries')
        page.wait_for_function("() => document.querySelectorAll('#tasks tbody tr[data-id]')"
                               ".length === 1")
        page.click('#tasks tr[data-id="%s"] a.id' % task_id)
        page.wait_for_selector('#detail table.attempts')
        rows = attempt_rows(page)
        assert [row[:2] for row in rows] == [['1', 'failed'], ['2', 'succeeded']]
        assert re.search(r'WebhookDeliveryError: HTTP 503 in \d+ ms: busy, come back',
                         ' '.join(rows[0]))
        assert '"status": 200' in page.inner_text('#detail-body')
        open_view(page, web, 'webhooks')
        page.click(row + ' button:has-text("disable")')
        page.wait_for_selector('#banner:has-text("disabled")')
        assert not webhooks.get(hook.id).active
        assert hook.secret not in page.content()
    finally:
        page.close()


# --- control: pause a queue, stop a worker, on a real worker ---------------------------------

def test_a_queue_is_paused_and_resumed_and_a_worker_stopped_from_the_dashboard(
        browser, web, records_url, tmp_path):
    """A real `kale worker`: the queues view pauses its queue (the worker
    reads it and its tasks wait in SQS), resumes it (they run), and the
    workers view stops the worker, which exits 0."""
    from tests.support.processes import WorkerProcess, wait_for
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    page = open_dashboard(browser, web, 'queues')
    asked = confirm_the_second_time(page)
    try:
        wait_for(lambda: records.queries().workers('running'), 30, 'the worker to start')
        page.click('#queues tr[data-queue=default] button.pause')
        assert len(asked) == 1 and 'default' in asked[0]
        assert records.store().controls.paused() == {}, 'not confirmed: nothing changes'
        page.click('#queues tr[data-queue=default] button.pause')
        page.wait_for_selector('#banner:has-text("paused default")')
        page.wait_for_selector('#queues tr[data-queue=default] .badge.paused')
        # (it reads the controls every 2 s; tests/e2e/test_control_e2e.py holds it to 5 s)
        wait_for(lambda: 'queue default paused' in worker.output(), 15, 'the worker to pause')
        held = rt.PlainTask.publish_batch(None, [((n,), {}) for n in range(3)])
        page.click('#queues a[href="#/queues/default"]')
        page.wait_for_selector('body[data-loaded=true] main[data-view=queue] .badge.paused')
        assert {records.get(task_id).status for task_id in held} == {'queued'}
        page.click('#queue-actions button.resume')
        page.wait_for_selector('#banner:has-text("resumed default")')
        wait_for(lambda: {records.get(task_id).status for task_id in held} == {'succeeded'},
                 30, 'the held tasks to run once resumed')
        open_view(page, web, 'workers')
        [me] = records.queries().workers('running')
        stop = '#workers tr[data-worker="%s"] button.stop' % me.id
        # One click: only the page's first question (the pause's) was
        # refused. A second click raced the refresh that removes the button
        # once the stop is asked (a fresh clone's CI lost that race).
        page.click(stop)
        page.wait_for_selector('#banner:has-text("asked %s to stop")' % me.id)
        assert me.id in asked[-1]
        page.wait_for_selector('#workers tr[data-worker="%s"] .badge.stopping, '
                               '#workers tr[data-worker="%s"] .badge.stopped' % (me.id, me.id))
        assert worker.wait(20) == 0, worker.output()
        # The page loaded afresh: on a loaded machine slow refreshes double the
        # page's own pause between them (up to a minute).
        page.reload()
        page.wait_for_selector('body[data-loaded=true] main[data-view=workers]')
        page.wait_for_selector('#workers tr[data-worker="%s"] .badge.stopped' % me.id,
                               timeout=30000)
    finally:
        page.close()
        if worker.process.poll() is None:
            worker.process.kill()


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
