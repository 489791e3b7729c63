"""The store seam is closed at import: with only the core install (no
SQLAlchemy), an app whose records are ``memory://`` publishes, works,
records and answers questions about its tasks; and no module of Kale
outside ``kale/store`` imports SQLAlchemy."""
import ast
import json
import subprocess
import sys

from tests.support.endpoint import ROOT, subprocess_env
from tests.support.import_graph import module_files

#: Runs in a fresh interpreter in which SQLAlchemy cannot be imported: an app
#: on the in-memory transport, its records on memory://, publishes a task and
#: a workflow and works them; prints what its records say and what got imported.
SCRIPT = r'''
import json, sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'sqlalchemy':
            raise ImportError('No module named %r (blocked by the test)' % name)

sys.meta_path.insert(0, Missing())

from kale import App, records, workflow
from kale.config import Config
from kale.transport.memory import MemoryTransport
from kale.worker import Worker
from tests import tasks
from tests import workflow_tasks as wt

app = App(Config.load('tests.kale_test_settings'), transport=MemoryTransport(),
          RECORDS_URL='memory://core')
task_id = app.publish(tasks.AddTask, None, 1, 2)
flow = workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(10)), app=app)
codes = [Worker(app=app, burst=True).run() for _ in range(3)]
print(json.dumps({
    'codes': codes,
    'status': records.get(task_id, app=app).status,
    'workflow': workflow.get(flow.id, app=app).result(),
    'counted': records.queries(app=app).count(records.TaskFilter()),
    'loaded': sorted(name for name in sys.modules
                     if name.split('.')[0] == 'sqlalchemy' or name.startswith('kale.store.sql')),
}))
'''


def test_memory_records_work_without_sqlalchemy():
    result = subprocess.run([sys.executable, '-c', SCRIPT], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {'codes': [0, 0, 0], 'status': 'succeeded', 'workflow': 13, 'counted': 3,
                       'loaded': []}


def test_no_module_outside_the_store_imports_sqlalchemy():
    """Not at the top, not inside a function, not for the type checker:
    what Kale does with a database is a named operation of a store."""
    importing = []
    for module, path in module_files().items():
        if module == 'kale.store' or module.startswith('kale.store.'):
            continue
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ''] if isinstance(node, ast.ImportFrom) and not node.level \
                else []
            if any(name.split('.')[0] == 'sqlalchemy' for name in names):
                importing.append('%s:%d' % (module, node.lineno))
    assert importing == []
