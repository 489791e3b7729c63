"""Tasks in any language: programs in an executor directory run as tasks.

``kale worker --executors DIR`` (``EXECUTOR_DIR``) runs a task whose method
is ``NAME`` as the program ``DIR/NAME``: its arguments as a JSON list on
standard input, its result as one JSON value on standard output (see
:mod:`kale.executors.task` for exit statuses and limits, and
:mod:`kale.executors.catalog` for which programs may run).
``executor_task(NAME)`` is the method's Task class, to publish it from
Python (``executor_task('send-mail').publish(None, 'a@b.c')``) or use it in
a workflow (``executor_task('send-mail').s(workflow.ref(save))``).
"""
from kale.executors.catalog import Catalog, MethodSettings, check_name
from kale.executors.program import Finished, run_program
from kale.executors.task import PREFIX, ExecutorTask, executor_task, method_of

__all__ = ['PREFIX', 'Catalog', 'ExecutorTask', 'Finished', 'MethodSettings', 'check_name',
           'executor_task', 'method_of', 'run_program']
