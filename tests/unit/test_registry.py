"""Finding the task class a message names: TASK_MAPPER, imports, clear reasons."""
import pytest

from kale.app import default_app
from kale.conf import settings
from kale.exceptions import DecodeError
from tests import tasks


def test_a_task_path_resolves_to_its_class():
    assert default_app().registry.resolve('tests.tasks.EchoTask') is tasks.EchoTask


def test_unknown_task_is_reported():
    with pytest.raises(DecodeError) as info:
        default_app().registry.resolve('tests.tasks.NoSuchTask')
    assert info.value.reason == DecodeError.UNKNOWN_TASK
    assert "task 'tests.tasks.NoSuchTask' cannot be imported: tests.tasks has no NoSuchTask" \
        in str(info.value)


def test_a_class_that_is_not_a_task_is_unknown():
    with pytest.raises(DecodeError, match='is not a kale Task class'):
        default_app().registry.resolve('tests.tasks.NotATask')


def test_a_missing_module_is_unknown():
    with pytest.raises(DecodeError, match='cannot be imported: no such module'):
        default_app().registry.resolve('no_such_package.tasks.Task')


def test_task_mapper_follows_moved_tasks():
    with settings.override(TASK_MAPPER={'old.module.EchoTask': 'tests.tasks.EchoTask'}):
        assert default_app().registry.resolve('old.module.EchoTask') is tasks.EchoTask
    with pytest.raises(DecodeError):
        default_app().registry.resolve('old.module.EchoTask')        # the mapping went with the override


def test_a_task_module_that_fails_to_import_says_why(tmp_path, monkeypatch):
    (tmp_path / 'broken_task_module.py').write_text('import no_such_dependency\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DecodeError, match="unknown_task: task 'broken_task_module.SomeTask' cannot "
                                          "be imported: module broken_task_module needs No "
                                          "module named 'no_such_dependency'"):
        default_app().registry.resolve('broken_task_module.SomeTask')


def test_a_task_module_that_raises_says_what_it_raised(tmp_path, monkeypatch):
    (tmp_path / 'raising_task_module.py').write_text('raise RuntimeError("boom")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DecodeError, match='module raising_task_module raised RuntimeError: boom'):
        default_app().registry.resolve('raising_task_module.SomeTask')
