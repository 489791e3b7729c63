"""``kale webhooks add|list|disable|enable|test|remove``: the webhooks kept
in the task records (``RECORDS_URL``), see :mod:`kale.webhooks`."""
from __future__ import annotations

import argparse
import json

from kale.cli.options import JSON, arg, command, flag, group, output
from kale.cli.tasks import table
from kale.exceptions import CommandError

LIST_COLUMNS = [('ID', 'id'), ('TOPIC', 'topic'), ('METHOD', 'method'), ('URL', 'url'),
                ('LABELS', 'labels'), ('ACTIVE', 'active'), ('CREATED', 'created_at')]


def _pairs(given: list[str], separator: str, option: str) -> dict[str, str]:
    pairs = {}
    for text in given or ():
        key, found, value = text.partition(separator)
        if not found or not key.strip():
            raise CommandError('%s must be KEY%sVALUE, got %r' % (option, separator, text[:100]))
        pairs[key.strip()] = value.strip() if separator == ':' else value
    return pairs


def cmd_add(args: argparse.Namespace) -> int:
    from kale import webhooks
    from kale.app import default_app
    from kale.webhooks.fanout import subscription_of
    hook = webhooks.add(args.topic, args.url, method=args.method,
                        headers=_pairs(args.header, ':', '--header'),
                        labels=_pairs(args.label, '=', '--label'))
    subscribed = subscription_of(hook.topic, default_app())
    return output(args, dict(hook.as_json(with_secret=True), subscribed=subscribed), '\n'.join((
        'webhook %s added: %s %s for the events of %s%s' % (
            hook.id, hook.method, hook.url, hook.topic,
            ' labelled %s' % ','.join('%s=%s' % item for item in sorted(hook.labels.items()))
            if hook.labels else ''),
        'secret: %s' % hook.secret,
        '(shown only now: keep it to verify the webhook-signature header of each delivery)',
        subscribed)))


def cmd_list(args: argparse.Namespace) -> int:
    from kale import webhooks
    found = [hook.as_json() for hook in webhooks.list_webhooks(args.topic)]
    rows = [dict(row, active='yes' if row['active'] else 'no') for row in found]
    return output(args, found, table(LIST_COLUMNS, rows) if rows else 'no webhooks%s' % (
        ' for topic %s' % args.topic if args.topic else ''))


def cmd_set_active(args: argparse.Namespace) -> int:
    from kale import webhooks
    active = args.webhooks_command == 'enable'
    hook = webhooks.set_active(args.webhook_id, active)
    return output(args, hook.as_json(), 'webhook %s %s' % (hook.id, 'enabled' if active
                                                           else 'disabled'))


def cmd_test(args: argparse.Namespace) -> int:
    from kale.webhooks.fanout import TEST_EVENT, send_test
    task_id = send_test(args.webhook_id)
    return output(args, {'webhook': args.webhook_id, 'task_id': task_id},
                  'published a delivery of %s to webhook %s: task %s (kale tasks show %s)'
                  % (json.dumps(TEST_EVENT), args.webhook_id, task_id, task_id))


def cmd_remove(args: argparse.Namespace) -> int:
    from kale import webhooks
    webhooks.remove(args.webhook_id)
    print('webhook %s removed' % args.webhook_id)
    return 0


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale webhooks``."""
    sub = group(commands, 'webhooks', 'webhooks: add, list, disable, enable, test, remove',
                'Webhooks, kept in the task records (RECORDS_URL): each event of a topic is '
                'delivered to every active webhook of the topic whose label filter it passes, '
                'signed as the Standard Webhooks specification says.')
    command(sub, 'add', cmd_add, 'add a webhook; prints its secret, once',
            "Add a webhook for the events of TOPIC and print its id and its secret (whsec_..., "
            "shown only now: the receiver verifies each delivery's webhook-signature with it).",
            arg('topic', metavar='TOPIC'), arg('url', metavar='URL', help='http:// or https://'),
            arg('--method', default='POST', type=str.upper, choices=['POST', 'PUT', 'GET'],
                help='HTTP method (default POST)'),
            arg('--header', action='append', metavar='NAME:VALUE',
                help='a header sent with each delivery (repeatable)'),
            arg('--label', action='append', metavar='KEY=VALUE',
                help='deliver only events with this label (repeatable: all of them)'),
            flag('--json', 'print JSON (with the secret)'))
    command(sub, 'list', cmd_list, 'the webhooks, oldest first',
            'The webhooks, oldest first, without their secrets or header values.',
            arg('--topic', help='only those of this topic'), JSON)
    for name, func, what in (
            ('disable', cmd_set_active, 'stop delivering to a webhook (queued deliveries are '
                                        'skipped)'),
            ('enable', cmd_set_active, 'deliver to a disabled webhook again'),
            ('test', cmd_test, 'publish one delivery of {"test": true} to a webhook; prints '
                               'the task id, whose record shows the answer'),
            ('remove', cmd_remove, 'delete a webhook (queued deliveries are skipped)')):
        command(sub, name, func, what, what[:1].upper() + what[1:] + '.',
                arg('webhook_id', metavar='ID'), *([JSON] if name != 'remove' else []))
