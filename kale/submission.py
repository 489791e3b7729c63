"""Tasks submitted as JSON (``kale submit FILE``, ``POST /api/workflows``)
against ``kale/schemas/submission.schema.json``: checked whole, then published
as a task or a workflow (docs/explanation/internals-top.md, "Submissions")."""
from __future__ import annotations

import functools
import graphlib
import json
import os
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale import internal
from kale.exceptions import DecodeError, KaleError, SubmissionError
from kale.signature import Signature

if TYPE_CHECKING:
    from kale.app import App

#: The schema file, shipped in the package.
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'schemas',
                           'submission.schema.json')
#: Largest document accepted, in bytes.
MAX_BYTES = 16 * 1024 * 1024


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    with open(SCHEMA_PATH) as f:
        loaded: dict[str, Any] = json.load(f)
    return loaded


def parse(text: str | bytes) -> Any:
    """The JSON document, or SubmissionError saying where it is not JSON."""
    if len(text) > MAX_BYTES:
        raise SubmissionError('the submission is %d bytes, over the %d accepted'
                              % (len(text), MAX_BYTES))
    try:
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise SubmissionError('the submission is not UTF-8 text: %s' % exc) from None
    except ValueError as exc:
        raise SubmissionError('the submission is not JSON: %s' % exc) from None


def validate(document: Any) -> None:
    """SubmissionError naming the first place ``document`` breaks the schema."""
    try:
        import jsonschema
    except ImportError:          # pragma: no cover - depends on the extras installed
        raise SubmissionError('checking a submission needs jsonschema: pip install '
                              '"kale-sqs[submit]"') from None
    validator = jsonschema.Draft202012Validator(schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = ''.join('[%d]' % part if isinstance(part, int) else '.%s' % part
                        for part in error.absolute_path).lstrip('.')
        raise SubmissionError('%s%s' % ('%s: ' % where if where else '', error.message[:300]))


def _entry_ids(entries: list[dict[str, Any]]) -> list[str]:
    ids = [entry.get('id', str(index)) for index, entry in enumerate(entries)]
    seen: set[str] = set()
    for index, entry_id in enumerate(ids):
        if entry_id in seen:
            raise SubmissionError('tasks[%d]: id %r is given to two entries' % (index, entry_id))
        seen.add(entry_id)
    return ids


def _refs(entry: dict[str, Any]) -> list[str]:
    arguments = list(entry.get('args', ())) + list(entry.get('kwargs', {}).values())
    return [argument['ref'] for argument in arguments if 'ref' in argument]


def _order(entries: list[dict[str, Any]], ids: list[str]) -> list[int]:
    """Entry indexes, each after the entries it references; SubmissionError
    for a reference to nothing or a cycle."""
    index_of = {entry_id: index for index, entry_id in enumerate(ids)}
    for index, entry in enumerate(entries):
        for ref in _refs(entry):
            if ref not in index_of:
                raise SubmissionError('tasks[%d] (%s): ref %r names no entry'
                                      % (index, ids[index], ref))
            if ref == ids[index]:
                raise SubmissionError('tasks[%d] (%s): refers to itself' % (index, ids[index]))
    graph = {index: {index_of[ref] for ref in _refs(entry)} for index, entry in enumerate(entries)}
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:        # its cycle runs from reference to referrer
        cycle = [ids[index] for index in reversed(exc.args[1])]
        raise SubmissionError('the references make a cycle: %s' % ' -> '.join(cycle)) from None


def _task_class(index: int, entry_id: str, entry: dict[str, Any], app: 'App') -> Any:
    where = 'tasks[%d] (%s)' % (index, entry_id)
    if 'method' in entry:
        from kale.executors.task import executor_task
        try:
            return executor_task(entry['method'], app=app)
        except KaleError as exc:
            raise _refused(where, exc) from None
    try:
        task_class = app.registry.resolve(entry['task'])
    except DecodeError as exc:
        raise SubmissionError('%s: %s' % (where, str(exc).split(': ', 1)[-1])) from None
    refused = internal.refuse(task_class)
    if refused:
        raise SubmissionError('%s: %s' % (where, refused))
    return task_class


def _given_labels(document: Any, labels: Optional[Mapping[str, str]]) -> dict[str, str]:
    """The document's labels with ``labels`` over them, as strings (booleans as JSON spells them)."""
    given = dict(document.get('labels') or {}, **(labels or {}))
    return {key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in given.items()}


def _argument(value: dict[str, Any], ids: list[str], nodes: dict[int, Signature]) -> Any:
    """An entry's argument: its JSON value, or a reference to the result of the entry it names."""
    if 'ref' in value:
        from kale import workflow
        return workflow.ref(nodes[ids.index(value['ref'])])
    return value['value']


def _node(index: int, entry: dict[str, Any], ids: list[str],
          nodes: dict[int, Signature], app: 'App') -> Signature:
    """The signature of entry ``index``, its references to the ``nodes`` made before it."""
    task_class = _task_class(index, ids[index], entry, app)
    target = task_class.with_options(queue=entry['queue']) if 'queue' in entry else task_class
    args = [_argument(value, ids, nodes) for value in entry.get('args', ())]
    kwargs = {key: _argument(value, ids, nodes) for key, value in entry.get('kwargs', {}).items()}
    try:
        if 'method' in entry and kwargs:
            task_class.check_call(tuple(args), kwargs)
        app.publisher.queue_of(task_class, entry.get('queue'))
        return target.s(*args, **kwargs)
    except KaleError as exc:
        raise _refused('tasks[%d] (%s)' % (index, ids[index]), exc) from None


def submit(document: Any, app: 'App', labels: Optional[Mapping[str, str]] = None
           ) -> dict[str, Any]:
    """Check and submit a parsed submission through ``app``; returns
    ``{"workflow_id": id or None, "tasks": {entry id: task id}}``."""
    validate(document)
    entries: list[dict[str, Any]] = document['tasks']
    ids = _entry_ids(entries)
    order = _order(entries, ids)
    given_labels = _given_labels(document, labels)
    nodes: dict[int, Signature] = {}
    for index in order:
        nodes[index] = _node(index, entries[index], ids, nodes, app)
    if len(entries) == 1 and not _refs(entries[0]):
        return _publish_one(ids[0], entries[0], nodes[0], given_labels,
                            document.get('deadline_sec'), app)
    return _submit_workflow(document, ids, nodes, given_labels, app)


def _submit_workflow(document: Any, ids: list[str], nodes: dict[int, Signature],
                     labels: dict[str, str], app: 'App') -> dict[str, Any]:
    """Submit the entries' ``nodes`` as one workflow of the document."""
    from kale import workflow
    flow = workflow.group(*(nodes[index] for index in range(len(ids))))
    try:
        submitted = workflow.submit(flow, labels=labels or None,
                                    deadline_sec=document.get('deadline_sec'), app=app)
    except KaleError as exc:
        raise SubmissionError(_named(str(exc), ids, nodes),
                              public=_named(exc.public or str(exc), ids, nodes)) from None
    return {'workflow_id': submitted.id,
            'tasks': {ids[index]: nodes[index].task_id for index in range(len(ids))}}


def _publish_one(entry_id: str, entry: dict[str, Any], node: Signature,
                 labels: dict[str, str], deadline_sec: Optional[float],
                 app: 'App') -> dict[str, Any]:
    if deadline_sec is not None:
        raise SubmissionError('deadline_sec is for workflows: a single task has its time '
                              'limit instead')
    try:
        app.publisher.publish_batch(node.task_class, None, [(node.args, node.kwargs)],
                                    labels=labels or None, queue_name=entry.get('queue'),
                                    task_ids=[node.task_id])
    except KaleError as exc:
        raise _refused('tasks[0] (%s)' % entry_id, exc) from None
    return {'workflow_id': None, 'tasks': {entry_id: node.task_id}}


def _refused(where: str, exc: KaleError) -> SubmissionError:
    """The SubmissionError of ``exc`` at entry ``where``, ``public`` too."""
    return SubmissionError('%s: %s' % (where, exc), public='%s: %s' % (where, exc.public or exc))


def _named(text: str, ids: list[str], nodes: dict[int, Signature]) -> str:
    """An error about a node, its task id replaced by the entry's id."""
    for index, node in nodes.items():
        text = text.replace(node.task_id, '%s (tasks[%d])' % (ids[index], index))
    return text
