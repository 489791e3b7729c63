"""The OpenAPI description of ``kale web``'s REST API, served at
``/api/openapi.json``."""
from __future__ import annotations

from typing import Any

from kale.version import __version__


def _param(name: str, description: str, kind: str = 'string', where: str = 'query',
           required: bool = False) -> dict[str, Any]:
    return {'name': name, 'in': where, 'required': required, 'description': description,
            'schema': {'type': kind}}


FILTERS = [
    _param('status', 'queued, running, scheduled, succeeded, failed, cancelled, purged, '
                     'deduplicated or pending (queued + running + scheduled); several separated '
                     'by commas'),
    _param('task', 'task path (module.Class), or a class name'),
    _param('queue', 'queue name from the queue config'),
    {'name': 'label.KEY', 'in': 'query', 'required': False,
     'description': 'label KEY equals the value, e.g. label.tenant=t1',
     'schema': {'type': 'string'}},
    _param('since', 'published at or after: epoch seconds or ISO 8601'),
    _param('until', 'published before: epoch seconds or ISO 8601'),
]
TASK_ID = _param('task_id', 'the task id, or a unique prefix of it (4 characters or more)',
                 where='path', required=True)
ERROR = {'description': 'one-line reason', 'content': {'application/json': {'schema': {
    'type': 'object', 'properties': {'error': {'type': 'string'}}}}}}


def _answer(description: str, **properties: Any) -> dict[str, Any]:
    return {'200': {'description': description, 'content': {'application/json': {'schema': {
        'type': 'object', 'properties': properties}}}},
        '400': ERROR, '401': ERROR, '503': ERROR}


_obj: dict[str, Any] = {'type': 'object'}
_list: dict[str, Any] = {'type': 'array', 'items': _obj}
_int: dict[str, Any] = {'type': 'integer'}

OPENAPI: dict[str, Any] = {
    'openapi': '3.0.3',
    'info': {'title': 'Kale task records', 'version': __version__,
             'description': 'Task records, queues and workers of a Kale deployment.'},
    'components': {'securitySchemes': {'bearer': {'type': 'http', 'scheme': 'bearer'}}},
    'security': [{}, {'bearer': []}],
    'paths': {
        '/api/tasks': {
            'get': {'summary': 'Tasks, newest first, without their inputs (keyset pages)',
                    'parameters': FILTERS + [_param('limit', '1..1000, default 50', 'integer'),
                                             _param('cursor', '"next" of the previous page')],
                    'responses': _answer('a page', tasks=_list,
                                         next={'type': 'string', 'nullable': True})},
            'delete': {'summary': 'Delete matching records (all=true to delete every one)',
                       'parameters': FILTERS + [_param('all', 'true to delete with no filter',
                                                       'boolean')],
                       'responses': _answer('how many were deleted', deleted=_int)}},
        '/api/tasks/count': {'get': {'summary': 'How many records match', 'parameters': FILTERS,
                                     'responses': _answer('the count', count=_int)}},
        '/api/tasks/summary': {'get': {
            'summary': 'Counts by status, by task and by queue', 'parameters': FILTERS,
            'responses': _answer('the counts', by_status=_obj, by_task=_obj, by_queue=_obj)}},
        '/api/tasks/retry': {'post': {
            'summary': 'Retry every failed task the filter matches, each once (at most 1000)',
            'parameters': FILTERS,
            'responses': _answer('what was published', published=_list, already_retried=_int,
                                 refused=_list)}},
        '/api/tasks/{task_id}': {'get': {
            'summary': 'The whole record: inputs, error, result and attempt_history included',
            'parameters': [TASK_ID],
            'responses': {**_answer('the record'), '404': ERROR}}},
        '/api/tasks/{task_id}/retry': {'post': {
            'summary': 'Publish a failed task again from its stored inputs, once (a second '
                       'retry answers with the first one\'s task, published false)',
            'parameters': [TASK_ID],
            'responses': {**_answer('the new task', id={'type': 'string'},
                                    retry_of={'type': 'string'},
                                    published={'type': 'boolean'}), '404': ERROR,
                          '409': ERROR}}},
        '/api/tasks/{task_id}/cancel': {'post': {
            'summary': 'Cancel a task that has not started', 'parameters': [TASK_ID],
            'responses': {**_answer('the record'), '404': ERROR, '409': ERROR}}},
        '/api/queues': {'get': {
            'summary': 'Every configured queue and its message counts',
            'responses': _answer('the queues', queues=_list)}},
        '/api/queues/{name}/redrive': {'post': {
            'summary': "Move the queue's dead letters back to it",
            'parameters': [_param('name', 'queue name', where='path', required=True),
                           _param('limit', 'move at most this many', 'integer'),
                           _param('reason', 'move only dead letters of this reason'),
                           _param('dry_run', 'move nothing; say what would move', 'boolean')],
            'responses': _answer('what moved', moved=_int, skipped=_int)}},
        '/api/queues/{name}/purge': {'post': {
            'summary': 'Delete every message of the queue; its waiting records become purged',
            'parameters': [_param('name', 'queue name', where='path', required=True),
                           _param('confirm', 'the queue name again', required=True)],
            'responses': _answer('what was purged', queue={'type': 'string'},
                                 records_marked_purged=_int)}},
        '/api/workers': {'get': {
            'summary': 'Worker and supervisor processes',
            'parameters': [_param('state', 'running, stopped or lost')],
            'responses': _answer('the workers', workers=_list)}},
        '/api/timeline': {'get': {
            'summary': 'Tasks finished and mean duration per task over time',
            'parameters': [_param('window', 'seconds back, default 3600; auto: the shortest of '
                                            'an hour, a day and a week with tasks in it'),
                           _param('bucket', 'seconds per point', 'number')],
            'responses': _answer('the series', series=_obj)}},
    },
}
