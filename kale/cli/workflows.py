"""``kale workflows list|show|cancel|retry``: the workflows kept in the task records
(``RECORDS_URL``), as tables, or with ``--json`` as ``kale.workflow`` gives them."""
from __future__ import annotations

import argparse
import json
from typing import Any

from kale.cli.options import JSON, arg, command, counts_text, group, output, positive_int
from kale.cli.tasks import table
from kale.statuses import NodeStatus, WorkflowStatus, status_values

LIST_COLUMNS = [('ID', 'id'), ('STATUS', 'status'), ('SUCCEEDED', 'succeeded'),
                ('FAILED', 'failed'), ('CREATED', 'created_at'), ('LABELS', 'labels')]
NODE_COLUMNS = [('TASK ID', 'task_id'), ('TASK', 'task'), ('QUEUE', 'queue'),
                ('STATE', 'state'), ('UPSTREAM', 'after'), ('REASON', 'reason')]
SUMMARY_FIELDS = ('id', 'status', 'labels', 'created_at', 'deadline_at', 'finished_at')
#: How many hex digits of an upstream task id ``show`` prints (``kale tasks
#: show`` takes such a prefix).
SHORT_ID = 8


def cmd_list(args: argparse.Namespace) -> int:
    from kale import workflow
    found = workflow.list_workflows(status=args.status, limit=args.limit)
    rows = [dict(row, succeeded='%d/%d' % (row['node_states'].get(NodeStatus.SUCCEEDED, 0),
                                            row['node_count']),
                 failed=row['node_states'].get(NodeStatus.FAILED, 0)) for row in found]
    return output(args, found, table(LIST_COLUMNS, rows) if rows else 'no workflows%s' % (
        ' %s' % args.status if args.status else ''))


def roots_first(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``nodes`` in layers: those without upstream, then those whose upstream
    are all in earlier layers, and so on; the given order within a layer."""
    index = {node['task_id']: i for i, node in enumerate(nodes)}
    missing = _upstream_counts(nodes, index)
    ordered: list[dict[str, Any]] = []
    layer = [node for node in nodes if not missing[node['task_id']]]
    while layer:
        ordered.extend(layer)
        layer = _next_layer(nodes, index, missing, layer)
    placed = {node['task_id'] for node in ordered}
    return ordered + [node for node in nodes if node['task_id'] not in placed]


def _upstream_counts(nodes: list[dict[str, Any]], index: dict[str, int]) -> dict[str, int]:
    """How many of each node's upstream are among ``nodes``, by task id."""
    return {node['task_id']: sum(1 for up in node['upstream'] if up in index) for node in nodes}


def _next_layer(nodes: list[dict[str, Any]], index: dict[str, int], missing: dict[str, int],
                layer: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes whose last upstream not placed yet is in ``layer``, in the given
    order (``missing``: each node's upstream not placed yet, counted down)."""
    following = []
    for node in layer:
        for later in node['downstream']:
            if later in missing:
                missing[later] -= 1
                if not missing[later]:
                    following.append(nodes[index[later]])
    return sorted(following, key=lambda node: index[node['task_id']])


def cmd_show(args: argparse.Namespace) -> int:
    from kale import workflow
    described = workflow.get(args.workflow_id).describe()
    width = max(len(key) for key in SUMMARY_FIELDS)
    lines = ['%s  %s' % (key.ljust(width), json.dumps(described[key], sort_keys=True)
                         if key == 'labels' else described[key] or '-') for key in SUMMARY_FIELDS]
    lines.append('%s  %d: %s' % ('nodes'.ljust(width), described['node_count'],
                                 counts_text(described['node_states'])))
    rows = [dict(node, after=[up[:SHORT_ID] for up in node['upstream']])
            for node in roots_first(described['nodes'])]
    return output(args, described, '\n'.join(lines + ['', table(NODE_COLUMNS, rows)]))


def _change(args: argparse.Namespace, change: Any) -> tuple[str, dict[str, int], dict[str, Any]]:
    """``change`` (cancel or retry) the workflow: its id, its node states
    before, and its fields after (nodes and edges left out)."""
    from kale import workflow
    found = workflow.get(args.workflow_id)
    before = found.describe()['node_states']
    change(found.id)
    return found.id, before, {key: value for key, value in found.describe().items()
                              if key not in ('nodes', 'edges')}


def cmd_cancel(args: argparse.Namespace) -> int:
    from kale import workflow
    workflow_id, before, summary = _change(args, workflow.cancel)
    cancelled = summary['node_states'].get(NodeStatus.CANCELLED, 0) - before.get(
        NodeStatus.CANCELLED, 0)
    return output(args, dict(summary, cancelled_nodes=cancelled),
                  'workflow %s: %s; %d node%s cancelled now (%s)%s' % (
                      workflow_id, summary['status'], cancelled, '' if cancelled == 1 else 's',
                      counts_text(summary['node_states']),
                      '' if cancelled or summary['status'] == WorkflowStatus.CANCELLED
                      else '; it had already ended'))


def cmd_retry(args: argparse.Namespace) -> int:
    from kale import workflow
    workflow_id, before, summary = _change(args, workflow.retry)
    again = sum(before.get(state, 0) for state in (NodeStatus.FAILED, NodeStatus.CANCELLED,
                                                    NodeStatus.PENDING))
    return output(args, dict(summary, nodes_run_again=again),
                  'workflow %s: %s; %d node%s to run again, %d succeeded kept (%s)' % (
                      workflow_id, summary['status'], again, '' if again == 1 else 's',
                      before.get(NodeStatus.SUCCEEDED, 0), counts_text(summary['node_states'])))


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale workflows``."""
    sub = group(commands, 'workflows', 'workflows: list, show, cancel, retry',
                'Workflows submitted with kale.workflow.submit, read from the task records '
                '(RECORDS_URL): list them, show one node by node, cancel one (every node not '
                'ended yet is cancelled, its task too if it was published), or retry a failed or '
                'cancelled one. Tables by default; --json prints what kale.workflow gives.')
    command(sub, 'list', cmd_list, 'workflows, newest first',
            'Workflows, newest first: status, nodes succeeded of all, nodes failed.',
            arg('--status', help=', '.join(status_values(WorkflowStatus))),
            arg('--limit', type=positive_int, default=50,
                help='at most N, up to 1000 (default 50)'), JSON)
    for name, func, text, description in (
            ('show', cmd_show, "one workflow's fields and nodes",
             "A workflow's fields, then its nodes, each after its upstream (roots first): task "
             'id, task, queue, state, the first %d digits of its upstream task ids and why it '
             'failed or was cancelled. --json adds the edges [from, to].' % SHORT_ID),
            ('cancel', cmd_cancel, 'cancel every node not ended yet, and the workflow',
             'Cancel the workflow: every node that has not ended is cancelled (a published task '
             'is deleted unrun; one already running has its result thrown away). Prints the '
             'resulting status and how many nodes this cancelled; a workflow already ended is '
             'left as it is.'),
            ('retry', cmd_retry, 'run a failed or cancelled workflow again',
             'Run a failed or cancelled workflow again: its nodes that failed, were cancelled or '
             'never ran run again (each join once all its inputs succeeded); nodes that '
             'succeeded keep their results and do not run again. A workflow running or '
             'succeeded is refused.')):
        command(sub, name, func, text, description, arg('workflow_id', metavar='WORKFLOW_ID'),
                JSON)
