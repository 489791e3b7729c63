"""The sweep every worker makes of the workflows, every ``WORKFLOW_SWEEP_SEC``:
stranded nodes published, deadlines held (docs/explanation/internals-workflow.md, "The sweep")."""
from __future__ import annotations

import logging
import threading
from typing import Callable, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import KaleError
from kale.workflow.state import WorkflowState

logger = logging.getLogger(__name__)


class Sweeper:
    """A thread that sweeps, started and closed with its worker."""

    def __init__(self, state: Callable[[], WorkflowState],
                 publish: Callable[[WorkflowState, list[dict]], None],
                 cancel: Callable[[list[str]], None], interval_sec: float, grace_sec: float,
                 clock: Clock = SYSTEM_CLOCK):
        self._state = state
        self._publish = publish
        self._cancel = cancel
        self.interval_sec = interval_sec
        self.grace_sec = grace_sec
        self.clock = clock
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name='kale-workflow-sweep', daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_sec):
            try:
                self.sweep()
            except KaleError as exc:         # the store or SQS is down: the next sweep tries again
                logger.warning('workflow sweep failed: %s', exc)

    def sweep(self) -> tuple[int, int]:
        """One sweep: (nodes published, workflows failed for their deadline)."""
        state = self._state()
        now = self.clock.time()
        stranded = state.stranded(now, self.grace_sec)
        if stranded:
            logger.info('publishing %d workflow nodes left unpublished (their publisher\'s '
                        'claim lapsed): %s', len(stranded),
                        ' '.join(node['task_id'] for node in stranded[:20]))
            self._publish(state, stranded)
        overdue = state.overdue(now)
        for workflow_id in overdue:
            logger.info('workflow %s is past its deadline: failing its unfinished nodes',
                        workflow_id)
            self._cancel(state.expire(workflow_id, now))
        return len(stranded), len(overdue)
