"""``kale worker --concurrency N``: N worker processes under one small supervisor
(docs/explanation/internals-worker.md, "The supervisor").
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import time
from types import FrameType
from typing import Any, Optional, Sequence

from kale.config import Config
from kale.exceptions import HookError
from kale.hooks import HookDispatcher, WorkerHooks
from kale.retry import Backoff
from kale.worker.control import WorkerControl
from kale.worker.limits import SUPERVISOR_PID_VARIABLE
from kale.worker.parts import load_worker_hooks

logger = logging.getLogger(__name__)

#: A worker that exits abnormally sooner than this after starting is
#: restarted only after a pause that doubles with each quick failure.
QUICK_FAILURE_SEC = 5.0


@dataclasses.dataclass
class Child:
    slot: int
    process: subprocess.Popen
    started: float


class Supervisor:
    """Keeps ``processes`` copies of ``command`` running."""

    def __init__(self, command: Sequence[str], processes: int, config: Config,
                 env: Optional[dict] = None, queue_names: Sequence[str] = ()):
        self.command = list(command)
        self.processes = processes
        #: The queues its workers serve (empty: all), for hooks that report it.
        self.queue_names = list(queue_names)
        self.hooks = HookDispatcher(load_worker_hooks((), config))
        self.env = dict(env if env is not None else os.environ)
        self.env[SUPERVISOR_PID_VARIABLE] = str(os.getpid())
        self.children: dict[int, Child] = {}
        self.exit_codes: dict[int, int] = {}
        self.restarts = 0
        self._stopping = False
        self._backoffs = {slot: Backoff(initial=1.0, maximum=30.0) for slot in range(processes)}
        self._restart_at: dict[int, float] = {}
        #: A stop asked of it through the records stops every worker (kale.worker.control).
        self.obey = WorkerControl('supervisor', self)

    def _start(self, slot: int) -> None:
        # A session of its own: Ctrl-C in a terminal reaches only the supervisor,
        # which forwards exactly one signal to each worker.
        process = subprocess.Popen(self.command, env=self.env, start_new_session=True)
        self.children[slot] = Child(slot, process, time.monotonic())
        logger.info('supervisor: started worker %d (pid %d)', slot, process.pid)
        if self._stopping:                  # a stop request came while it was starting
            process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop every worker as SIGTERM does (a stop asked through the records)."""
        self._forward(signal.SIGTERM, None)

    def _forward(self, signum: int, frame: Optional[FrameType]) -> None:
        self._stopping = True
        for child in self.children.values():
            if child.process.poll() is None:
                try:
                    child.process.send_signal(signum)
                except ProcessLookupError:
                    pass

    def run(self) -> int:
        """Supervise until every worker has exited; 0 when all exited cleanly."""
        try:
            self.hooks.strict(WorkerHooks.on_supervisor_startup, self)
        except HookError:
            self.hooks(WorkerHooks.on_supervisor_shutdown, self)   # what did start, stops
            raise
        previous = {signum: signal.signal(signum, self._forward)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._supervise()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.hooks(WorkerHooks.on_supervisor_shutdown, self)
        logger.info('supervisor: all workers exited (%d restarts)', self.restarts)
        # 0 when every worker exited cleanly or a stop was asked, else the first failed one's code
        failed = [code for code in self.exit_codes.values() if code != 0]
        return 0 if not failed or self._stopping else failed[0]

    def _supervise(self) -> None:
        """Start every worker, then reap and restart them until all have exited."""
        for slot in range(self.processes):
            self._start(slot)
        while self.children or self._restart_at:
            self._reap()
            self._restart_due()
            time.sleep(0.1)

    def _reap(self) -> None:
        for slot, child in list(self.children.items()):
            code = child.process.poll()
            if code is None:
                continue
            del self.children[slot]
            self.exit_codes[slot] = code
            self.hooks(WorkerHooks.on_worker_exited, self, child.process.pid, code)
            if code == 0 or self._stopping:
                logger.info('supervisor: worker %d (pid %d) exited with %d', slot,
                            child.process.pid, code)
                continue
            lived = time.monotonic() - child.started
            delay = self._backoffs[slot].next_delay() if lived < QUICK_FAILURE_SEC else 0.0
            if lived >= QUICK_FAILURE_SEC:
                self._backoffs[slot].reset()
            logger.warning('supervisor: worker %d (pid %d) exited with %d after %.1fs; '
                           'restarting in %.1fs', slot, child.process.pid, code, lived, delay)
            self._restart_at[slot] = time.monotonic() + delay

    def _restart_due(self) -> None:
        for slot, when in list(self._restart_at.items()):
            if self._stopping:
                del self._restart_at[slot]
            elif time.monotonic() >= when:
                del self._restart_at[slot]
                self.restarts += 1
                self._start(slot)


#: The ``kale worker`` options passed on to a supervised worker when given:
#: (attribute, option, its value's kind: None for a flag).
PASSED_ON = (('settings', '--settings', str), ('queues', '--queues', list),
             ('burst', '--burst', None), ('dead_letters', '--dead-letters', None),
             ('scheduler', '--scheduler', None), ('pool', '--pool', str),
             ('max_in_flight', '--max-in-flight', int), ('metrics_port', '--metrics-port', int),
             ('executors', '--executors', str))


def worker_command(args: Any) -> list[str]:
    """The ``kale worker`` command line for one supervised worker."""
    import sys
    command = list(getattr(args, 'kale_command', None) or [sys.executable, '-m', 'kale'])
    command += ['worker', '--log-level', args.log_level, '--aws-log-level', args.aws_log_level]
    for name, option, kind in PASSED_ON:
        given = getattr(args, name, None)
        if given is None or (kind is not int and not given):
            continue                    # (a number is passed on even when 0)
        command.append(option)
        if kind is not None:
            command.append(','.join(given) if kind is list else str(given))
    return command
