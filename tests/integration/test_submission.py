"""Tasks and workflows submitted as JSON (kale.submission and POST
/api/workflows), run by real worker loops on the in-memory transport with
records on SQLite: a two-step tree of executor programs, a Python task and a
program in one workflow, a plain task, and every refusal before anything is
recorded or sent."""
from __future__ import annotations

import json
import textwrap

import pytest

from kale import records, submission, workflow
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import SubmissionError
from kale.records.queries import parse_filter
from kale.web import create_app
from tests.support.web import api_client
from tests.support.work import work

TOKEN = 's' * 32

SAVE = '''
    #!/bin/sh
    # save-user-data: [{"uid": N}] -> {"uid": N, "saved": true}
    python3 -c 'import json, sys; [user] = json.load(sys.stdin); user["saved"] = True
    print(json.dumps(user))'
'''
MAIL = '''
    #!/usr/bin/env python3
    import json, sys
    [user] = json.load(sys.stdin)
    print(json.dumps("mailed %d" % user["uid"]))
'''

DOUBLE = '''
    #!/usr/bin/env python3
    import json, sys
    print(json.dumps(2 * sum(json.load(sys.stdin))))
'''

TREE = {'tasks': [
    {'id': 'save', 'method': 'save-user-data', 'queue': 'default',
     'args': [{'value': {'uid': 1234}}]},
    {'id': 'mail', 'method': 'send-mail', 'args': [{'ref': 'save'}]}],
    'labels': {'team': 'growth'}, 'deadline_sec': 3600}


@pytest.fixture
def programs(tmp_path, memory_broker, records_url):
    directory = tmp_path / 'executors'
    directory.mkdir()
    for name, text in (('save-user-data', SAVE), ('send-mail', MAIL), ('double', DOUBLE)):
        path = directory / name
        path.write_text(textwrap.dedent(text).lstrip())
        path.chmod(0o755)
    with settings.override(EXECUTOR_DIR=str(directory)):
        yield memory_broker


def until_final(broker, workflow_id):
    wf = workflow.get(workflow_id)
    for _ in range(5):
        if wf.status() != 'running':
            break
        work(broker)
    return wf


def test_a_two_step_tree_of_programs_passes_the_first_result_on(programs):
    answer = submission.submit(json.loads(json.dumps(TREE)), default_app())
    assert set(answer['tasks']) == {'save', 'mail'}
    wf = until_final(programs, answer['workflow_id'])
    assert wf.result() == [{'uid': 1234, 'saved': True}, 'mailed 1234']
    assert records.get(answer['tasks']['mail']).result == 'mailed 1234'
    assert workflow.list_workflows()[0]['labels'] == {'team': 'growth'}


def test_a_python_task_and_a_program_in_one_submission(programs):
    answer = submission.submit({'tasks': [
        {'id': 'add', 'task': 'tests.workflow_tasks.Add', 'args': [{'value': 1233}],
         'kwargs': {'b': {'value': 1}}},
        {'id': 'double', 'method': 'double', 'args': [{'ref': 'add'}, {'value': 1}]}]}, default_app())
    wf = until_final(programs, answer['workflow_id'])
    assert wf.result() == [1234, 2470]
    assert records.get(answer['tasks']['double']).inputs['args'] == [1234, 1]


def test_one_entry_alone_is_a_plain_task(programs):
    answer = submission.submit({'tasks': [
        {'method': 'send-mail', 'args': [{'value': {'uid': 7}}]}], 'labels': {'n': 1}}, default_app())
    assert answer['workflow_id'] is None and list(answer['tasks']) == ['0']
    work(programs)
    record = records.get(answer['tasks']['0'])
    assert record.result == 'mailed 7' and record.labels == {'n': '1'}


@pytest.mark.parametrize('document, error', [
    ('{"tasks": [', r'^the submission is not JSON: Expecting value: line 1 column 12'),
    ('{"tasks": []}', r'^tasks: \[\] should be non-empty'),
    ('{"tasks": [{"method": "m", "args": [{"vlaue": 1}]}]}',
     r'^tasks\[0\]\.args\[0\]: Additional properties are not allowed \(\'vlaue\' was '
     r'unexpected\)'),
    ('{"tasks": [{"method": "m"}], "label": {}}',
     r"^Additional properties are not allowed \('label' was unexpected\)"),
    ('{"tasks": [{"method": "m", "task": "a.B"}]}', r'^tasks\[0\]: .* is valid under each of'),
    ('{"tasks": [{"method": "../x"}]}', r"^tasks\[0\]\.method: '\.\./x' does not match"),
    ('{"tasks": [{"id": "a", "method": "m", "args": [{"ref": "b"}]}, '
     '{"id": "b", "method": "m", "args": [{"ref": "a"}]}]}',
     r'^the references make a cycle: (a -> b -> a|b -> a -> b)$'),
    ('{"tasks": [{"id": "a", "method": "m", "args": [{"ref": "nope"}]}]}',
     r"^tasks\[0\] \(a\): ref 'nope' names no entry$"),
    ('{"tasks": [{"id": "a", "method": "m"}, {"id": "a", "method": "m"}]}',
     r"^tasks\[1\]: id 'a' is given to two entries$"),
    ('{"tasks": [{"id": "a", "method": "m", "queue": "nowhere"}, '
     '{"method": "m", "args": [{"ref": "a"}]}]}', r'^tasks\[0\] \(a\): .*nowhere'),
    ('{"tasks": [{"id": "x", "task": "tests.workflow_tasks.Nothing"}]}',
     r"^tasks\[0\] \(x\): .*tests\.workflow_tasks\.Nothing"),
    ('{"tasks": [{"id": "x", "task": "tests.workflow_tasks.Add", "args": [], '
     '"kwargs": {"c": {"value": 1}}}, {"method": "m", "args": [{"ref": "x"}]}]}',
     r'^.*x \(tasks\[0\]\).*'),
    ('{"tasks": [{"id": "m", "method": "send-mail", "kwargs": {"to": {"value": 1}}}]}',
     r'^tasks\[0\] \(m\): executor send-mail takes positional arguments only'),
    # Kale's own tasks: a delivery would carry a webhook's valid signature
    ('{"tasks": [{"id": "d", "task": "kale.webhooks.delivery.DeliverWebhook", "args": '
     '[{"value": "wh"}, {"value": "evt"}, {"value": "orders"}, {"value": {}}]}]}',
     r"^tasks\[0\] \(d\): kale\.webhooks\.delivery\.DeliverWebhook is one of Kale's own "
     r"tasks: only Kale publishes it$"),
    ('{"tasks": [{"id": "f", "task": "kale.webhooks.fanout.WebhookFanout", "args": '
     '[{"value": {}}]}, {"method": "m", "args": [{"ref": "f"}]}]}',
     r"^tasks\[0\] \(f\): kale\.webhooks\.fanout\.WebhookFanout is one of Kale's own"),
])
def test_a_bad_submission_is_one_line_and_nothing_is_recorded_or_sent(programs, document,
                                                                       error):
    with pytest.raises(SubmissionError, match=error) as raised:
        submission.submit(submission.parse(document), default_app())
    assert '\n' not in str(raised.value)
    assert workflow.list_workflows() == []
    work(programs)                              # nothing was sent: no record appears
    assert records.queries().count(parse_filter({})) == 0


def test_post_api_workflows_needs_the_token_unless_allowed(programs):
    body = json.dumps(TREE)
    no_token = api_client(create_app(broker=lambda: programs))
    answer = no_token.post('/api/workflows', content=body)
    assert answer.status_code == 403 and 'submitting needs a bearer token' in \
        answer.json()['error']
    with settings.override(WEB_ALLOW_SUBMIT_WITHOUT_TOKEN=True):
        allowed = api_client(create_app(broker=lambda: programs))
        assert allowed.post('/api/workflows', content=body).status_code == 200
    guarded = api_client(create_app(token=TOKEN, broker=lambda: programs))
    assert guarded.post('/api/workflows', content=body).status_code == 401
    answer = guarded.post('/api/workflows', content=body,
                          headers={'Authorization': 'Bearer ' + TOKEN})
    assert answer.status_code == 200, answer.text
    ids = answer.json()
    wf = until_final(programs, ids['workflow_id'])
    assert wf.result()[1] == 'mailed 1234'
    bad = guarded.post('/api/workflows', content='{"tasks": [{"ref": 1}]}',
                       headers={'Authorization': 'Bearer ' + TOKEN})
    assert bad.status_code == 400 and bad.json()['error'].startswith('tasks[0]')
    document = guarded.get('/api/openapi.json', headers={'Authorization': 'Bearer ' + TOKEN})
    operation = document.json()['paths']['/api/workflows']['post']
    assert operation['requestBody']['content']['application/json']['schema'] == \
        {'$ref': '#/components/schemas/Submission'}


def test_the_schema_file_validates_the_readme_examples():
    """Every JSON example of the executors guide (docs/how-to/executors.md)
    passes the schema, and so do the example's submission files."""
    import re

    import jsonschema

    from tests.support.endpoint import ROOT
    with open('%s/docs/how-to/executors.md' % ROOT) as f:
        section = f.read()
    examples = [json.loads(block) for block in re.findall(r'```json\n(.*?)```', section, re.S)]
    with open('%s/example/executors/signup.json' % ROOT) as f:
        examples.append(json.load(f))
    assert len(examples) >= 2
    validator = jsonschema.Draft202012Validator(submission.schema())
    for example in examples:
        validator.validate(example)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({'tasks': [{'method': 'x', 'args': [{'value': 1, 'ref': 'y'}]}]})
