"""The package's shape: no import cycles, small modules, typed, and every
documented path importable."""
import glob
import importlib
import os

import pytest

import kale
from kale import exceptions
from tests.support.import_graph import circles, describe, import_graph, strongly_connected

PACKAGE_DIR = os.path.dirname(kale.__file__)
MAX_MODULE_LINES = 450


def test_the_cycle_finder_finds_a_cycle():
    assert sorted(map(sorted, strongly_connected({'a': {'b'}, 'b': {'a'}, 'c': {'a'}}))) == \
        [['a', 'b'], ['c']]


def test_the_import_graph_sees_every_kind_of_import():
    """Imports inside functions and through importlib with a literal name
    count; those under ``if TYPE_CHECKING:`` do not."""
    graph = import_graph()
    assert 'kale.conf' in graph['kale']                          # at the top
    assert 'kale.transport.sqs' in graph['kale.app']             # inside a method
    assert 'kale.worker.batch' not in graph['kale.hooks']        # only for the type checker


def test_no_module_imports_itself_back():
    """No circle of more than one module, at run time: a lower module that
    needs something of a higher one gets it handed down by the app."""
    assert [describe(group) for group in circles()] == []


def test_no_module_is_over_450_lines():
    long_modules = {}
    for folder, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                with open(path) as f:
                    lines = sum(1 for _ in f)
                if lines > MAX_MODULE_LINES:
                    long_modules[os.path.relpath(path, PACKAGE_DIR)] = lines
    assert long_modules == {}


def test_the_package_says_it_is_typed():
    assert os.path.exists(os.path.join(PACKAGE_DIR, 'py.typed'))


@pytest.mark.parametrize('path', [
    'kale.task.Task', 'kale.task.SKIPPED', 'kale.worker.Worker', 'kale.worker.EXIT_OK',
    'kale.worker.EXIT_MEMORY_LIMIT', 'kale.hooks.WorkerHooks', 'kale.hooks.PublishHooks',
    'kale.queue_selector.ReducedLottery', 'kale.queue_selector.SelectQueueBase',
    'kale.queue_selector.Random', 'kale.queue_selector.Lottery',
    'kale.queue_selector.HighestPriorityFirst', 'kale.queue_selector.HighestPriorityLottery',
    'kale.queue_selector.LotteryLottery', 'kale.queue_config.TaskQueue',
    'kale.timeout.BaseTimeout', 'kale.timeout.SignalTimeout', 'kale.timeout.NoTimeout',
    'kale.testing.eager', 'kale.testing.run_eagerly', 'kale.exceptions.KaleError',
    'kale.exceptions.NonRetriableTaskError', 'kale.transport.memory.MemoryTransport',
    'kale.transport.Transport', 'kale.codec.build_codec', 'kale.settings',
])
def test_documented_paths_import(path):
    module_name, _, name = path.rpartition('.')
    assert getattr(importlib.import_module(module_name), name) is not None


def test_exceptions_exports_only_its_own_names():
    exported = [getattr(exceptions, name) for name in exceptions.__all__]
    assert all(isinstance(item, type) and issubclass(item, Exception) for item in exported[:-1])
    assert exported[-1:] == [exceptions.describe]
    assert 'Any' not in exceptions.__all__ and 'Optional' not in exceptions.__all__


def test_every_kale_exception_lives_in_the_exceptions_module():
    strays = []
    for folder, _, files in os.walk(PACKAGE_DIR):
        if os.path.basename(folder) == 'presets':      # settings modules, not code
            continue
        for name in files:
            if name.endswith('.py') and name != 'exceptions.py':
                module_path = os.path.relpath(os.path.join(folder, name), os.path.dirname(PACKAGE_DIR))
                module = importlib.import_module(module_path[:-3].replace(os.sep, '.')
                                                 .replace('.__init__', ''))
                strays += ['%s.%s' % (module.__name__, k) for k, v in vars(module).items()
                           if isinstance(v, type) and issubclass(v, exceptions.KaleError)
                           and v.__module__ == module.__name__]
    assert strays == []


#: Modules whose every function is short and simple (radon: complexity under
#: C, i.e. at most 10, and at most 60 lines): the publish pipeline's.
SIMPLE_MODULES = ('publisher.py', 'publication.py', 'publish_checks.py', 'outbox/publish.py')


def test_the_publish_pipeline_has_no_long_or_complex_function():
    from radon.complexity import cc_visit
    found = []
    for name in SIMPLE_MODULES:
        with open(os.path.join(PACKAGE_DIR, name)) as f:
            blocks = cc_visit(f.read())
        for block in blocks:
            lines = block.endline - block.lineno + 1
            if block.complexity > 10 or (block.letter in 'FM' and lines > 60):
                found.append('%s %s: complexity %d, %d lines' % (name, block.fullname,
                                                                  block.complexity, lines))
    assert found == []


def test_no_function_in_the_package_is_complex():
    """radon's grade C or worse (complexity above 10) nowhere in kale/: a
    function that grew that far is split into named steps."""
    from radon.complexity import cc_visit
    found = []
    for path in sorted(glob.glob(os.path.join(PACKAGE_DIR, '**', '*.py'), recursive=True)):
        with open(path) as f:
            blocks = cc_visit(f.read())
        found += ['%s %s: complexity %d' % (os.path.relpath(path, PACKAGE_DIR), block.fullname,
                                            block.complexity)
                  for block in blocks if block.complexity > 10]
    assert found == []
