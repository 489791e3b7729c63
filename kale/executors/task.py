"""Executor tasks: a task whose work is a program in the executor directory
(exit statuses and limits: docs/explanation/internals-workflow.md, "Tasks in any language")."""
from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale.default import default_app
from kale.exceptions import ExecutorError, PublishError, TimeLimitExceeded
from kale.executors.catalog import PREFIX, Catalog, MethodSettings, check_name
from kale.executors.program import Finished, run_program
from kale.message import Message
from kale.task import Task

if TYPE_CHECKING:
    from kale.app import App

#: Classes kept per process, at most (names come from signed messages, but
#: a publisher's mistakes must not grow a worker without end).
MAX_CLASSES = 1000
#: The exit status that says the input is bad (sysexits.h EX_DATAERR).
EX_DATAERR = 65
#: Seconds the worker's own time-limit guard waits beyond the program's
#: limit and kill grace: the program's tree is killed first (and should
#: the guard fire meanwhile, the killing goes on: it has a thread of its own).
GUARD_MARGIN_SEC = 2.0

_classes: dict[str, type['ExecutorTask']] = {}
_lock = threading.Lock()


def catalog(app: 'App') -> Optional[Catalog]:
    """The executor directory of ``app`` (EXECUTOR_DIR), or None without one."""
    directory = app.config.EXECUTOR_DIR
    return app.part('executor-catalog', lambda: Catalog(directory)) if directory else None


class ExecutorTask(Task):
    """Runs the program of :attr:`method` (exit statuses and limits: the docs page the module names)."""

    #: The method (the program's name in the executor directory).
    method: str = ''
    #: The program's own time limit (``time_limit`` is the worker's guard, later).
    program_time_limit: float = 30.0
    #: A run's result is kept in its record, with its standard error.
    store_result = True

    def __init__(self, message: Optional[Message] = None):
        super().__init__(message)
        #: The last bytes the program wrote to standard error, once it ran.
        self.stderr: Optional[str] = None

    @classmethod
    def task_path(cls) -> str:
        return PREFIX + cls.method

    @classmethod
    def check_call(cls, args: tuple, kwargs: Mapping[str, Any]) -> None:
        """An executor takes a JSON list: no keyword arguments, nothing JSON cannot hold."""
        if kwargs:
            raise PublishError('executor %s takes positional arguments only (a JSON list), '
                               'got keyword arguments %s' % (cls.method, ', '.join(sorted(kwargs))))
        try:
            json.dumps(list(args), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise PublishError('executor %s: its arguments are not JSON: %s'
                               % (cls.method, exc)) from None

    @classmethod
    def permanent_failure_reason(cls, message: Message, exc: BaseException) -> Optional[str]:
        if isinstance(exc, ExecutorError) and exc.reason in ExecutorError.PERMANENT:
            return exc.reason
        return super().permanent_failure_reason(message, exc)

    def run_task(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise ExecutorError('bad_input: executor %s takes no keyword arguments' % self.method)
        config = self.config
        found = catalog(self.running)
        if found is None:
            raise ExecutorError('unknown_method: this worker runs no executor programs '
                                '(start it with --executors DIR, or set EXECUTOR_DIR)')
        program = found.program(self.method)
        try:
            stdin = json.dumps(list(args), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise ExecutorError('bad_input: the arguments are not JSON: %s' % exc) from None
        extra = {'KALE_TASK_ID': self.task_id or '', 'KALE_METHOD': self.method,
                 'KALE_ATTEMPT': str((self.message.failure_num if self.message else 0) + 1)}
        try:
            finished = run_program(
                [program], stdin, self.program_time_limit, cwd=found.directory,
                env=found.environment(self.method, extra),
                stdout_max_bytes=int(config.EXECUTOR_STDOUT_MAX_BYTES),
                stderr_max_bytes=int(config.EXECUTOR_STDERR_MAX_BYTES),
                kill_grace_sec=float(config.EXECUTOR_KILL_GRACE_SEC))
        except OSError as exc:          # not a program the system can start (a bad #! line)
            raise ExecutorError('unknown_method: %s cannot be started: %s'
                                % (self.method, exc)) from None
        self.stderr = finished.stderr.decode('utf-8', 'replace')
        return self._result(finished)

    def _result(self, finished: Finished) -> Any:
        if finished.timed_out:
            raise TimeLimitExceeded(self.program_time_limit)
        tail = _last_line(self.stderr or '')
        if finished.exit_code == EX_DATAERR:
            raise ExecutorError('bad_input: %s exited 65 (EX_DATAERR)%s' % (self.method, tail))
        if finished.exit_code != 0:
            raise ExecutorError('failed: %s ended with %s%s'
                                % (self.method, finished.describe(), tail))
        if finished.stdout_overflow:
            raise ExecutorError('bad_output: %s wrote more than EXECUTOR_STDOUT_MAX_BYTES (%d) '
                                'to its standard output'
                                % (self.method, int(self.config.EXECUTOR_STDOUT_MAX_BYTES)))
        try:
            return json.loads(finished.stdout.decode('utf-8'))
        except (UnicodeDecodeError, ValueError) as exc:
            shown = finished.stdout[:80].decode('utf-8', 'replace')
            raise ExecutorError('bad_output: the standard output of %s is not one JSON value '
                                '(%s): %r' % (self.method, str(exc).split(':')[0], shown)) \
                from None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return ': %s' % lines[-1][:300] if lines else ''


def executor_task(method: str, checked: bool = True,
                  app: Optional['App'] = None) -> type[ExecutorTask]:
    """The Task class of executor ``method``, with the ``executors.yaml``
    settings of ``app``'s EXECUTOR_DIR (by default the default app's:
    application code publishing a method). A bad name is refused
    (PublishError), or with ``checked`` off (a worker resolving a message)
    left for the run to fail as ``unknown_method``."""
    if checked:
        try:
            check_name(method)
        except ExecutorError as exc:
            raise PublishError(str(exc)) from None
    app = app or default_app()
    found = catalog(app)
    own: MethodSettings = found.settings(method) if found is not None else MethodSettings()
    grace = float(app.config.EXECUTOR_KILL_GRACE_SEC)
    key = '%s|%r|%r' % (method, own, grace)
    cls = _classes.get(key)
    if cls is None:
        with _lock:
            if len(_classes) >= MAX_CLASSES:
                _classes.clear()
            cls = _classes.setdefault(key, type('Executor[%s]' % method, (ExecutorTask,), {
                '__module__': __name__, 'method': method, 'queue': own.queue,
                'max_retries': own.max_retries, 'program_time_limit': own.time_limit,
                'time_limit': own.time_limit + grace + GUARD_MARGIN_SEC,
                '__doc__': 'The executor program %s.' % method}))
    return cls


def method_of(task_name: str) -> Optional[str]:
    """The method an executor task's name names, or None for a Python task."""
    return task_name[len(PREFIX):] if task_name.startswith(PREFIX) else None
