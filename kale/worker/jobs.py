"""The messages a worker with a pool holds (:class:`Job`), and how each one's
task runs, on a thread or on the worker's event loop (:class:`JobRunner`);
see docs/explanation/internals-worker.md, "Jobs".
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import queue
import threading
from typing import Any, Optional

from kale import logs
from kale.events import Settlement
from kale.hooks import HookDispatcher, WorkerHooks
from kale.task import Task
from kale.transport import ReceivedMessage
from kale.worker.batch import Batch, Opened
from kale.worker.runner import TaskRunner
from kale.worker.suspects import release
from kale.worker.threads import Threads, run_for
from kale.worker.watchdog import Watchdog, Watched

logger = logging.getLogger('kale.worker')


class Job:
    """One message the worker holds (see the docs page); what differs
    from job to job is set in ``__init__``, the rest are class defaults."""

    started = 0.0
    settlement: Optional[Settlement] = None
    #: A coroutine job's entry with the watchdog.
    watched: Optional[Watched] = None
    #: Its task outlasts the visibility timeout: the heartbeat keeps it.
    long = False
    #: It did not come back from its time limit.
    stuck = False
    #: A coroutine job's coroutine (to tell which one holds the loop).
    coroutine: Any = None
    #: A thread (or the event loop) began its run: it will come back as
    #: ``('done', job)``. Set under :class:`JobRunner`'s lock.
    claimed = False
    #: The worker took it back before its run began (:meth:`JobRunner.withdraw`):
    #: it never runs.
    withdrawn = False

    def __init__(self, batch: Batch, received: ReceivedMessage, opened: Opened):
        self.batch = batch
        self.received = received
        self.opened = opened
        self.task_class: type[Task] = opened.task_class
        #: The FIFO group it belongs to (None on a standard queue).
        self.group: Optional[tuple[str, str]] = \
            (batch.queue.name, received.group_id or '') if batch.fifo else None

    @classmethod
    def of(cls, batch: Batch, received: ReceivedMessage) -> 'Job':
        """The job of one message of a received batch, with the batch's budget."""
        return cls(batch.part(received), received, batch.opened[received.message_id])

    def __str__(self) -> str:
        return 'task %s (%s)' % (self.opened.task_id, self.task_class.task_path())


class JobRunner:
    """Runs jobs on ``threads`` or on ``runner``'s event loop; see the docs page."""

    def __init__(self, runner: TaskRunner, hooks: HookDispatcher, threads: Optional[Threads],
                 watchdog: Watchdog, events: 'queue.SimpleQueue[tuple[str, Any]]'):
        self.runner = runner
        self.hooks = hooks
        self.threads = threads
        self.watchdog = watchdog
        self.events = events
        self._coroutines: list[Job] = []
        self._claims = threading.Lock()
        # Asked once: a per-task hook that nobody overrides costs nothing per task.
        self._on_started = hooks.overridden(WorkerHooks.on_task_started)
        self._on_finished = hooks.overridden(WorkerHooks.on_task_finished)

    def start(self, job: Job, now: float) -> None:
        """Start the job's run (a coroutine job: on the next :meth:`flush`)."""
        if job.task_class.is_coroutine and self.runner.isolation != 'process':
            self._coroutines.append(job)
        else:
            assert self.threads is not None
            self.threads.submit(lambda: self._run_on_thread(job))

    def withdraw(self, job: Job) -> bool:
        """Take back a started job whose run no thread (nor the loop) has
        begun: True when it never will, so its message may be given back;
        False when its run began (its ``done`` will come)."""
        with self._claims:
            if job.claimed:
                return False
            job.withdrawn = True
            return True

    def _claim(self, job: Job) -> bool:
        """(Where the job runs.) Begin its run, unless it was withdrawn."""
        with self._claims:
            if job.withdrawn:
                return False
            job.claimed = True
            return True

    def flush(self) -> None:
        """Hand the coroutine jobs started since the last call to the loop, in
        one wake-up of its thread."""
        if self._coroutines:
            jobs, self._coroutines = self._coroutines, []
            self.runner.loop.call(self._create_tasks, jobs)

    def _create_tasks(self, jobs: list[Job]) -> None:
        """(On the loop's thread.) An asyncio task for each job."""
        loop = self.runner.loop.loop
        for job in jobs:
            if not self._claim(job):
                continue
            # Watched from its start to its end here, on the loop's thread:
            # the watchdog judges the run, not the worker's bookkeeping of it.
            job.watched = self.watchdog.watch_for(job.task_class.time_limit, job)
            job.coroutine = self._run_coroutine(job)
            loop.create_task(job.coroutine).add_done_callback(functools.partial(self._ended, job))

    def holding_the_loop(self, running: set[Job]) -> str:
        """The coroutine job running on the loop now (for the watchdog's log)."""
        for job in list(running):
            if job.coroutine is not None and job.coroutine.cr_running:
                return str(job)
        return ''

    # --- on a worker thread -----------------------------------------------------------

    def _run_on_thread(self, job: Job) -> None:
        if not self._claim(job):
            return                          # given back before this thread took it
        try:
            run_for(job)
            job.settlement = self.execute(job)
        except BaseException as exc:    # a job must always come back
            job.settlement = lost_run(job, exc)
            logger.exception('running %s failed', job)
        finally:
            if job.settlement is None:
                job.settlement = lost_run(job, RuntimeError('its run ended without an outcome'))
            self.events.put(('done', job))

    def execute(self, job: Job) -> Settlement:
        """Decode and run the job's task on this thread, with its hooks and log context."""
        message = self.runner.read(job.batch, job.received, job.opened)
        if isinstance(message, Settlement):
            return message
        if self._on_started:
            self.hooks(WorkerHooks.on_task_started, job.batch.queue, job.received, message)
        context = logs.task_started(message.task_id, message.task_name, job.batch.queue.name,
                                    message.attempt)
        try:
            settlement = self.runner.run(job.batch, job.received, message, job.task_class,
                                         job.opened.envelope)
        finally:
            logs.task_ended(context)
        if self._on_finished:
            self.hooks(WorkerHooks.on_task_finished, settlement)
        return settlement

    # --- on the event loop ---------------------------------------------------------------

    async def _run_coroutine(self, job: Job) -> Settlement:
        if job.opened.envelope.offloaded:       # its payload is read from S3: off the loop
            message = await asyncio.get_running_loop().run_in_executor(
                None, self.runner.read, job.batch, job.received, job.opened)
        else:
            message = self.runner.read(job.batch, job.received, job.opened)
        if isinstance(message, Settlement):
            return message
        if self._on_started:
            await self.hooks.acall(WorkerHooks.on_task_started, job.batch.queue, job.received,
                                   message)
        context = logs.task_started(message.task_id, message.task_name, job.batch.queue.name,
                                    message.attempt)
        try:
            settlement = await self.runner.arun(job.batch, job.received, message,
                                                job.task_class, job.opened.envelope)
        finally:
            logs.task_ended(context)
        if self._on_finished:
            await self.hooks.acall(WorkerHooks.on_task_finished, settlement)
        return settlement

    def _ended(self, job: Job, done: 'asyncio.Future[Settlement]') -> None:
        """(On the loop's thread.) A coroutine job ended: no longer watched
        (whenever the worker handles its end), and the worker is told."""
        if job.watched is not None:
            self.watchdog.unwatch(job.watched)
        try:
            job.settlement = done.result()
        except BaseException as exc:        # cancelled with the loop, or a bug: given back
            job.settlement = lost_run(job, exc)
        self.events.put(('done', job))


def may_start(waiting: list[Job], room: int, groups: set[tuple[str, str]],
              per_class: 'collections.Counter[type]') -> tuple[list[Job], list[Job]]:
    """Of the jobs ``waiting``, those that may start now (in ``room``, one a FIFO group,
    ``max_concurrency`` a class, with ``groups`` and ``per_class`` running) and the rest."""
    starting: list[Job] = []
    kept = []
    groups, per_class = set(groups), collections.Counter(per_class)
    for job in waiting:
        cap = job.task_class.max_concurrency
        if len(starting) >= room or job.group in groups or \
                (cap is not None and per_class[job.task_class] >= cap):
            kept.append(job)
            continue
        starting.append(job)
        per_class[job.task_class] += 1
        if job.group is not None:
            groups.add(job.group)
    return starting, kept


def lost_run(job: Job, exc: BaseException) -> Settlement:
    return release(job.batch, job.received, 'not run: %s' % (exc,))
