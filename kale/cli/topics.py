"""``kale topics sync|list``: the SNS topics that TASK_MODULES' subscriber
classes name, their subscriptions and the queue policies that let them deliver."""
from __future__ import annotations

import argparse
from typing import Any

from kale.app import default_app
from kale.cli.options import JSON, command, group, output
from kale.cli.tasks import table
from kale.exceptions import CommandError

COLUMNS = [('TOPIC', 'topic'), ('SUBSCRIBER', 'task'), ('QUEUE', 'queue'),
           ('LABELS', 'labels'), ('SUBSCRIBED', 'subscribed')]


def _subscriptions() -> object:
    found = default_app().subscriptions
    if not found.searched:
        raise CommandError('TASK_MODULES is empty: name the modules of your subscriber task '
                           'classes there (subscribers are found by importing them)')
    return found


def cmd_sync(args: argparse.Namespace) -> int:
    from kale.topics.sync import sync
    _subscriptions()
    lines = sync(default_app())
    for line in lines:
        print('subscribed: %s' % line)
    if not lines:
        print('no task class of TASK_MODULES subscribes to a topic')
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from kale.topics.sync import describe
    _subscriptions()
    found = describe(default_app())
    rows = [row for topic in found for row in _topic_rows(topic)]
    return output(args, found, table(COLUMNS, rows) if rows else
                  'no task class of TASK_MODULES subscribes to a topic')


def _topic_rows(topic: dict[str, Any]) -> list[dict[str, str]]:
    """A row per subscriber class of the topic, then one per queue SNS delivers
    to that no class declares."""
    queues = {sub['queue'] for sub in topic['subscriptions'] or []}
    rows = [_subscriber_row(topic, sub, queues) for sub in topic['subscribers']]
    known = {sub['sqs_name'] for sub in topic['subscribers']}
    rows.extend({'topic': topic['topic'], 'task': '(none in TASK_MODULES)', 'queue': queue,
                 'labels': '-', 'subscribed': 'yes'} for queue in sorted(queues - known))
    return rows


def _subscriber_row(topic: dict[str, Any], sub: dict[str, Any],
                    queues: set[str]) -> dict[str, str]:
    """A subscriber class of the topic, and whether SNS delivers to its queue
    (``queues``: the SQS names SNS delivers the topic to)."""
    return {'topic': topic['topic'], 'task': sub['task'], 'queue': sub['queue'],
            'labels': ','.join('%s=%s' % item for item in sorted(sub['labels'].items())) or '-',
            'subscribed': 'no topic' if topic['arn'] is None else
            'yes' if sub['sqs_name'] in queues else 'no'}


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale topics``."""
    sub = group(commands, 'topics', 'topics: sync, list',
                'SNS topics and their SQS subscribers, as the task classes of TASK_MODULES '
                'declare them (subscribes = (...)).')
    command(sub, 'sync', cmd_sync, 'create topics, subscriptions and queue policies',
            "Create each topic a subscriber names, declare its subscribers' queues, subscribe "
            'them with raw delivery and their label filters, and set the queue policies that '
            'let the topics deliver. Idempotent; removes nothing.')
    command(sub, 'list', cmd_list, 'each topic, its subscribers and their queues',
            'Each topic the subscribers name, its subscriber classes and queues, and whether SNS '
            'has the subscription (a queue SNS delivers to that no class declares is listed too).',
            JSON)
