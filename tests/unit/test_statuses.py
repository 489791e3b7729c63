"""Statuses are enums: a member is its value wherever a string goes, and no
module but kale/statuses.py compares, sets or filters on a status literal."""
import ast
import json
import os

import kale
from kale.statuses import (
    PENDING_FILTER,
    PENDING_TASK,
    NodeStatus,
    TaskStatus,
    WorkerState,
    WorkflowStatus,
    status_values,
)

PACKAGE = os.path.dirname(kale.__file__)
VALUES = {member.value for status in (TaskStatus, WorkflowStatus, NodeStatus, WorkerState)
          for member in status} | {PENDING_FILTER}
#: Where a literal would stand for a status: keyword arguments and dict keys by these names.
STATUS_NAMES = ('status', 'state')


def test_a_status_is_its_value_in_strings_json_and_lookups():
    assert TaskStatus.QUEUED == 'queued' and 'queued' == TaskStatus.QUEUED
    assert '%s %s' % (TaskStatus.FAILED, f'{WorkflowStatus.RUNNING}') == 'failed running'
    assert json.dumps({'status': NodeStatus.PENDING}) == '{"status": "pending"}'
    assert {'lost': 1}[WorkerState.LOST] == 1 and TaskStatus('purged') is TaskStatus.PURGED
    assert status_values(WorkflowStatus) == ['running', 'succeeded', 'failed', 'cancelled']
    assert [status.final for status in PENDING_TASK] == [False, False, False]
    assert TaskStatus.DEDUPLICATED.final


def status_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants equal to a status where a status is meant: compared,
    passed as ``status=``/``state=``, a ``status`` key's value, or a member
    of a collection so compared or given to ``.in_()``."""
    found = []

    def literals(node: ast.AST) -> list[ast.Constant]:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [item for element in node.elts for item in literals(element)]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value in VALUES:
            return [node]
        return []

    for node in ast.walk(tree):
        suspects: list[ast.Constant] = []
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                suspects += literals(operand)
        elif isinstance(node, ast.keyword) and node.arg in STATUS_NAMES:
            suspects += literals(node.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in STATUS_NAMES:
                    suspects += literals(value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == 'in_':
            for argument in node.args:
                suspects += literals(argument)
        found += [(literal.lineno, literal.value) for literal in suspects]
    return found


def test_no_module_but_the_statuses_uses_a_status_literal():
    found = {}
    for folder, folders, files in os.walk(PACKAGE):
        folders[:] = [name for name in folders if name != '__pycache__']
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith('.py') and path != os.path.join(PACKAGE, 'statuses.py'):
                with open(path) as f:
                    literals = status_literals(ast.parse(f.read()))
                if literals:
                    found[os.path.relpath(path, PACKAGE)] = literals
    assert found == {}


def test_the_scan_finds_what_it_looks_for():
    source = ("if row.status == 'running': pass\n"
              "query.where(t.c.status.in_(('queued', 'scheduled')))\n"
              "update(status='failed')\n"
              "row = {'state': 'lost', 'reason': 'failed'}\n")
    assert sorted(status_literals(ast.parse(source))) == [
        (1, 'running'), (2, 'queued'), (2, 'scheduled'), (3, 'failed'), (4, 'lost')]
