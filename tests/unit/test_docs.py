"""The docs site's examples run and its reference is whole: every code block
is marked (run, checked, or skipped with a reason), the Python blocks marked
to run do, the JSON and YAML blocks parse, and the generated reference names
every setting, command, route, queue config key and metric. The shell blocks
and the strict build are slow: tests/e2e/test_docs.py."""
import importlib.util
import json
import os
import re
import sys
import types

import pytest
import yaml

from tests.support import docs
from tests.support.endpoint import ROOT


def reference():
    """docs/_tools/reference.py, the hook that makes the reference pages."""
    spec = importlib.util.spec_from_file_location(
        'docs_reference', os.path.join(docs.DOCS, '_tools', 'reference.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pages_have_code_blocks_to_check():
    assert len(docs.pages()) > 30
    assert sum(1 for block in docs.all_blocks() if block.mode == 'run') > 20


def test_every_code_block_is_run_checked_or_skipped_with_a_reason():
    problems = []
    for block in docs.all_blocks():
        if block.mode is None:
            problems.append('%s: no <!-- doc: run|check|skip (why) --> mark' % block)
        elif block.mode == 'skip' and not re.fullmatch(r'\(.{8,}\)', block.argument):
            problems.append('%s: skipped without a reason in parentheses' % block)
        elif block.mode == 'run' and block.language not in ('python', 'sh'):
            problems.append('%s: only python and sh blocks run' % block)
        elif block.mode == 'check' and block.argument not in (
                'json', 'yaml', 'queue-config', 'submission'):
            problems.append('%s: check what? (json, yaml, queue-config, submission)' % block)
    assert not problems, '\n'.join(problems)


def test_a_block_marked_to_be_skipped_is_not_found_when_unmarked(tmp_path, monkeypatch):
    page = tmp_path / 'page.md'
    page.write_text('<!-- doc: skip (sample output) -->\n```text\nx\n```\n\n```sh\nls\n```\n')
    monkeypatch.setattr(docs, 'DOCS', str(tmp_path))
    found = docs.blocks('page.md')
    assert [(b.mode, b.argument, b.language) for b in found] == [
        ('skip', '(sample output)', 'text'), (None, '', 'sh')]


PYTHON_PAGES = sorted({block.page for block in docs.all_blocks()
                       if block.mode == 'run' and block.language == 'python'})


@pytest.mark.parametrize('page', PYTHON_PAGES)
def test_the_python_blocks_of_a_page_run(page, tmp_path, monkeypatch, settings_env):
    """In order, in one namespace, in a scratch directory, with no settings
    module (each block makes what it needs: an App on the memory transport),
    beside the checkout's queue_config.yaml."""
    docs.scratch(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith('KALE_')]:
        monkeypatch.delenv(name)
    settings_env()                      # the settings read again: the defaults alone
    # A module of its own, importable while the test runs, so that a worker
    # finds the page's task classes by their path, as it finds yours.
    module = types.ModuleType('docs_example_' + re.sub(r'\W', '_', page[:-3]))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for block in docs.runnable(page, 'python'):
        exec(compile(block.code, str(block), 'exec'), namespace)
        for name, value in list(namespace.items()):
            if name.startswith('test_') and callable(value):
                value()                 # a block that defines a test runs it
                del namespace[name]


def test_the_checked_blocks_parse():
    import jsonschema

    from kale.queue_config import parse_queue_config
    from kale.submission import schema
    checked = [block for block in docs.all_blocks() if block.mode == 'check']
    assert {block.argument for block in checked} >= {'json', 'yaml', 'queue-config'}
    for block in checked:
        if block.argument in ('json', 'submission'):
            value = json.loads(block.code)
            if block.argument == 'submission':
                jsonschema.validate(value, schema())
        else:
            value = yaml.safe_load(block.code)
            if block.argument == 'queue-config':
                parse_queue_config(str(block), value)
        assert value, block


def test_the_reference_names_every_setting_command_route_key_and_metric():
    from kale.default_settings import TABLE
    module = reference()
    pages = module.pages()
    settings, cli = pages['reference/settings.md'], pages['reference/cli.md']
    for name in TABLE:
        assert '| `%s` |' % name in settings, name
    commands = module.commands()
    assert {'kale worker', 'kale tasks list', 'kale dlq redrive', 'kale workflows retry',
            'kale webhooks add', 'kale sqs-local'} <= set(commands)
    for command in commands:
        assert '`%s`' % command in cli, command
    for method, path in module.routes():
        assert '## `%s %s`' % (method, path) in pages['reference/rest-api.md'], path
    import dataclasses

    from kale.queue_config import TaskQueue
    for field in dataclasses.fields(TaskQueue):
        assert '| `%s` |' % field.name in pages['reference/queue-config.md'], field.name
    names = [row[0] for row in module.metrics()]
    assert {'kale_tasks_total', 'kale_queue_backlog_per_worker', 'kale_outbox_sent_total'} \
        <= set(names)
    for name in names:
        assert '| `%s` |' % name in pages['reference/metrics.md'], name
    assert '"deadline_sec"' in pages['reference/submission-schema.md']


def test_the_settings_links_to_readme_sections_point_at_pages_of_the_site():
    module = reference()
    text = module.pages()['reference/settings.md']
    assert '](#' not in text
    for target in re.findall(r'\]\(\.\./([^)#]+)', text):
        assert os.path.exists(os.path.join(docs.DOCS, target)), target
    with pytest.raises(KeyError, match='#nowhere'):
        module.link_anchors('see [it](#nowhere)')


def test_the_landing_page_is_short_and_links_into_the_site():
    """README.md is the landing page: short, the two commands, links into the site."""
    text = open(os.path.join(ROOT, 'README.md')).read()
    assert len(text.splitlines()) <= 300
    assert 'make demo' in text and 'make test' in text
    links = re.findall(r'\]\((docs/[^)#]+)', text)
    assert len(links) > 15
    for link in links:
        assert os.path.exists(os.path.join(ROOT, link)), link


def test_the_nav_names_every_page_and_only_pages_that_exist():
    config = yaml.safe_load(open(os.path.join(ROOT, 'mkdocs.yml')).read()
                            .replace('!!python/name:', ''))
    named = set()

    def walk(entries):
        for entry in entries:
            value = entry if isinstance(entry, str) else next(iter(entry.values()))
            if isinstance(value, list):
                walk(value)
            else:
                named.add(value)
    walk(config['nav'])
    generated = set(reference().pages())
    written = set(docs.pages())
    assert named - generated == written
