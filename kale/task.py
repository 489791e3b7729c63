"""The base class of every task: subclass :class:`Task`, set ``queue`` and the
limits, implement ``run_task``, publish with ``MyTask.publish(app_data, *args,
**kwargs)`` (an example: docs/explanation/internals-top.md, "Tasks")."""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from kale.config import Config
from kale.default import default_app
from kale.exceptions import NonRetriableTaskError, PublishError, TaskDefinitionError
from kale.ids import random_id
from kale.message import Message
from kale.retry import (  # noqa: F401  (the reasons' home before kale.retry)
    PERMANENT_FAILURE_NO_RETRIES,
    PERMANENT_FAILURE_NON_RETRIABLE,
    PERMANENT_FAILURE_RETRIES_EXHAUSTED,
    RetryPolicy,
)
from kale.signature import Signature
from kale.task_checks import check_attributes
from kale.timeout import failure_of

if TYPE_CHECKING:
    from kale.app import App
    from kale.publisher import Publisher


#: Hooks of the original Kale and their names here. A task that still
#: defines an old name would silently never be called, so it is refused.
RENAMED_HOOKS = {
    '_get_task_id': 'make_task_id (a classmethod)',
    '_alert_runtime_exceeded': 'on_target_runtime_exceeded',
    '_report_permanent_failure': 'on_permanent_failure',
    '_pre_run': 'before_run',
    '_post_run': 'after_success',
    '_check_blacklist': 'should_run_task (return False to skip the run), or raise '
                        'NonRetriableTaskError from before_run to dead-letter it',
    '_get_delay_sec_for_retry': 'retry_delay_sec (a classmethod)',
    '_setup_task_environment': 'before_run',
    '_clean_task_environment': 'after_success and after_failure',
    '_kill_runtime_exceeded': 'after_failure (a timed-out run raises TimeLimitExceeded)',
}


#: The task's methods a worker calls. Any of them may be a coroutine
#: function (``async def``): the task then runs on the worker's event loop.
TASK_METHODS = ('run_task', 'run_dead_task', 'should_run_task', 'before_run', 'after_success',
                'after_failure', 'on_target_runtime_exceeded', 'on_permanent_failure')


class _Skipped:
    def __repr__(self) -> str:
        return 'SKIPPED'

    def __reduce__(self) -> str:
        return 'SKIPPED'            # unpickles as this module's one SKIPPED


#: What :meth:`Task.run` returns when ``should_run_task`` declined to run.
SKIPPED = _Skipped()


class Task:
    """Base class for tasks. Override ``run_task``; the rest is optional."""

    #: Name of the queue (from the queue config) this task is published to.
    queue: str = 'default'
    #: Seconds one run may take before it is stopped and counted as failed
    #: (half the shipped queues' 60-second visibility timeout, so a batch runs
    #: together; one that does not fit it runs alone, under a heartbeat).
    time_limit: float = 30
    #: Retries after the first failure (0 or None: fail permanently at once).
    max_retries: Optional[int] = 4
    #: Successful runs longer than this many seconds are logged as slow and
    #: call ``on_target_runtime_exceeded`` (None: the time limit).
    target_runtime: Optional[float] = None
    #: Exceptions that fail the task permanently at once, without retrying.
    EXCEPTION_LIST: tuple = (NonRetriableTaskError,)
    #: Refuse, at publish time, arguments that do not bind to ``run_task``.
    check_arguments: bool = True
    #: With records on (RECORDS_URL): keep a bounded rendering of the arguments
    #: in the task's record. False for arguments that must not be stored.
    record_args: bool = True
    #: With records on: store what run_task returned (JSON-safe, bounded).
    store_result: bool = False
    #: At most this many runs of this task at once in one worker process (None:
    #: no cap); the others wait while their visibility budget allows, else are
    #: released.
    max_concurrency: Optional[int] = None
    #: Seconds a publish with the same arguments returns the id of one still
    #: waiting or running instead of sending another (RECORDS_URL). None: off.
    unique_for_sec: Optional[float] = None
    #: Whether ``run_task`` or a hook is a coroutine function (set per
    #: subclass): it then runs on the worker's event loop (see :meth:`arun`).
    is_coroutine: bool = False
    #: Whether the class overrides ``run_dead_task`` (set per subclass): its
    #: permanent failures then become dead runs.
    handles_dead_letters: bool = False
    #: One of Kale's own tasks, which only Kale publishes (see :mod:`kale.internal`).
    kale_internal: bool = False
    #: The app whose worker runs this instance (None outside a worker).
    app: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for old, new in RENAMED_HOOKS.items():
            if old in vars(cls):
                raise TaskDefinitionError(
                    'task %s defines %s, a hook of the original Kale that Kale never calls: '
                    'rename it %s' % (cls.task_path(), old, new))
        for name in TASK_METHODS:
            method = vars(cls).get(name)
            if inspect.isasyncgenfunction(method) or inspect.isgeneratorfunction(method):
                raise TaskDefinitionError(
                    'task %s defines %s as a generator (it yields), but a worker calls it '
                    'once for its result: return the result instead (with def or async def)'
                    % (cls.task_path(), name))
        check_attributes(cls)       # rate_limit, schedule, time_limit...: see kale.task_checks
        cls.is_coroutine = any(inspect.iscoroutinefunction(getattr(cls, name))
                               for name in TASK_METHODS)
        cls.handles_dead_letters = _check_dead_task(cls)

    @property
    def config(self) -> Config:
        """The settings of the app that runs this task (outside a worker, the default app's)."""
        return running_app(self).config

    @property
    def running(self) -> 'App':
        """The app that runs this task (the default app outside a worker)."""
        return running_app(self)

    def __init__(self, message: Optional[Message] = None):
        self.message = message
        self.task_id = message.task_id if message else None
        self.task_name = self.task_path()
        self.app_data = message.app_data if message else None

    # --- identity and publishing -------------------------------------------

    @classmethod
    def task_path(cls) -> str:
        """The importable path workers resolve: ``module.Class``."""
        return '%s.%s' % (cls.__module__, cls.__qualname__)

    @classmethod
    def make_task_id(cls, *args: Any, **kwargs: Any) -> str:
        """A unique id for a new invocation; override for more descriptive ids."""
        return random_id()

    @classmethod
    def _check_importable(cls) -> None:
        if cls.__module__ == '__main__' or '<locals>' in cls.__qualname__:
            raise PublishError('task %s cannot be imported by a worker: define it at the top '
                               'level of an importable module' % cls.task_path())

    @classmethod
    def labels(cls, *args: Any, **kwargs: Any) -> Optional[Mapping[str, str]]:
        """Labels for the record of a run with these arguments (e.g. a tenant),
        merged under those given to ``publish(..., labels=...)``. None: none."""
        return None

    @classmethod
    def check_call(cls, args: tuple, kwargs: Mapping[str, Any]) -> None:
        """Refuse a call at publish time (raise PublishError naming the
        problem) beyond the check that the arguments bind to ``run_task``.
        Accepts every call by default."""

    @classmethod
    def with_options(cls, queue: Optional[str] = None) -> 'TaskOptions':
        """This task sent elsewhere: ``MyTask.with_options(queue='shard-2')``
        has ``publish``, ``publish_batch``, ``apublish``, ``apublish_batch``
        and ``s`` as the task does, to ``queue`` (a queue of the queue config,
        checked as the task's own is), run by the workers that serve it."""
        if queue is not None and (not isinstance(queue, str) or not queue):
            raise PublishError('task %s: with_options(queue=...) takes a queue name, got %r'
                               % (cls.task_path(), queue))
        return TaskOptions(cls, queue)

    @classmethod
    def s(cls, *args: Any, **kwargs: Any) -> Signature:
        """A node of a workflow that will run this task with these arguments
        (see :mod:`kale.workflow`); nothing is sent. An argument may be
        ``workflow.ref(node)``: the result of another node."""
        return Signature(cls, args, kwargs)

    @classmethod
    def publish(cls, app_data: Any, *args: Any, delay_sec: float = 0,
                group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                labels: Optional[Mapping[str, str]] = None,
                unique_for_sec: Optional[float] = None, eta: Any = None, **kwargs: Any) -> str:
        """Publish one run of this task; returns its task id.

        ``app_data`` travels beside the arguments; ``delay_sec`` (up to 365
        days) or ``eta`` (a timezone-aware datetime) delays the first run. On
        a FIFO queue, ``group_id`` (required) names the group whose tasks run
        in order, and ``dedup_id`` (default: the task id) makes SQS drop a
        second publish with that id within five minutes. ``labels`` are kept
        in the task's record. ``unique_for_sec`` (default: the class's): a
        publish with the same arguments returns the id of one still waiting
        or running, younger than that, and sends nothing.
        """
        return default_app().publish(cls, app_data, *args, delay_sec=delay_sec,
                                     group_id=group_id, dedup_id=dedup_id, labels=labels,
                                     unique_for_sec=unique_for_sec, eta=eta, **kwargs)

    @classmethod
    def publish_batch(cls, app_data: Any, calls: Iterable[Any], delay_sec: float = 0,
                      group_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      unique_for_sec: Optional[float] = None, eta: Any = None) -> list[str]:
        """Publish many runs, ``[(args, kwargs), ...]``, with SendMessageBatch
        (up to 10 per request); returns their task ids in order. On a FIFO
        queue they join ``group_id`` (required) in this order. ``labels``
        apply to every run; ``unique_for_sec`` as in :meth:`publish`."""
        return default_app().publish_batch(cls, app_data, calls, delay_sec=delay_sec,
                                           group_id=group_id, labels=labels,
                                           unique_for_sec=unique_for_sec, eta=eta)

    @classmethod
    async def apublish(cls, app_data: Any, *args: Any, delay_sec: float = 0,
                       group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                       labels: Optional[Mapping[str, str]] = None, eta: Any = None,
                       **kwargs: Any) -> str:
        """:meth:`publish` for asyncio applications: ``await
        MyTask.apublish(app_data, ...)``, never blocking the event loop."""
        return await default_app().apublish(cls, app_data, *args, delay_sec=delay_sec,
                                            group_id=group_id, dedup_id=dedup_id,
                                            labels=labels, eta=eta, **kwargs)

    @classmethod
    async def apublish_batch(cls, app_data: Any, calls: Iterable[Any], delay_sec: float = 0,
                             group_id: Optional[str] = None,
                             labels: Optional[Mapping[str, str]] = None,
                             eta: Any = None) -> list[str]:
        """:meth:`publish_batch` for asyncio applications (see :meth:`apublish`)."""
        return await default_app().apublish_batch(cls, app_data, calls, delay_sec=delay_sec,
                                                  group_id=group_id, labels=labels, eta=eta)

    # --- retry policy --------------------------------------------------------

    @classmethod
    def retry_policy(cls, config: Optional[Config] = None) -> RetryPolicy:
        """``max_retries``, ``EXCEPTION_LIST`` and ``config``'s RETRY_DELAY_* settings."""
        return RetryPolicy.from_config(config or default_app().config, cls.max_retries,
                                       tuple(cls.EXCEPTION_LIST))

    @classmethod
    def retry_delay_sec(cls, retry_num: int) -> int:
        """Seconds before retry number ``retry_num + 1`` runs:
        ``min(RETRY_DELAY_MULTIPLE_SEC * 2**retry_num, SQS_MAX_TASK_DELAY_SEC)``,
        spread by RETRY_DELAY_JITTER, within SQS's 0..900."""
        return cls.retry_policy().delay_sec(retry_num)

    @classmethod
    def is_retriable(cls, exc: BaseException) -> bool:
        """Whether a run that raised ``exc`` may be retried at all."""
        return cls.retry_policy().retriable(exc)

    @classmethod
    def permanent_failure_reason(cls, message: Message, exc: BaseException) -> Optional[str]:
        """Why a failed run must not be retried, or None to retry it."""
        if not cls.is_retriable(exc):
            return PERMANENT_FAILURE_NON_RETRIABLE
        return cls.retry_policy().stop_reason(message.failure_num)

    # --- running -----------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run with the hooks around ``run_task``; returns SKIPPED when
        ``should_run_task`` declines."""
        # A hook left as Task's no-op is not called: the check costs less.
        cls = type(self)
        if cls.should_run_task is not _SHOULD_RUN and not self.should_run_task(*args, **kwargs):
            return SKIPPED
        if cls.before_run is not _BEFORE_RUN:
            self.before_run(*args, **kwargs)
        message = self.message
        try:
            if message is not None and message.dead_of:
                result = self.run_dead_task(message.dead_error, *args, **kwargs)
            else:
                result = self.run_task(*args, **kwargs)
        except Exception as exc:
            self.after_failure(exc)
            raise
        if cls.after_success is not _AFTER_SUCCESS:
            self.after_success(result)
        return result

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`run` on an event loop: coroutine methods are awaited; a run
        stopped at its time limit calls ``after_failure`` with TimeLimitExceeded."""
        cls = type(self)
        if cls.should_run_task is not _SHOULD_RUN \
                and not await _call(self.should_run_task, *args, **kwargs):
            return SKIPPED
        if cls.before_run is not _BEFORE_RUN:
            await _call(self.before_run, *args, **kwargs)
        message = self.message
        try:
            if message is not None and message.dead_of:
                result = await _call(self.run_dead_task, message.dead_error, *args, **kwargs)
            else:
                result = await _call(self.run_task, *args, **kwargs)
        except BaseException as exc:
            failure = failure_of(exc)
            if not isinstance(failure, Exception):
                raise           # a stop of the worker, not the task's failure
            await _call(self.after_failure, failure)
            if failure is exc:
                raise
            raise failure from exc
        if cls.after_success is not _AFTER_SUCCESS:
            await _call(self.after_success, result)
        return result

    def run_task(self, *args: Any, **kwargs: Any) -> Any:
        """The work itself; subclasses implement it (with def or async def)."""
        raise NotImplementedError('%s must implement run_task' % self.task_path())

    def run_dead_task(self, error: str, *args: Any, **kwargs: Any) -> Any:
        """The dead-letter handler, if a subclass defines it (def or async def):
        each run of this task that fails for good then gets a dead run, a new
        task with the same arguments calling this with the final error, one
        line (``retries_exhausted: ValueError: refused``), run by ``kale worker
        --dead-letters``; ``self.message.dead_of`` is the failed task's id."""
        raise NonRetriableTaskError('task %s defines no run_dead_task, so it has no dead runs: '
                                    'this one came from a version of the class that did'
                                    % self.task_path())

    # --- hooks: override any of these; the defaults do nothing -----------------------

    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        """Return False to skip this run (the message is deleted, not retried)."""
        return True

    def before_run(self, *args: Any, **kwargs: Any) -> None:
        """Called just before ``run_task``."""

    def after_success(self, result: Any) -> None:
        """Called after ``run_task`` returned."""

    def after_failure(self, exc: BaseException) -> None:
        """Called after ``run_task`` raised (including a time limit stop, except
        with ``TASK_ISOLATION = 'process'``, where the child is killed)."""

    def on_target_runtime_exceeded(self, duration_sec: float) -> None:
        """Called after a successful run that took longer than ``target_runtime``."""

    def on_permanent_failure(self, exc: BaseException, reason: str) -> None:
        """Called once when the task fails for good and goes to the dead-letter queue."""


class TaskOptions:
    """A task class with options for where it goes (see :meth:`Task.with_options`):
    ``publish``, ``publish_batch``, ``apublish``, ``apublish_batch`` and ``s``
    as the task class has, to another queue of the queue config."""

    __slots__ = ('queue', 'task_class')

    def __init__(self, task_class: type[Task], queue: Optional[str]):
        self.task_class = task_class
        self.queue = queue

    def _publisher(self) -> 'Publisher':
        self.task_class._check_importable()
        return default_app().publisher

    def publish(self, app_data: Any, *args: Any, delay_sec: float = 0,
                group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                labels: Optional[Mapping[str, str]] = None, eta: Any = None,
                **kwargs: Any) -> str:
        """:meth:`Task.publish`, to this queue."""
        return self._publisher().publish(self.task_class, app_data, args, kwargs,
                                         delay_sec=delay_sec, group_id=group_id, dedup_id=dedup_id,
                                         labels=labels, queue_name=self.queue, eta=eta)

    def publish_batch(self, app_data: Any, calls: Iterable[Any], delay_sec: float = 0,
                      group_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None, eta: Any = None) -> list[str]:
        """:meth:`Task.publish_batch`, to this queue."""
        return self._publisher().publish_batch(self.task_class, app_data, calls,
                                               delay_sec=delay_sec, group_id=group_id,
                                               labels=labels, queue_name=self.queue, eta=eta)

    async def apublish(self, app_data: Any, *args: Any, delay_sec: float = 0,
                       group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                       labels: Optional[Mapping[str, str]] = None, eta: Any = None,
                       **kwargs: Any) -> str:
        """:meth:`Task.apublish`, to this queue."""
        return await self._publisher().apublish(self.task_class, app_data, args, kwargs,
                                                delay_sec=delay_sec, group_id=group_id,
                                                dedup_id=dedup_id, labels=labels,
                                                queue_name=self.queue, eta=eta)

    async def apublish_batch(self, app_data: Any, calls: Iterable[Any], delay_sec: float = 0,
                             group_id: Optional[str] = None,
                             labels: Optional[Mapping[str, str]] = None,
                             eta: Any = None) -> list[str]:
        """:meth:`Task.apublish_batch`, to this queue."""
        return await self._publisher().apublish_batch(self.task_class, app_data, calls,
                                                      delay_sec=delay_sec, group_id=group_id,
                                                      labels=labels, queue_name=self.queue,
                                                      eta=eta)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """:meth:`Task.s`, a node that runs on this queue."""
        return Signature(self.task_class, args, kwargs, queue=self.queue)

    def __repr__(self) -> str:
        return '<%s with_options(queue=%r)>' % (self.task_class.task_path(), self.queue)


async def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a task's method; await what it returns if it is awaitable."""
    value = method(*args, **kwargs)
    if inspect.isawaitable(value):
        return await value
    return value


def _check_dead_task(cls: type[Task]) -> bool:
    """Whether ``cls`` overrides ``run_dead_task`` (TaskDefinitionError if it cannot take the error)."""
    method = cls.run_dead_task
    if method is Task.run_dead_task:
        return False
    try:
        inspect.signature(method).bind_partial(None, 'error')
    except (TypeError, ValueError):
        raise TaskDefinitionError('task %s: run_dead_task must be a method that takes the error, '
                                  'def run_dead_task(self, error, *args, **kwargs), got %r'
                                  % (cls.task_path(), method)) from None
    return True


_SHOULD_RUN = Task.should_run_task
_BEFORE_RUN = Task.before_run
_AFTER_SUCCESS = Task.after_success


def running_app(task: Optional[Task]) -> 'App':
    """The app that runs ``task``: the worker's, else the default app."""
    app = task.app if task is not None else None
    return app if app is not None else default_app()
