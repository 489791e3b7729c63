"""The dashboard in a real headless Chromium, served by a real `kale web`
process: it shows the counts, queues, workers and failures of real records,
and its retry button publishes a failed task again."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kale import records
from tests import records_tasks as rt
from tests.support.browser import find_chromium
from tests.support.endpoint import ROOT, subprocess_env
from tests.test_records import work

pytestmark = pytest.mark.slow

#: Set to a path (e.g. docs/dashboard.png) to keep the test's screenshot there.
SCREENSHOT_VARIABLE = 'KALE_DASHBOARD_SCREENSHOT'


@pytest.fixture(scope='session')
def browser():
    chromium = find_chromium()
    if chromium is None:
        pytest.skip('no Chromium found (apt-get install chromium): the dashboard tests need one')
    sync_api = pytest.importorskip('playwright.sync_api')
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, headless=True,
                                              args=['--no-sandbox', '--disable-gpu'])
        yield launched
        launched.close()


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


def test_search_by_label_and_by_task_id(browser, web, some_records):
    page = browser.new_page()
    try:
        page.goto(web)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.fill('#search-text', 'tenant=t2')
        page.click('#search button[type=submit]')
        page.wait_for_function("document.querySelectorAll('#tasks tbody tr').length === 1")
        page.fill('#search-text', some_records)
        page.click('#search button[type=submit]')
        page.wait_for_selector('#detail:not([hidden])')
        assert '"error_type": "ValueError"' in page.inner_text('#detail-body')
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
        page.wait_for_function('%s === "0"' % queued)
        rt.PlainTask.publish(None, 7)              # no reload: the page's own timer shows it
        page.wait_for_function('%s === "1"' % queued, timeout=10000)
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
