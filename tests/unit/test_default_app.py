"""The default app is reached only by the entry points and the module-level
conveniences: every other part of Kale is given its app's parts (issue 55).
Read from the source with ast, every call counted, at the top of a module
or inside a function."""
import ast
import os

import kale
from tests.support.import_graph import module_files

PACKAGE_DIR = os.path.dirname(kale.__file__)

#: The calls that reach the default app, or a part of it, from anywhere.
ACCESSORS = frozenset({
    'default_app', 'default_config', 'get_publisher', 'app_of',
    # the per-configuration part caches the app's parts replaced
    'get_broker', 'get_codec', 'get_registry', 'get_recorder', 'get_queue_config',
    'get_transport', 'get_sns', 'get_payload_store', 'get_schedules', 'get_subscriptions',
    'resolve_task',
})

#: The modules that may, each a line that picks the default app and calls
#: the app's own method; and why.
ALLOWED = {
    'kale.app': 'defines it',
    'kale.default': 'the way to it from below kale.app',
    'kale.cli': 'the command line',
    'kale.contrib.django': 'Django',
    'kale.web.app': '`kale web` and create_app() without an app',
    'kale.web.server': '`kale web`',
    'kale.task': 'MyTask.publish, with_options(...).publish, and the app running a task made '
                 'outside a worker',
    'kale.records': 'kale.records.get, retry, ...',
    'kale.records.controls': 'kale.records.controls.pause_queue, ...',
    'kale.workflow.run': 'kale.workflow.submit, get, ...',
    'kale.webhooks.store': 'kale.webhooks.add, remove, ...',
    'kale.webhooks.fanout': 'kale.webhooks.deliver, send_test',
    'kale.topics.publish': 'kale.topics.publish',
    'kale.outbox.publish': 'kale.outbox.publish',
    'kale.executors.task': 'kale.executors.executor_task',
    'kale.codec': 'kale.codec.encode, decode, to_outgoing',
    'kale.testing': 'eager mode',
    'kale.worker.base': 'Worker() without an app',
    # Until the worker engine is one (issue 55, item 4): TaskRunner() alone.
    'kale.worker.runner': 'TaskRunner() without an app',
}


#: Of those, the packages whose every module may (the others: that module only).
WHOLE_PACKAGES = ('kale.cli', 'kale.contrib.django')


def _allowed(module: str) -> bool:
    return module in ALLOWED or module.startswith(tuple(name + '.' for name in WHOLE_PACKAGES))


def accessor_calls() -> dict[str, list[int]]:
    """module -> the lines of its calls of an accessor."""
    found: dict[str, list[int]] = {}
    for module, path in module_files().items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else \
                    func.attr if isinstance(func, ast.Attribute) else None
                if name in ACCESSORS:
                    found.setdefault(module, []).append(node.lineno)
    return found


def test_no_part_below_the_entry_points_reaches_for_the_default_app():
    outside = {module: lines for module, lines in accessor_calls().items()
               if not _allowed(module)}
    assert outside == {}


def test_every_allowed_module_still_needs_it():
    """The list only shrinks: a module that no longer reaches for the
    default app leaves it."""
    calls = accessor_calls()
    unused = [name for name in ALLOWED if name not in ('kale.app', 'kale.default') and not any(
        module == name or (module.startswith(name + '.') and name in WHOLE_PACKAGES)
        for module in calls)]
    assert unused == []


def test_the_part_caches_of_a_configuration_are_gone():
    """No function of Kale gives a part of the default app, or one cached
    for a configuration: an app builds its own."""
    defined = []
    for module, path in module_files().items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        defined += ['%s.%s' % (module, node.name) for node in ast.walk(tree)
                    if isinstance(node, ast.FunctionDef)
                    and node.name in ACCESSORS - {'default_app'}]
    assert defined == []
