"""kale web in a browser: cross-site requests, DNS rebinding, stored script
(the headers; the rendering is tested in Chromium), tokens and heavy queries."""
import pytest
from starlette.testclient import TestClient

from kale import records
from kale.conf import settings
from kale.exceptions import ImproperlyConfigured
from kale.web import create_app
from kale.web.protect import CONTENT_SECURITY_POLICY
from kale.web.server import check_exposure
from tests import records_tasks as rt
from tests.support.web import api_client

#: What a form on another site sends: no preflight, so it reaches the server.
CROSS_SITE_FORM = {'Origin': 'http://evil.example', 'Sec-Fetch-Site': 'cross-site',
                   'Content-Type': 'text/plain'}


@pytest.fixture
def app(memory_broker, records_url):
    return create_app(broker=lambda: memory_broker)


def queued_task():
    task_id = rt.PlainTask.publish(None, 1)
    assert records.get(task_id).status == 'queued'
    return task_id


def test_a_cross_site_form_cannot_cancel_a_task(app):
    task_id = queued_task()
    browser = TestClient(app, base_url='http://127.0.0.1')
    answer = browser.post('/api/tasks/%s/cancel' % task_id, headers=CROSS_SITE_FORM,
                          content='x')
    assert answer.status_code == 403 and 'another site' in answer.json()['error']
    assert records.get(task_id).status == 'queued'


@pytest.mark.parametrize('headers', [
    {'Origin': 'http://evil.example'},
    {'Origin': 'null'},
    {'Origin': 'http://127.0.0.1:8080'},         # another port of this host: another origin
    {'Origin': 'https://127.0.0.1'},             # another scheme
    {'Origin': 'http://127.0.0.1:x'},
    {'Sec-Fetch-Site': 'same-site'},
    {},                                          # no X-Kale-Request
])
def test_every_state_changing_route_refuses_what_another_site_can_send(app, headers):
    task_id = queued_task()
    browser = TestClient(app, base_url='http://127.0.0.1')
    extra = {} if headers == {} else {'X-Kale-Request': '1'}
    for method, path in [('POST', '/api/tasks/%s/cancel' % task_id),
                         ('POST', '/api/tasks/%s/retry' % task_id),
                         ('POST', '/api/tasks/retry?status=failed'),
                         ('POST', '/api/queues/default/redrive'),
                         ('POST', '/api/queues/default/purge?confirm=default'),
                         ('DELETE', '/api/tasks?all=true')]:
        answer = browser.request(method, path, headers={**headers, **extra})
        assert answer.status_code == 403, (method, path, answer.text)
    assert records.get(task_id).status == 'queued'


def test_the_dashboards_own_requests_are_answered(app):
    task_id = queued_task()
    same_origin = {'Origin': 'http://127.0.0.1', 'Sec-Fetch-Site': 'same-origin'}
    answer = api_client(app).post('/api/tasks/%s/cancel' % task_id, headers=same_origin)
    assert answer.status_code == 200 and records.get(task_id).status == 'cancelled'


def test_the_origin_port_is_compared_with_the_hosts(app):
    task_id = queued_task()
    browser = TestClient(app, base_url='http://127.0.0.1:8000')
    dashboard = {'X-Kale-Request': '1', 'Sec-Fetch-Site': 'same-origin'}
    other = browser.post('/api/tasks/%s/cancel' % task_id,
                         headers=dict(dashboard, Origin='http://127.0.0.1:9000'))
    assert other.status_code == 403 and records.get(task_id).status == 'queued'
    own = browser.post('/api/tasks/%s/cancel' % task_id,
                       headers=dict(dashboard, Origin='http://127.0.0.1:8000'))
    assert own.status_code == 200 and records.get(task_id).status == 'cancelled'


def test_reads_need_no_header_and_change_nothing(app):
    task_id = queued_task()
    browser = TestClient(app, base_url='http://127.0.0.1')
    assert browser.get('/api/tasks/%s' % task_id).status_code == 200
    assert browser.get('/api/tasks/%s/cancel' % task_id).status_code == 405
    assert records.get(task_id).status == 'queued'


def test_a_host_the_server_was_not_asked_to_answer_for_is_refused(app, memory_broker):
    rebound = TestClient(app, base_url='http://attacker.example:8000')
    answer = rebound.get('/api/tasks')
    assert answer.status_code == 421 and 'attacker.example' in answer.json()['error']
    for host in ('localhost:8000', '127.0.0.1', '[::1]:8000'):
        assert api_client(app).get('/api/tasks', headers={'Host': host}).status_code == 200
    with settings.override(WEB_ALLOWED_HOSTS=['kale.internal.example']):
        listed = create_app(broker=lambda: memory_broker)
    assert TestClient(listed, base_url='http://kale.internal.example').get(
        '/api/tasks').status_code == 200


def test_with_a_token_any_host_is_answered_unless_hosts_are_listed(memory_broker, records_url):
    token = 's' * 32
    auth = {'Authorization': 'Bearer ' + token}
    guarded = create_app(token=token, broker=lambda: memory_broker)
    assert TestClient(guarded, base_url='http://kale.example').get(
        '/api/tasks', headers=auth).status_code == 200
    with settings.override(WEB_ALLOWED_HOSTS=['kale.internal.example']):
        listed = create_app(token=token, broker=lambda: memory_broker)
    assert TestClient(listed, base_url='http://kale.example').get(
        '/api/tasks', headers=auth).status_code == 421


def test_a_token_in_the_query_string_is_refused(memory_broker, records_url):
    token = 's' * 32
    app = create_app(token=token, broker=lambda: memory_broker)
    for name in ('token', 'access_token'):
        answer = api_client(app).get('/api/tasks?%s=%s' % (name, token))
        assert answer.status_code == 400 and 'Authorization header' in answer.json()['error']


def test_every_api_path_needs_the_token_but_the_exact_documents(memory_broker, records_url):
    """A path that merely ends like an open document is not one: the API's
    description is open at its exact path only."""
    token = 's' * 32
    client = api_client(create_app(token=token, broker=lambda: memory_broker))
    for path in ('/api/tasks/openapi.json', '/api/openapi.json/', '/api/x/openapi.json',
                 '/api', '/api/', '/api/tasks', '/metrics'):
        assert client.get(path).status_code == 401, path
    assert client.get('/api/openapi.json').status_code == 200
    assert client.get('/api/tasks/openapi.json',
                      headers={'Authorization': 'Bearer ' + token}).status_code != 401


def test_every_answer_carries_the_security_headers(app, memory_broker):
    client = api_client(app)
    for path in ('/', '/static/app.js', '/api/tasks', '/api/nosuch', '/api/openapi.json'):
        headers = client.get(path).headers
        assert headers['content-security-policy'] == CONTENT_SECURITY_POLICY, path
        assert headers['x-content-type-options'] == 'nosniff'
        assert "frame-ancestors 'none'" in headers['content-security-policy']
        assert "'unsafe-inline'" not in headers['content-security-policy']
    refused = TestClient(app, base_url='http://evil.example').get('/api/tasks')
    assert refused.headers['x-content-type-options'] == 'nosniff'


def test_the_page_has_no_inline_script_or_style():
    import pathlib
    import re
    page = pathlib.Path(__file__).resolve().parents[2] / 'kale' / 'web' / 'static' / 'index.html'
    html = page.read_text()
    assert re.findall(r'<script(?![^>]*\bsrc=)[^>]*>', html) == []
    assert ' style=' not in html and '<style' not in html
    assert re.findall(r'\son[a-z]+\s*=', html) == []          # no event handler attributes


def test_the_dashboard_script_never_writes_html_from_data():
    import pathlib
    script = (pathlib.Path(__file__).resolve().parents[2] / 'kale' / 'web' / 'static'
              / 'app.js').read_text()
    for sink in ('innerHTML', 'outerHTML', 'insertAdjacentHTML', 'document.write', 'eval('):
        assert sink not in script, sink


@pytest.mark.parametrize('host', ['0.0.0.0', '::'])
def test_listening_on_every_address_without_a_token_says_so(host):
    with pytest.raises(ImproperlyConfigured, match='every address of this machine'):
        check_exposure(host, '')


@pytest.mark.parametrize('query, problem', [
    ('limit=1001', 'limit must be'),
    ('limit=-1', 'limit must be'),
    ('cursor=not-base64!!', 'cursor'),
    ('cursor=WyJOYU4iLCJhIl0', 'cursor'),                       # ["NaN","a"]
    ('cursor=' + 'A' * 5000, 'cursor'),
    ('&'.join('label.k%d=v' % i for i in range(9)), 'at most 8 label filters'),
    ('label.k=' + 'v' * 300, 'at most 256 characters'),
    ('task=' + 't' * 300, 'at most 256 characters'),
    ('status=nope', 'unknown status'),
])
def test_heavy_or_tampered_queries_are_one_line_400s(app, query, problem):
    answer = api_client(app).get('/api/tasks?' + query)
    assert answer.status_code == 400 and problem in answer.json()['error'], answer.text


def test_a_cursor_with_a_number_that_is_not_finite_is_refused(app):
    import base64
    import json
    for value in ('NaN', 'Infinity'):
        raw = ('[%s, "a"]' % value).encode()
        assert json.loads(raw)
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip('=')
        assert api_client(app).get('/api/tasks?cursor=' + cursor).status_code == 400


@pytest.mark.parametrize('base_url, headers, sent', [
    ('http://127.0.0.1', {}, True), ('http://localhost:8000', {}, True),
    ('https://kale.example', {}, True),
    ('http://kale.example', {'X-Forwarded-Proto': 'https'}, True),
    ('http://kale.example', {}, False), ('http://192.0.2.7:8000', {}, False)])
def test_the_opener_policy_is_sent_only_where_a_browser_applies_it(memory_broker, records_url,
                                                                   base_url, headers, sent):
    """Over plain HTTP to another host Chromium ignores the header and says
    so in the console on every page load."""
    web = create_app(token='t' * 32, broker=lambda: memory_broker)
    answer = TestClient(web, base_url=base_url).get('/', headers=headers)
    assert answer.status_code == 200
    assert ('cross-origin-opener-policy' in answer.headers) is sent
    assert answer.headers['content-security-policy'] == CONTENT_SECURITY_POLICY
