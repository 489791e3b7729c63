"""Hooks: documented no-op methods that features and applications override,
:class:`PublishHooks` around every send and :class:`WorkerHooks` around a
worker's batches, tasks and outcomes; a failing hook is logged and the others
run (docs/explanation/internals-top.md, "Hooks")."""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import warnings
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Collection, Mapping, Optional, Sequence, Union

from kale.config import Config, import_string
from kale.exceptions import HookError, ImproperlyConfigured

if TYPE_CHECKING:
    from kale.app import App
    from kale.events import Settlement
    from kale.message import Message
    from kale.publisher import Publication
    from kale.queue_config import TaskQueue
    from kale.transport import ReceivedMessage
    from kale.worker.batch import Batch

logger = logging.getLogger(__name__)


class PublishHooks:
    """Every hook the publisher calls. All do nothing here."""

    def before_publish(self, publication: 'Publication') -> None:
        """After the messages were built and checked, before they are encoded
        and sent. A hook may add SQS attributes to ``publication.attributes``
        (one dict per message), e.g. a trace context."""

    def after_publish(self, publication: 'Publication') -> None:
        """After the send: ``publication.error`` is None when every message was
        sent, else the exception the publisher is about to raise."""

    def claim_unique(self, claims: Sequence[tuple[str, str]],
                     for_sec: float) -> Optional[list[str]]:
        """Unique tasks: for each (key, task id) the id of the task holding
        the key (this one when it was free), or None when this hook does not
        decide (the task records do, with RECORDS_URL set)."""
        return None

    def release_unique(self, claims: Sequence[tuple[str, str]]) -> None:
        """Free keys claimed for tasks whose send then failed."""


class WorkerHooks:
    """Every hook a worker calls. All do nothing here."""

    def on_worker_startup(self, worker: Any) -> None:
        """Once, before the first selection. Raising stops the worker from starting."""

    def on_worker_shutdown(self, worker: Any) -> None:
        """Once, after the last batch was settled (also on signals and memory exits)."""

    def on_supervisor_startup(self, supervisor: Any) -> None:
        """In the supervisor of ``kale worker --concurrency N``, before it starts
        workers (it may add to ``supervisor.env``, their environment). Raising
        stops the supervisor from starting, as ``on_worker_startup`` stops a worker."""

    def on_supervisor_shutdown(self, supervisor: Any) -> None:
        """In the supervisor, once every worker has exited."""

    def on_worker_exited(self, supervisor: Any, pid: int, exit_code: int) -> None:
        """In the supervisor, after one of its workers exited (before any restart)."""

    def cancelled_tasks(self, queue: 'TaskQueue', task_ids: Sequence[str]) -> Collection[str]:
        """Before a batch runs (after its envelopes were verified): the ids among
        ``task_ids`` that must not run. The worker settles each as cancelled
        (its message deleted, unrun) and calls ``on_task_cancelled``. Called
        once per batch, so a hook can answer with one query."""
        return ()

    def succeeded_tasks(self, queue: 'TaskQueue', task_ids: Sequence[str]) -> Collection[str]:
        """Before a batch runs, with ``cancelled_tasks``: the ids among
        ``task_ids`` whose task already succeeded (a duplicate delivery: a
        publish or a copy SQS took twice, a delete whose answer was lost).
        The worker deletes their messages unrun, as skipped."""
        return ()

    def tasks_due_after(self, after: float) -> Optional[Mapping[str, tuple[int, float]]]:
        """For a burst worker left with only delayed messages: by queue name,
        how many tasks wait for a due time later than ``after`` (epoch
        seconds) and the earliest of those times; None when unknown (the
        default). The burst leaves those behind instead of waiting for SQS
        to show them (see :mod:`kale.worker.burst`)."""
        return None

    def before_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """After a batch was received, before its first task runs."""

    def before_settle(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """After a batch's runs, before its messages are deleted or copied:
        what must be kept before SQS forgets a message is kept here (the
        records write their outcome rows)."""

    def after_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """After a batch was settled; ``batch.settlements`` says what happened.
        A batch whose tasks end apart is settled in parts (a pool's messages
        as they end, the serial pool's once its runs took a second), so a
        batch may come here once for each part."""

    def on_task_started(self, queue: 'TaskQueue', received: 'ReceivedMessage',
                        message: 'Message') -> None:
        """Just before a verified task runs (in the worker, before any child process)."""

    def on_task_finished(self, settlement: 'Settlement') -> None:
        """Just after a run ended, before its message is settled."""

    def on_task_succeeded(self, settlement: 'Settlement') -> None:
        """A task ran to completion (also when ``should_run_task`` skipped it),
        and its message was deleted."""

    def on_task_retried(self, settlement: 'Settlement') -> None:
        """A run raised or timed out and will be retried."""

    def on_task_cancelled(self, settlement: 'Settlement') -> None:
        """A message was deleted unrun because ``cancelled_tasks`` named its task."""

    def on_task_released(self, settlement: 'Settlement') -> None:
        """A message was released unstarted (budget, shutdown or memory limit)."""

    def on_task_dead_lettered(self, settlement: 'Settlement') -> None:
        """A message went to the dead-letter queue (or was dropped when that is off):
        retries exhausted, a non-retriable error, or a message that cannot be decoded."""

    def on_task_duplicate(self, settlement: 'Settlement') -> None:
        """A second delivery of a task whose other delivery in the same batch
        runs: deleted unrun (see :mod:`kale.worker.duplicates`)."""

    def on_task_waiting(self, settlement: 'Settlement') -> None:
        """A task that arrived before its due time (a wait longer than SQS's
        15-minute delay, see :mod:`kale.delays`) was sent on unrun, delayed
        by the time still to wait (``settlement.copy.delay_sec``)."""

    # The names these hooks had before they followed the outcomes. A hooks
    # class that still defines one is called under the new name, with a
    # warning once (see DEPRECATED_HOOKS).

    def on_task_failed(self, settlement: 'Settlement') -> None:
        """Deprecated: ``on_task_retried``."""

    def on_task_deferred(self, settlement: 'Settlement') -> None:
        """Deprecated: ``on_task_released``."""

    def on_task_permanently_failed(self, settlement: 'Settlement') -> None:
        """Deprecated: ``on_task_dead_lettered``."""


#: Old hook name -> the name it has now. Defining the old one still works:
#: it is called for the new one, and a DeprecationWarning says so once per class.
DEPRECATED_HOOKS = {'on_task_failed': 'on_task_retried',
                    'on_task_deferred': 'on_task_released',
                    'on_task_permanently_failed': 'on_task_dead_lettered'}
_OLD_NAMES = {new: old for old, new in DEPRECATED_HOOKS.items()}
_warned_classes: set[tuple[type, str]] = set()


def _old_name_target(target: Any, name: str) -> Optional[Callable[..., Any]]:
    """``target``'s method under the hook's old name, if any (warned once per class)."""
    old = _OLD_NAMES.get(name)
    if old is None or getattr(type(target), old, None) is getattr(WorkerHooks, old):
        return None
    key = (type(target), old)
    if key not in _warned_classes:
        _warned_classes.add(key)
        message = ('%s.%s is the old name of the hook %s: rename it (it is called for now)'
                   % (type(target).__name__, old, name))
        warnings.warn(message, DeprecationWarning, stacklevel=3)
        logger.warning('%s', message)
    bound: Callable[..., Any] = getattr(target, old)
    return bound


class SettingsHooks(WorkerHooks):
    """``ON_WORKER_STARTUP`` and ``ON_WORKER_SHUTDOWN``: callables taking no
    arguments, run as the matching worker hooks."""

    def __init__(self, startup: Optional[Callable[[], Any]],
                 shutdown: Optional[Callable[[], Any]]):
        self.startup = startup
        self.shutdown = shutdown

    def on_worker_startup(self, worker: Any) -> None:
        if self.startup is not None:
            try:
                self.startup()
            except Exception as exc:
                raise HookError('ON_WORKER_STARTUP failed: %s: %s'
                                % (type(exc).__name__, exc)) from exc

    def on_worker_shutdown(self, worker: Any) -> None:
        if self.shutdown is not None:
            self.shutdown()


def load_hooks(entries: Sequence[Any], base: type, setting: str) -> list[Any]:
    """Hook objects from a setting's entries: instances, classes (made with no
    arguments) or dotted paths to either. Each must be a ``base``."""
    loaded = []
    for entry in entries:
        hook = import_string(entry, '%s entry' % setting) if isinstance(entry, str) else entry
        if isinstance(hook, type):
            hook = hook()
        if not isinstance(hook, base):
            raise ImproperlyConfigured('%s entry %r is not a kale.hooks.%s'
                                       % (setting, entry, base.__name__))
        loaded.append(hook)
    return loaded


#: Hooks of the features Kale ships, by dotted path (the core imports no
#: feature while its setting is off), and the setting that turns each on. A
#: workflow moves on before its node's record says it succeeded (both in
#: ``before_settle``): a worker dying in between runs the node again, which
#: changes nothing; the other way round, the redelivery would be deleted
#: unrun and the workflow would never move on.
FEATURE_HOOKS = [
    ('RECORDS_URL', 'kale.workflow.run.WorkflowHooks'),
    ('RECORDS_URL', 'kale.records.hooks.RecordsHooks'),
    ('METRICS_PORT', 'kale.contrib.metrics.PrometheusHooks'),
    ('TRACING', 'kale.contrib.tracing.TracingHooks'),
    ('AUTO_CREATE_TOPICS', 'kale.topics.sync.TopicHooks'),
]


def feature_hooks(config: Config) -> list[str]:
    """Dotted paths of the shipped features' hooks whose setting is on in ``config``."""
    return [path for setting, path in FEATURE_HOOKS if config.get(setting)]


def load_feature_hooks(app: Union['App', Config]) -> list[Any]:
    """The hooks of the features turned on in ``app``'s configuration, each
    built for it (``HookClass.for_app(app)``): the publisher, the worker and
    the supervisor of an app put them first among the hooks they load."""
    # kale/worker/parts.py passes its app's config until the engine merge gives it the app
    owner: Optional['App'] = app._owner if isinstance(app, Config) else app     # (temporary)
    if owner is None:
        raise TypeError('the features\' hooks are built for an app: give the configuration '
                        'of one (app.config), not a Config no App was built on')
    return [import_string(path, 'feature hook').for_app(owner)
            for path in feature_hooks(owner.config)]


def run_to_end(awaitable: Awaitable[Any]) -> Any:
    """A coroutine hook's awaitable, run on a loop of its own: on this thread,
    or on a thread of its own when this one already runs a loop (``publish``
    called from async code), which cannot run a second."""
    async def wait() -> Any:
        return await awaitable
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='kale-hook') as pool:
        return pool.submit(asyncio.run, wait()).result()


class _Overriding(dict):
    """Hook -> the bound methods of the objects that override it (under its
    name or its old one): calling a base class's no-op for every task would
    cost time and do nothing."""

    def __init__(self, hooks: list[Any]):
        super().__init__()
        self.hooks = hooks

    def __missing__(self, hook: Callable[..., Any]) -> list[Any]:
        name = hook.__name__
        targets = []
        for target in self.hooks:
            if getattr(type(target), name, None) is not hook:
                targets.append(getattr(target, name))
            else:
                old = _old_name_target(target, name)
                if old is not None:
                    targets.append(old)
        self[hook] = targets
        return targets


def _failed(target: Any, hook: Callable[..., Any]) -> None:
    logger.exception('hook %s.%s failed', type(target.__self__).__name__, hook.__name__)


class HookDispatcher:
    """Calls one hook on every registered object, isolating failures; a hook is
    named by its method on the base class, never by a string:
    ``dispatch(WorkerHooks.on_task_started, queue, received, message)``."""

    def __init__(self, hooks: Sequence[Any]):
        self.hooks = list(hooks)
        self._overriding = _Overriding(self.hooks)
        #: Runs a coroutine hook's awaitable to its end (a worker sets its
        #: event loop's; by default a loop of the call's own).
        self.awaiter: Callable[[Awaitable[Any]], Any] = run_to_end

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def __call__(self, hook: Callable[..., None], *args: Any) -> None:
        for target in self._overriding[hook]:
            try:
                result = target(*args)
                if result is not None and inspect.isawaitable(result):
                    self.awaiter(result)      # a coroutine hook: awaited
            except Exception:
                _failed(target, hook)

    async def acall(self, hook: Callable[..., None], *args: Any) -> None:
        """Call the hook as :meth:`__call__` does, from a coroutine on an event
        loop: a coroutine hook is awaited there."""
        for target in self._overriding[hook]:
            try:
                result = target(*args)
                if result is not None and inspect.isawaitable(result):
                    await result
            except Exception:
                _failed(target, hook)

    def collect(self, hook: Callable[..., Any], *args: Any) -> list[Any]:
        """Call the hook on every object that overrides it and return their
        answers; one that raises is logged and left out."""
        answers = []
        for target in self._overriding[hook]:
            try:
                answer = target(*args)
                if answer is not None and inspect.isawaitable(answer):
                    answer = self.awaiter(answer)
                answers.append(answer)
            except Exception:
                _failed(target, hook)
        return answers

    def overridden(self, hook: Callable[..., Any]) -> bool:
        """Whether any registered object overrides the hook: the worker skips the
        hooks of every task that none overrides (what that is worth, measured:
        docs/explanation/internals-top.md, "Hooks")."""
        return bool(self._overriding[hook])

    def strict(self, hook: Callable[..., None], *args: Any) -> None:
        """Call the hook everywhere, stopping at the first failure with HookError."""
        name = hook.__name__
        for target in self.hooks:
            try:
                result = getattr(target, name)(*args)
                if result is not None and inspect.isawaitable(result):
                    self.awaiter(result)
            except HookError:
                raise
            except Exception as exc:
                raise HookError('%s.%s failed: %s: %s' % (type(target).__name__, name,
                                                          type(exc).__name__, exc)) from exc
