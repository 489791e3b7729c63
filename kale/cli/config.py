"""``kale settings [NAME] [--changed] [--json] [--markdown]``: every setting, its
value (secrets hidden) and what it means, from :mod:`kale.default_settings`.
See docs/explanation/internals-cli.md."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import re
from typing import Any

from kale.cli.options import JSON, arg, command, flag
from kale.default_settings import TABLE
from kale.exceptions import CommandError

#: A URL's password: ``scheme://user:PASSWORD@host``.
_PASSWORD = re.compile(r'(?<=://)([^:/@]*):[^@/]*@')
HIDDEN = '(set, hidden)'


def shown(name: str, value: Any) -> Any:
    """``value`` of setting ``name`` as it may be printed: a secret hidden,
    a URL's password masked, a callable or class by its path."""
    if TABLE[name].metadata['secret']:
        return HIDDEN if value else value
    if isinstance(value, str):
        return _PASSWORD.sub(r'\1:***@', value)
    if callable(value):
        return '%s.%s' % (getattr(value, '__module__', '?'),
                          getattr(value, '__qualname__', type(value).__name__))
    return value


def default_text(field: dataclasses.Field) -> str:
    """The default as the reference shows it (Markdown)."""
    return field.metadata['shown'] or '`%r`' % (field.metadata['default'],)


def markdown() -> str:
    """The settings reference: a table, a row per setting."""
    return '\n'.join(['| setting | default | meaning |', '|---|---|---|'] + [
        '| `%s` | %s | %s |' % (name, default_text(field), field.metadata['doc'])
        for name, field in TABLE.items()]) + '\n'


def _plain(doc: str) -> str:
    """A doc without Markdown's links and code marks, for a terminal."""
    return re.sub(r'\[([^\]]+)\]\(#[^)]+\)', r'\1', doc).replace('`', '')


def _values(config: Any, changed_only: bool) -> dict[str, Any]:
    return {name: shown(name, getattr(config, name)) for name, field in TABLE.items()
            if not (changed_only and _is_default(getattr(config, name), field.metadata['default']))}


def _is_default(value: Any, default: Any) -> bool:
    return bool(value == default or (isinstance(default, tuple) and tuple(value) == default))


def cmd_settings(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown(), end='')
        return 0
    from kale.app import default_app
    config = default_app().config
    if args.name:
        name = args.name.upper()
        if name not in TABLE:
            close = difflib.get_close_matches(name, list(TABLE), n=1, cutoff=0.8)
            raise CommandError('no setting %s%s: `kale settings` lists them' % (
                args.name[:100], ' (did you mean %s?)' % close[0] if close else ''))
        print('%s = %r\n  default: %s\n  %s' % (name, shown(name, getattr(config, name)),
                                              _plain(default_text(TABLE[name])),
                                              _plain(TABLE[name].metadata['doc'])))
        return 0
    values = _values(config, args.changed)
    if args.json:
        print(json.dumps({'settings_module': config.module_name, 'settings': values},
                         indent=2, default=repr))
        return 0
    print('settings module: %s' % (config.module_name or '(none: the defaults)'))
    width = max(map(len, values), default=0)
    for name, value in values.items():
        print('%-*s  %r' % (width, name, value))
    if args.changed and not values:
        print('every setting has its default')
    return 0


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale settings``."""
    command(commands, 'settings', cmd_settings, 'each setting: its value and what it means',
            'Every setting with its value in the settings module (secrets hidden), or one '
            'setting with its default and meaning.',
            arg('name', nargs='?', metavar='NAME', help='show one setting and its meaning'),
            flag('--changed', 'only the settings whose value is not the default'), JSON,
            flag('--markdown', 'print the settings reference, a Markdown table (from the table)'))
