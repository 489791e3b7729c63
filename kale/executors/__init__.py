"""Tasks in any language: programs in an executor directory run as tasks
(docs/explanation/internals-workflow.md, "Executors")."""
from kale.executors.catalog import Catalog, MethodSettings, check_name
from kale.executors.program import Finished, run_program
from kale.executors.task import PREFIX, ExecutorTask, executor_task, method_of

__all__ = ['PREFIX', 'Catalog', 'ExecutorTask', 'Finished', 'MethodSettings', 'check_name',
           'executor_task', 'method_of', 'run_program']
