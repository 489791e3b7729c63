"""The web frameworks guide's examples (docs/how-to/django-fastapi.md) run as written: FastAPI and Flask
in this process (SendConfirmation and SendReminder from tests/web_tasks.py,
an ``engine`` with the outbox's tables, the ``Order`` model or the
``orders`` table given), Django in a copy of the test project through
real ``manage.py`` processes."""
import os
import re
import shutil

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.orm import declarative_base

from kale.store.sql.outbox_schema import init, open_database
from kale.store.sql.outbox_schema import outbox as outbox_table
from tests import web_tasks
from tests.e2e.test_django_e2e import PROJECT, Project
from tests.support.endpoint import ROOT
from tests.unit.test_apublish import queued


def python_blocks(heading):
    """The ```python blocks of the guide's section ``heading``."""
    text = open(os.path.join(ROOT, 'docs', 'how-to', 'django-fastapi.md')).read()
    section = text.split('\n%s\n' % heading, 1)[1].split('\n## ', 1)[0].split('\n### ', 1)[0]
    return re.findall(r'```python\n(.*?)```', section, re.S)


@pytest.fixture
def engine(tmp_path):
    engine = open_database('sqlite:///%s' % (tmp_path / 'app.db'))
    init(engine)
    yield engine
    engine.dispose()


def outbox_task_ids(engine):
    with engine.connect() as conn:
        return [row.task_id for row in conn.execute(select(outbox_table.c.task_id))]


def test_the_fastapi_example(memory_broker, engine):
    from fastapi.testclient import TestClient
    model = declarative_base()

    class Order(model):
        __tablename__ = 'orders'
        id = Column(Integer, primary_key=True)
        item = Column(String(100))
    model.metadata.create_all(engine)
    [block] = python_blocks('## FastAPI')
    namespace = {'engine': engine, 'Order': Order, 'SendConfirmation': web_tasks.SendConfirmation,
                 'SendReminder': web_tasks.SendReminder}
    exec(compile(block, 'docs/how-to/django-fastapi.md', 'exec'), namespace)
    with TestClient(namespace['api']) as client:
        created = client.post('/orders', params={'item': 'teapot'})
        reminded = client.post('/orders/1/reminder')
    assert created.status_code == 201 and created.json()['order'] == 1
    assert outbox_task_ids(engine) == [created.json()['task']]
    [message] = queued(memory_broker)
    assert (message.task_id, message.task_name, message.args) == (
        reminded.json()['task'], 'tests.web_tasks.SendReminder', (1,))


def test_the_flask_example(memory_broker, engine):
    orders = Table('orders', MetaData(), Column('id', Integer, primary_key=True),
                   Column('item', String(100)))
    orders.create(engine)
    [block] = python_blocks('## Flask')
    namespace = {'__name__': 'myapp', 'engine': engine, 'orders': orders,
                 'SendConfirmation': web_tasks.SendConfirmation,
                 'SendReminder': web_tasks.SendReminder}
    exec(compile(block, 'docs/how-to/django-fastapi.md', 'exec'), namespace)
    client = namespace['create_app']().test_client()
    created = client.post('/orders', data={'item': 'teapot'})
    reminded = client.post('/orders/1/reminder')
    assert created.status_code == 201 and created.json['order'] == 1
    assert outbox_task_ids(engine) == [created.json['task']]
    [message] = queued(memory_broker)
    assert (message.task_id, message.args) == (reminded.json['task'], (1,))


READMES_SETTINGS = '''import os

from project.settings import *  # noqa: F403
from project.settings import KALE as TEST_KALE

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != 'kale.contrib.django']  # noqa: F405
%s
KALE = {**TEST_KALE, **KALE}                # the guide's, on the test's endpoint and queues
'''
READMES_VIEW = '''from django.http import JsonResponse

from shop.models import Order
from shop.tasks import ChargeCard, SendConfirmation

%s'''


@pytest.mark.slow
def test_the_django_example(sqs, tmp_path):
    """The guide's settings and view in a copy of the test project: the
    view commits an order, its task on commit and another in the outbox;
    the relay and a worker run both."""
    from kale.records.recorder import reset_recorders
    root = tmp_path / 'project'
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns('__pycache__', '*.sqlite3'))
    settings_block, view_block = python_blocks('## Django')
    (root / 'project' / 'readme_settings.py').write_text(READMES_SETTINGS % settings_block)
    (root / 'shop' / 'readme_views.py').write_text(READMES_VIEW % view_block)
    runs = tmp_path / 'runs'
    project = Project(str(tmp_path / 'db.sqlite3'), sqs, root=str(root))
    project.env.update(DJANGO_SETTINGS_MODULE='project.readme_settings',
                       KALE_SIGNING_KEY='kale-readme-django-key-0123456789',
                       KALE_TEST_DJANGO_RUNS=str(runs))
    try:
        project.manage('check')
        project.manage('migrate')
        placed = project.manage('shell', '-c', (
            'from django.test import RequestFactory\n'
            'from shop.readme_views import place_order\n'
            "print(place_order(RequestFactory().post('/orders', {'item': 'teapot'})).content)"))
        assert '"order": 1' in placed.stdout
        project.manage('kale', 'relay', '--burst')
        project.manage('kale', 'worker', '--burst')
    finally:
        reset_recorders()
    assert sorted(runs.read_text().splitlines()) == ['ChargeCard 1', 'SendConfirmation 1']

