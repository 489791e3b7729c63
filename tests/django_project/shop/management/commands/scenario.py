"""``manage.py scenario NAME PATH``: publish Note tasks (appending to PATH)
in one of the ways the tests check, and print what was published as JSON:
``{"committed": [task ids], "rolled_back": [task ids]}``."""
import json

from django.core.management.base import BaseCommand
from django.db import transaction

from kale.contrib.django import outbox, publish_batch_on_commit, publish_on_commit
from shop.models import Order
from shop.tasks import Note


class RollBack(Exception):
    pass


def commit(path):
    with transaction.atomic():
        Order.objects.create(item='committed')
        task_id = publish_on_commit(Note, None, path, 'committed')
        batch = publish_batch_on_commit(Note, None, [((path, 'batch 1'), {}),
                                                     ((path, 'batch 2'), {})])
    return {'committed': [task_id, *batch], 'rolled_back': []}


def rollback(path):
    try:
        with transaction.atomic():
            Order.objects.create(item='rolled back')
            task_id = publish_on_commit(Note, None, path, 'rolled back')
            raise RollBack
    except RollBack:
        pass
    return {'committed': [], 'rolled_back': [task_id]}


def nested(path):
    with transaction.atomic():
        outer = publish_on_commit(Note, None, path, 'outer')
        try:
            with transaction.atomic():
                inner = publish_on_commit(Note, None, path, 'inner rolled back')
                with transaction.atomic():
                    innermost = publish_on_commit(Note, None, path, 'innermost rolled back')
                raise RollBack
        except RollBack:
            pass
        with transaction.atomic():
            kept = publish_on_commit(Note, None, path, 'inner kept')
    return {'committed': [outer, kept], 'rolled_back': [inner, innermost]}


def outside(path):
    return {'committed': [publish_on_commit(Note, None, path, 'outside')], 'rolled_back': []}


def in_outbox(path):
    with transaction.atomic():
        Order.objects.create(item='outbox')
        task_id = outbox.publish(Note, None, path, 'outbox committed')
    try:
        with transaction.atomic():
            Order.objects.create(item='outbox rolled back')
            lost = outbox.publish(Note, None, path, 'outbox rolled back')
            raise RollBack
    except RollBack:
        pass
    return {'committed': [task_id], 'rolled_back': [lost]}


SCENARIOS = {'commit': commit, 'rollback': rollback, 'nested': nested, 'outside': outside,
             'outbox': in_outbox}


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument('name', choices=sorted(SCENARIOS))
        parser.add_argument('path')

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(SCENARIOS[options['name']](options['path'])))
