"""The REST API of ``kale web`` as a table of endpoints, and the OpenAPI
description generated from it (served at ``/api/openapi.json``)."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from kale.statuses import PENDING_FILTER, PENDING_TASK, TaskStatus, WorkerState, WorkflowStatus, status_values
from kale.version import __version__


def _param(name: str, description: str, kind: str = 'string', where: str = 'query',
           required: bool = False, one_of: Optional[list[str]] = None) -> dict[str, Any]:
    schema: dict[str, Any] = {'type': kind}
    if one_of is not None:
        schema['enum'] = one_of
    return {'name': name, 'in': where, 'required': required, 'description': description,
            'schema': schema}


def _statuses(status: Any) -> str:
    return ', '.join(status_values(status))


FILTERS = (
    _param('status', '%s or %s (%s); several separated by commas' % (
        _statuses(TaskStatus), PENDING_FILTER, ' + '.join(PENDING_TASK))),
    _param('task', 'task path (module.Class), or a class name'),
    _param('queue', 'queue name from the queue config'),
    _param('label.KEY', 'label KEY equals the value, e.g. label.tenant=t1'),
    _param('since', 'published at or after: epoch seconds or ISO 8601'),
    _param('until', 'published before: epoch seconds or ISO 8601'),
)
PAGE = (_param('limit', '1..1000, default 50', 'integer'),
        _param('cursor', '"next" of the previous page'))
BUCKET = _param('bucket', 'seconds per point', 'number')
TASK_ID = _param('task_id', 'the task id, or a unique prefix of it (4 characters or more)',
                 where='path', required=True)
ERROR = {'description': 'one-line reason', 'content': {'application/json': {'schema': {
    'type': 'object', 'properties': {'error': {'type': 'string'}}}}}}


def _answer(description: str, *errors: int, **properties: Any) -> dict[str, Any]:
    return {'200': {'description': description, 'content': {'application/json': {'schema': {
        'type': 'object', 'properties': properties}}}},
        **{str(code): ERROR for code in (400, 401, 503, *errors)}}


_obj: dict[str, Any] = {'type': 'object'}
_list: dict[str, Any] = {'type': 'array', 'items': _obj}
_int: dict[str, Any] = {'type': 'integer'}
_bool: dict[str, Any] = {'type': 'boolean'}

_text: dict[str, Any] = {'type': 'string'}
NAME = _param('name', 'queue name', where='path', required=True)
WORKFLOW_ID = _param('workflow_id', 'the workflow id', where='path', required=True)
WORKER_ID = _param('worker_id', 'the worker\'s id (kale workers), or a unique prefix of it, '
                   'e.g. host:pid', where='path', required=True)
WEBHOOK_ID = _param('webhook_id', 'the webhook id', where='path', required=True)
SCHEDULE_NAME = _param('name', "the schedule's name (a task path, or a key of SCHEDULES)",
                       where='path', required=True)
#: What the webhook routes answer (header values hidden; the secret only when added).
WEBHOOK = dict(id=_text, topic=_text, url=_text, method=_text, headers=_obj, labels=_obj,
               active=_bool, created_at=_text, updated_at=_text)
#: What ``/api/workflows/{workflow_id}``, its cancel and its retry answer.
WORKFLOW = dict(id=_text, status=_text, labels=_obj, created_at=_text, finished_at=_text,
                node_count=_int, node_states=_obj, nodes=_list,
                edges={'type': 'array', 'items': {'type': 'array', 'items': _text}})


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One route of the REST API: what ``kale web`` serves (``handler`` names
    the :class:`kale.web.routes.Api` method) and how the document describes it."""

    method: str
    path: str
    handler: str
    summary: str
    responses: dict[str, Any]
    parameters: tuple[dict[str, Any], ...] = ()
    #: The JSON request body's schema, for a handler that reads one
    #: (called with the request and the body's bytes).
    body: Optional[dict[str, Any]] = None


#: The REST API. ``kale web`` makes its routes from this table and the
#: OpenAPI document is generated from it, so the two cannot differ.
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint('GET', '/api/tasks', 'list_tasks', 'Tasks, newest first, without their inputs (keyset pages)',
             _answer('a page', tasks=_list, next={'type': 'string', 'nullable': True}),
             (*FILTERS, *PAGE)),
    Endpoint('DELETE', '/api/tasks', 'delete_tasks', 'Delete matching records (all=true to delete every one)',
             _answer('how many were deleted', deleted=_int),
             (*FILTERS, _param('all', 'true to delete with no filter', 'boolean'))),
    Endpoint('GET', '/api/tasks/count', 'count_tasks', 'How many records match',
             _answer('the count', count=_int), FILTERS),
    Endpoint('GET', '/api/tasks/summary', 'summary', 'Counts by status, by task and by queue',
             _answer('the counts', by_status=_obj, by_task=_obj, by_queue=_obj), FILTERS),
    Endpoint('POST', '/api/tasks/retry', 'retry_tasks',
             'Retry every failed task the filter matches, each once (at most 1000)',
             _answer('what was published', published=_list, already_retried=_int, refused=_list),
             FILTERS),
    Endpoint('GET', '/api/tasks/{task_id}', 'get_task',
             'The whole record: inputs, error, result and attempt_history included',
             _answer('the record', 404), (TASK_ID,)),
    Endpoint('POST', '/api/tasks/{task_id}/retry', 'retry_task',
             "Publish a failed task again from its stored inputs, once (a second retry "
             "answers with the first one's task, published false)",
             _answer('the new task', 404, 409, id=_text, retry_of=_text, published=_bool), (TASK_ID,)),
    Endpoint('POST', '/api/tasks/{task_id}/cancel', 'cancel_task', 'Cancel a task that has not started',
             _answer('the record', 404, 409), (TASK_ID,)),
    Endpoint('GET', '/api/queues', 'queues',
             'Every configured queue, its message counts and since when it is paused (paused_at)',
             _answer('the queues', queues=_list)),
    Endpoint('POST', '/api/queues/{name}/redrive', 'redrive', "Move the queue's dead letters back to it",
             _answer('what moved', moved=_int, skipped=_int),
             (NAME, _param('limit', 'move at most this many', 'integer'),
              _param('reason', 'move only dead letters of this reason'),
              _param('dry_run', 'move nothing; say what would move', 'boolean'))),
    Endpoint('POST', '/api/queues/{name}/purge', 'purge',
             'Delete every message of the queue; its waiting records become purged',
             _answer('what was purged', queue=_text, records_marked_purged=_int),
             (NAME, _param('confirm', 'the queue name again', required=True))),
    Endpoint('POST', '/api/queues/{name}/pause', 'pause_queue',
             'Pause the queue: every worker stops receiving from it within seconds; its '
             'messages wait in SQS',
             _answer('the queue, paused', queue=_text, paused=_bool, paused_at=_text), (NAME,)),
    Endpoint('POST', '/api/queues/{name}/resume', 'resume_queue',
             'Resume a paused queue: workers receive from it again within seconds',
             _answer('the queue, resumed', queue=_text, paused=_bool, was_paused=_bool), (NAME,)),
    Endpoint('GET', '/api/workflows', 'list_workflows',
             'Workflows, newest first, each with its count of nodes by state (pages)',
             _answer('a page', workflows=_list, next={'type': 'string', 'nullable': True}),
             (_param('status', _statuses(WorkflowStatus),
                     one_of=status_values(WorkflowStatus)), *PAGE)),
    Endpoint('POST', '/api/workflows', 'submit_workflow',
             'Submit tasks or a workflow written as JSON (executor methods and Python tasks, '
             'results passed by ref); needs the bearer token, or '
             'WEB_ALLOW_SUBMIT_WITHOUT_TOKEN',
             _answer('the ids', 403, workflow_id={'type': 'string', 'nullable': True}, tasks=_obj),
             body={'$ref': '#/components/schemas/Submission'}),
    Endpoint('GET', '/api/workflows/{workflow_id}', 'get_workflow',
             'The workflow, each node (task id, task, state, queue, upstream, downstream, '
             'reason) and its edges [from, to]',
             _answer('the workflow', 404, **WORKFLOW), (WORKFLOW_ID,)),
    Endpoint('POST', '/api/workflows/{workflow_id}/cancel', 'cancel_workflow',
             'Cancel a running workflow: every node not ended, and its published tasks',
             _answer('the workflow, cancelled', 404, 409, **WORKFLOW), (WORKFLOW_ID,)),
    Endpoint('POST', '/api/workflows/{workflow_id}/retry', 'retry_workflow',
             'Run a failed or cancelled workflow again: its nodes that failed, were cancelled '
             'or never ran run again; nodes that succeeded keep their results',
             _answer('the workflow, running', 404, 409, **WORKFLOW), (WORKFLOW_ID,)),
    Endpoint('GET', '/api/outbox', 'outbox',
             'The outbox of OUTBOX_URL: rows waiting for the relay and the oldest one\'s age',
             _answer('the outbox', configured=_bool, pending=_int,
                     oldest_age_sec={'type': 'number', 'nullable': True})),
    Endpoint('GET', '/api/workers', 'workers',
             'Worker and supervisor processes (stop_requested_at: a stop was asked of it)',
             _answer('the workers', workers=_list),
             (_param('state', _statuses(WorkerState), one_of=status_values(WorkerState)),)),
    Endpoint('POST', '/api/workers/{worker_id}/stop', 'stop_worker',
             'Ask a worker to stop: it receives no more, lets what runs finish and exits 0 '
             '(a supervisor stops its workers); read with its heartbeat, within seconds',
             _answer('the worker, with stop_requested_at', 404, 409), (WORKER_ID,)),
    Endpoint('GET', '/api/timeline', 'timeline', 'Tasks finished and mean duration per task over time',
             _answer('the series', series=_obj),
             (_param('window', 'seconds back, default 3600; auto: the shortest of an hour, a '
                               'day and a week with tasks in it'), BUCKET)),
    Endpoint('GET', '/api/activity', 'activity',
             'Runs that ended over time per queue or per task: succeeded, failed, cancelled, '
             'retried (attempts that failed and were retried) and the mean duration',
             _answer('the series', by=_text, bucket_sec=_int, window_sec=_int, series=_obj),
             (_param('by', 'queue (default) or task', one_of=['queue', 'task']),
              _param('window', 'seconds back; auto (default): the shortest of an hour, a '
                               'day and a week with runs in it'), BUCKET)),
    Endpoint('GET', '/api/schedules', 'list_schedules',
             'The periodic tasks: each schedule, its next run times, its last tick and the '
             "state of that tick's task; the broken ones (not run), each with its error; and "
             'the scheduler that leads',
             _answer('the schedules', schedules=_list, broken=_list,
                     leader={'type': 'object', 'nullable': True})),
    Endpoint('POST', '/api/schedules/{name}/run', 'run_schedule',
             'Publish one run of a schedule now, with a task id of its own',
             _answer('the task', 404, schedule=_text, task_id=_text), (SCHEDULE_NAME,)),
    Endpoint('GET', '/api/webhooks', 'list_webhooks',
             'Webhooks, oldest first, without their secrets or header values',
             _answer('the webhooks', webhooks=_list), (_param('topic', 'only those of this topic'),)),
    Endpoint('POST', '/api/webhooks', 'add_webhook',
             'Add a webhook; the answer holds its secret, shown only now. Needs the bearer '
             'token, or WEB_ALLOW_SUBMIT_WITHOUT_TOKEN',
             _answer('the webhook, with its secret', 403, **WEBHOOK, secret=_text),
             body={'type': 'object', 'required': ['topic', 'url'], 'properties': {
                 'topic': _text, 'url': _text, 'method': {'type': 'string',
                                                          'enum': ['POST', 'PUT', 'GET']},
                 'headers': {'type': 'object', 'additionalProperties': _text},
                 'labels': {'type': 'object', 'additionalProperties': _text}}}),
    Endpoint('DELETE', '/api/webhooks/{webhook_id}', 'remove_webhook', 'Delete a webhook',
             _answer('what was deleted', 404, deleted=_text), (WEBHOOK_ID,)),
    Endpoint('POST', '/api/webhooks/{webhook_id}/disable', 'disable_webhook',
             'Stop delivering to a webhook (its queued deliveries are skipped)',
             _answer('the webhook', 404, **WEBHOOK), (WEBHOOK_ID,)),
    Endpoint('POST', '/api/webhooks/{webhook_id}/enable', 'enable_webhook',
             'Deliver to a disabled webhook again',
             _answer('the webhook', 404, **WEBHOOK), (WEBHOOK_ID,)),
    Endpoint('POST', '/api/webhooks/{webhook_id}/test', 'test_webhook',
             'Publish one delivery of {"test": true} to the webhook; its task id',
             _answer('the delivery task', 404, task_id=_text), (WEBHOOK_ID,)),
)


def document(endpoints: Sequence[Endpoint] = ENDPOINTS) -> dict[str, Any]:
    """The OpenAPI 3.0 document of these endpoints."""
    from kale.submission import schema  # the submission's, as kale/schemas keeps it
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        operation: dict[str, Any] = {'summary': endpoint.summary,
                                     'operationId': endpoint.handler,
                                     'responses': endpoint.responses}
        if endpoint.parameters:
            operation['parameters'] = list(endpoint.parameters)
        if endpoint.body is not None:
            operation['requestBody'] = {'required': True, 'content': {
                'application/json': {'schema': endpoint.body}}}
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation
    return {
        'openapi': '3.0.3',
        'info': {'title': 'Kale task records', 'version': __version__,
                 'description': 'Task records, workflows, queues and workers of a Kale '
                                'deployment.'},
        'components': {'securitySchemes': {'bearer': {'type': 'http', 'scheme': 'bearer'}},
                       'schemas': {'Submission': schema()}},
        'security': [{}, {'bearer': []}],
        'paths': paths,
    }


#: The document ``/api/openapi.json`` serves.
OPENAPI = document()
