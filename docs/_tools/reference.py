"""The docs' reference pages, made from the code when the site is built.

``mkdocs.yml`` names this file as a hook: :func:`on_files` adds each page of
:func:`pages` to the site as a generated file, so the settings, the command
line, the REST API, the queue config keys, the metrics and the submission
schema are documented from the one place the code keeps them and cannot
drift. The tests import :func:`pages` too (tests/unit/test_docs_reference.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any, Iterator

#: The README's anchors that the settings' meanings link to, and the page of
#: the site that says the same (relative to the reference folder). A setting
#: whose meaning links to an anchor missing here fails the docs' tests.
ANCHORS = {
    '#concurrency': '../how-to/concurrency.md',
    '#events-and-webhooks': '../how-to/events-and-webhooks.md',
    '#webhooks': '../how-to/events-and-webhooks.md#webhooks',
    '#flow-control': '../how-to/flow-control.md',
    '#large-payloads': '../how-to/large-payloads.md',
    '#monitoring': '../how-to/monitoring.md',
    '#periodic-tasks': '../how-to/schedules.md',
    '#task-records-and-the-dashboard': '../how-to/records-and-dashboard.md',
}

GENERATED = ('<!-- Generated from the code when the site is built '
             '(docs/_tools/reference.py): do not edit. -->\n\n')


def _cell(text: Any) -> str:
    """A value fit for a Markdown table cell."""
    return str(text).replace('|', '\\|').replace('\n', ' ')


def link_anchors(text: str) -> str:
    """``text`` with the README's ``(#anchor)`` links pointed at the site's pages."""
    def page(match: 're.Match[str]') -> str:
        anchor = match.group(1)
        if anchor not in ANCHORS:
            raise KeyError('a setting links to %s, which docs/_tools/reference.py ANCHORS does '
                           'not map to a page of the site' % anchor)
        return '](%s)' % ANCHORS[anchor]
    return re.sub(r'\]\((#[^)]+)\)', page, text)


# --- Settings ---------------------------------------------------------------

def settings_page() -> str:
    from kale.cli.config import markdown
    return (GENERATED + '# Settings\n\n'
            '`KALE_SETTINGS_MODULE` (or `kale ... --settings MODULE`) names a Python module '
            'whose UPPER_CASE names override these defaults; see '
            '[Configure Kale](../how-to/configure.md) for how settings load and the ready '
            'presets. This table is what `kale settings --markdown` prints, from the one '
            'table of settings in `kale/default_settings.py`; `kale settings NAME` prints one '
            "setting's default and meaning, `kale settings --changed` what your module "
            'changes.\n\n' + link_anchors(markdown()))


# --- The command line -------------------------------------------------------

#: The options every command takes, said once at the top of the page.
COMMON = {'settings', 'log_level', 'aws_log_level'}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line help, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or '' for choice in action._choices_actions}
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction,
                               argparse._VersionAction)) or action.dest in COMMON:
            continue
        if action.option_strings:
            name = ', '.join(action.option_strings)
            if action.nargs != 0:
                name += ' ' + (action.metavar or action.dest.upper())
        else:
            name = action.metavar or action.dest
        text = action.help or ''
        if text and '%(' in text:
            text = text % {'default': action.default, 'prog': parser.prog,
                           'choices': action.choices}
        if action.choices and 'choices' not in text and not action.option_strings == []:
            text += ' (one of %s)' % ', '.join(map(str, action.choices))
        yield '| `%s` | %s |' % (_cell(name), _cell(text))


def _command_section(name: str, parser: argparse.ArgumentParser, one_line: str,
                     depth: int) -> Iterator[str]:
    yield '%s `%s`\n' % ('#' * depth, name)
    if one_line:
        yield one_line[0].upper() + one_line[1:] + '.\n'
    yield '```text\n%s```\n' % parser.format_usage().replace('usage: ', '', 1)
    if parser.description:
        yield parser.description + '\n'
    rows = list(_argument_rows(parser))
    if rows:
        yield '| argument | meaning |\n|---|---|\n' + '\n'.join(rows) + '\n'
    helps = _help_of(parser)
    for sub_name, sub in _subcommands(parser).items():
        yield from _command_section('%s %s' % (name, sub_name), sub, helps.get(sub_name, ''),
                                    depth + 1)


def commands() -> list[str]:
    """Every command of ``kale``, subcommands included (``kale tasks list``)."""
    from kale.cli import build_parser

    def walk(name: str, parser: argparse.ArgumentParser) -> Iterator[str]:
        for sub_name, sub in _subcommands(parser).items():
            yield '%s %s' % (name, sub_name)
            yield from walk('%s %s' % (name, sub_name), sub)
    return list(walk('kale', build_parser()))


def cli_page() -> str:
    from kale.cli import build_parser
    parser = build_parser()
    lines = [GENERATED + '# Command line\n',
             'Made from the argument parsers of `kale/cli`: what `kale COMMAND --help` '
             'prints. Every command takes `--settings MODULE`, `--log-level` and '
             '`--aws-log-level`. A mistake (unknown queue, bad JSON, missing settings, '
             'unreachable endpoint) is one line on stderr and a non-zero exit code.\n',
             '`kale worker` exits 0 after a shutdown signal or a finished burst, 1 for a '
             'configuration error, 3 at the memory limit (`DIE_ON_RESIDENT_SET_SIZE_MB`), 4 '
             'after a task stuck past its time limit (`WORKER_STUCK_GRACE_SEC`).\n',
             '```text\n%s```\n' % parser.format_usage().replace('usage: ', '', 1)]
    helps = _help_of(parser)
    for name, sub in _subcommands(parser).items():
        lines.extend(_command_section('kale %s' % name, sub, helps.get(name, ''), 2))
    return '\n'.join(lines)


# --- The REST API -----------------------------------------------------------

def routes() -> list[tuple[str, str]]:
    """Every (method, path) of ``kale web``'s API."""
    from kale.web.openapi import ENDPOINTS
    return [(endpoint.method, endpoint.path) for endpoint in ENDPOINTS]


def _schema_text(schema: dict[str, Any]) -> str:
    if '$ref' in schema:
        return 'see [the submission schema](submission-schema.md)'
    properties = schema.get('properties')
    if not properties:
        return schema.get('type', '')
    return ', '.join('`%s`' % name for name in properties)


def rest_page() -> str:
    from kale.web.openapi import OPENAPI
    lines = [GENERATED + '# REST API\n',
             '`kale web` serves this API (and the dashboard at `/`); '
             '`kale.web.create_app()` mounts it in your own ASGI app. The OpenAPI document this '
             'page is made from is served at `/api/openapi.json` (version %s). Requests that '
             'change state need the header `X-Kale-Request: 1`; off loopback every `/api` '
             'request needs `Authorization: Bearer TOKEN` (see '
             '[Records and the dashboard](../how-to/records-and-dashboard.md#rest-api) and '
             '[the security model](../explanation/security.md)). Bad input is a 400 with '
             '`{"error": "one line"}`; a store that cannot be reached, a 503.\n'
             % OPENAPI['info']['version']]
    for path, operations in OPENAPI['paths'].items():
        for method, operation in operations.items():
            lines.append('## `%s %s`\n' % (method.upper(), path))
            lines.append(operation['summary'] + '.\n')
            params = operation.get('parameters', [])
            if params:
                lines.append('| parameter | in | meaning |\n|---|---|---|')
                lines.extend('| `%s`%s | %s | %s |' % (
                    p['name'], ' (required)' if p.get('required') else '', p['in'],
                    _cell(p.get('description', ''))) for p in params)
                lines.append('')
            body = operation.get('requestBody')
            if body:
                lines.append('Body (JSON): %s.\n' % _schema_text(
                    body['content']['application/json']['schema']))
            answers = []
            for code, response in operation['responses'].items():
                schema = response.get('content', {}).get('application/json', {}).get('schema', {})
                fields = _schema_text(schema) if code == '200' else ''
                answers.append('`%s` %s%s' % (code, response['description'],
                                              ': ' + fields if fields else ''))
            lines.append('Answers: %s.\n' % '; '.join(answers))
    return '\n'.join(lines)


# --- The queue config -------------------------------------------------------

def queue_keys() -> list[tuple[str, str, str, str]]:
    """(key, required or its default, range, meaning) of each queue config key,
    from kale/queue_config.py: its docstring's commented example and its checks."""
    from kale import queue_config
    comments = dict(re.findall(r'^ {6}(\w+): .*?# (.*)$', queue_config.__doc__ or '', re.M))
    rows = []
    for field in dataclasses.fields(queue_config.TaskQueue):
        if field.name not in comments:
            raise KeyError('queue config key %s is not described in the docstring of '
                           'kale/queue_config.py' % field.name)
        required = field.default is dataclasses.MISSING and field.name != 'name'
        bounds = queue_config.INTEGER_FIELDS.get(field.name)
        limits = ('%s..%s' % (bounds[0], bounds[1] if bounds[1] is not None else '')
                  if bounds else '')
        default = ('required' if required else 'the key' if field.name == 'name'
                   else '`%r`' % (field.default,) if field.default != '' else 'dlq-NAME')
        rows.append((field.name, default, limits, comments[field.name]))
    return rows


def queue_config_page() -> str:
    lines = [GENERATED + '# Queue config keys\n',
             'The queue config is a YAML file (`QUEUE_CONFIG`, by default '
             '`queue_config.yaml`), one entry per queue. Each key below comes from '
             '`kale/queue_config.py`; a bad file is refused at start with the file, queue '
             'and field named (a missing field, a wrong type, a value out of range, an unknown '
             'field, a duplicate queue or SQS name, YAML that does not parse).\n',
             '```yaml\nhigh_priority:               # the YAML key: a label for this entry\n'
             '  name: high_priority\n  priority: 100\n  batch_size: 10\n'
             '  visibility_timeout_sec: 60\n  long_poll_time_sec: 1\n  num_iterations: 10\n'
             '```\n',
             '| key | default | range | meaning |\n|---|---|---|---|']
    lines.extend('| `%s` | %s | %s | %s |' % tuple(map(_cell, row)) for row in queue_keys())
    lines.append('\nSee [FIFO queues](../how-to/fifo.md), [fair queues](../how-to/fair-queues.md) '
                 'and [receiving only what starts soon](../explanation/architecture.md'
                 '#receiving-only-what-starts-soon) for `fifo`, `fair` and `prefetch`.\n')
    return '\n'.join(lines)


# --- Metrics ----------------------------------------------------------------

def metrics() -> list[tuple[str, str, str, str, str]]:
    """(name, kind, labels, meaning, served by) of every Prometheus metric Kale serves."""
    from prometheus_client import CollectorRegistry

    from kale.cli.outbox import RELAY_METRICS
    from kale.contrib.metrics import KaleMetrics
    from kale.contrib.queue_metrics import QueueCollector
    rows = []
    for metric in vars(KaleMetrics(CollectorRegistry())).values():
        name = metric._name + ('_total' if metric._type == 'counter' else '')
        rows.append((name, metric._type, ', '.join(metric._labelnames), metric._documentation,
                     '`kale worker --metrics-port` (and publishers with `METRICS_PORT`)'))
    for family in QueueCollector._families(None):  # type: ignore[arg-type]
        rows.append((family.name, family.type, ', '.join(family._labelnames),
                     family.documentation, "`kale web`'s `/metrics`, `queue_registry()`"))
    for name, kind, text in RELAY_METRICS:
        rows.append((name + ('_total' if kind == 'counter' else ''), kind, '', text,
                     '`kale relay --metrics-port`'))
    return rows


def metrics_page() -> str:
    lines = [GENERATED + '# Metrics\n',
             'Every Prometheus metric Kale serves, made from the metrics\' definitions in '
             '`kale/contrib/metrics.py`, `kale/contrib/queue_metrics.py` and '
             '`kale/cli/outbox.py`. Label values are queue names and task paths, never task '
             'ids or arguments. [Monitoring](../how-to/monitoring.md) shows how to serve and '
             'query them.\n',
             '| metric | type | labels | meaning | served by |\n|---|---|---|---|---|']
    lines.extend('| `%s` | %s | %s | %s | %s |' % tuple(map(_cell, row)) for row in metrics())
    lines.append('\n`kale_tasks_total`\'s `outcome` is one of `succeeded`, `retried`, '
                 '`dead_lettered`, `skipped`, `released`, `cancelled`, `duplicate` or '
                 '`waiting`; `kale_queue_messages`\'s `state` one of `visible`, `in_flight`, '
                 '`delayed`, `dead_letters`.\n')
    return '\n'.join(lines)


# --- The JSON submission schema ---------------------------------------------

def _properties(schema: dict[str, Any], where: str) -> Iterator[str]:
    required = set(schema.get('required', ()))
    for name, spec in schema.get('properties', {}).items():
        kind = spec.get('type', spec.get('$ref', '').rsplit('/', 1)[-1])
        yield '| `%s` | `%s` | %s | %s | %s |' % (
            name, where, _cell(kind if isinstance(kind, str) else ' or '.join(kind)),
            'yes' if name in required else '', _cell(spec.get('description', '')))


def submission_page() -> str:
    from kale.submission import schema
    document = schema()
    lines = [GENERATED + '# Submission schema\n',
             document.get('description', '') + '\n',
             'What `kale submit FILE` and `POST /api/workflows` take: the JSON Schema in '
             '`kale/schemas/submission.schema.json` (below, whole). '
             '[Tasks in any language](../how-to/executors.md) shows it in use.\n',
             '| field | in | type | required | meaning |\n|---|---|---|---|---|']
    lines.extend(_properties(document, 'document'))
    for name, definition in document.get('$defs', {}).items():
        lines.extend(_properties(definition, name))
    lines.append('\n```json\n%s\n```\n' % json.dumps(document, indent=2))
    return '\n'.join(lines)


def pages() -> dict[str, str]:
    """Each generated page: its path in the site, its Markdown."""
    return {
        'reference/settings.md': settings_page(),
        'reference/cli.md': cli_page(),
        'reference/rest-api.md': rest_page(),
        'reference/queue-config.md': queue_config_page(),
        'reference/metrics.md': metrics_page(),
        'reference/submission-schema.md': submission_page(),
    }


def on_files(files: Any, config: Any) -> Any:
    """The mkdocs hook: add the generated pages to the site."""
    from mkdocs.structure.files import File
    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
