"""``kale webhooks add|list|disable|enable|test|remove``: the webhooks kept
in the task records (``RECORDS_URL``), see :mod:`kale.webhooks`."""
from __future__ import annotations

import argparse
import json

from kale.cli.options import JSON, arg, command, flag, group, print_json
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
    hook = webhooks.add(args.topic, args.url, method=args.method,
                        headers=_pairs(args.header, ':', '--header'),
                        labels=_pairs(args.label, '=', '--label'))
    from kale.app import default_app
    from kale.webhooks.fanout import subscription_of
    subscribed = subscription_of(hook.topic, default_app())
    if args.json:
        print_json(dict(hook.as_json(with_secret=True), subscribed=subscribed))
        return 0
    print('webhook %s added: %s %s for the events of %s%s' % (
        hook.id, hook.method, hook.url, hook.topic,
        ' labelled %s' % ','.join('%s=%s' % item for item in sorted(hook.labels.items()))
        if hook.labels else ''))
    print('secret: %s' % hook.secret)
    print('(shown only now: keep it to verify the webhook-signature header of each delivery)')
    print(subscribed)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from kale import webhooks
    found = [hook.as_json() for hook in webhooks.list_webhooks(args.topic)]
    if args.json:
        print_json(found)
        return 0
    rows = [dict(row, active='yes' if row['active'] else 'no') for row in found]
    print(table(LIST_COLUMNS, rows) if rows else 'no webhooks%s' % (
        ' for topic %s' % args.topic if args.topic else ''))
    return 0


def _set_active(args: argparse.Namespace, active: bool) -> int:
    from kale import webhooks
    hook = webhooks.set_active(args.webhook_id, active)
    if args.json:
        print_json(hook.as_json())
    else:
        print('webhook %s %s' % (hook.id, 'enabled' if active else 'disabled'))
    return 0


def cmd_disable(args: argparse.Namespace) -> int:
    return _set_active(args, False)


def cmd_enable(args: argparse.Namespace) -> int:
    return _set_active(args, True)


def cmd_test(args: argparse.Namespace) -> int:
    from kale.webhooks.fanout import TEST_EVENT, send_test
    task_id = send_test(args.webhook_id)
    if args.json:
        print_json({'webhook': args.webhook_id, 'task_id': task_id})
    else:
        print('published a delivery of %s to webhook %s: task %s (kale tasks show %s)'
              % (json.dumps(TEST_EVENT), args.webhook_id, task_id, task_id))
    return 0


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
            ('disable', cmd_disable, 'stop delivering to a webhook (queued deliveries are '
                                     'skipped)'),
            ('enable', cmd_enable, 'deliver to a disabled webhook again'),
            ('test', cmd_test, 'publish one delivery of {"test": true} to a webhook; prints '
                               'the task id, whose record shows the answer'),
            ('remove', cmd_remove, 'delete a webhook (queued deliveries are skipped)')):
        command(sub, name, func, what, what[:1].upper() + what[1:] + '.',
                arg('webhook_id', metavar='ID'), *([JSON] if name != 'remove' else []))
