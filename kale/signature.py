"""A task invocation made but not sent, a node of a workflow: ``MyTask.s(*args,
**kwargs)`` makes one, with its task id from that moment (:mod:`kale.workflow`
arranges them into a flow)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from kale.ids import random_id


class Signature:
    """``task_class`` with its arguments, to run as one node of a flow."""

    __slots__ = ('args', 'delay_sec', 'eta', 'kwargs', 'queue', 'task_class', 'task_id')

    def __init__(self, task_class: type, args: tuple, kwargs: Mapping[str, Any],
                 queue: Optional[str] = None):
        self.task_class = task_class
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        #: The queue the node runs on (None: the task's own).
        self.queue = queue
        self.task_id = random_id()
        #: Its run delayed (see :meth:`set`).
        self.delay_sec: float = 0
        self.eta: Any = None

    def set(self, delay_sec: float = 0, eta: Any = None) -> 'Signature':
        """This node with its run delayed as ``publish`` delays a task
        (``delay_sec`` from when it is published, with all its inputs), checked
        at submit: ``Report.s('daily').set(delay_sec=3600)``."""
        self.delay_sec, self.eta = delay_sec, eta
        return self

    @property
    def name(self) -> str:
        """The task's dotted path."""
        return str(self.task_class.task_path())  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return '<Signature %s %s>' % (self.name, self.task_id)
