"""``MyTask.with_options(queue=...)``: :class:`TaskOptions` has ``publish``,
``publish_batch``, ``apublish``, ``apublish_batch`` and ``s`` as the task class
does, to another queue of the queue config."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from kale.default import default_app
from kale.signature import Signature

if TYPE_CHECKING:
    from kale.task import Task


class TaskOptions:
    """A task class with options for where it goes (see :meth:`Task.with_options`)."""

    __slots__ = ('queue', 'task_class')

    def __init__(self, task_class: type['Task'], queue: Optional[str]):
        self.task_class = task_class
        self.queue = queue

    def publish(self, app_data: Any, *args: Any, delay_sec: float = 0,
                group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                labels: Optional[Mapping[str, str]] = None, eta: Any = None,
                **kwargs: Any) -> str:
        """:meth:`Task.publish`, to this queue."""
        self.task_class._check_importable()
        return default_app().publisher.publish(self.task_class, app_data, args, kwargs,
                                       delay_sec=delay_sec, group_id=group_id,
                                       dedup_id=dedup_id, labels=labels, queue_name=self.queue,
                                       eta=eta)

    def publish_batch(self, app_data: Any, calls: Iterable[Any], delay_sec: float = 0,
                      group_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None, eta: Any = None) -> list[str]:
        """:meth:`Task.publish_batch`, to this queue."""
        self.task_class._check_importable()
        return default_app().publisher.publish_batch(self.task_class, app_data, calls,
                                             delay_sec=delay_sec, group_id=group_id,
                                             labels=labels, queue_name=self.queue, eta=eta)

    async def apublish(self, app_data: Any, *args: Any, delay_sec: float = 0,
                       group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                       labels: Optional[Mapping[str, str]] = None, eta: Any = None,
                       **kwargs: Any) -> str:
        """:meth:`Task.apublish`, to this queue."""
        self.task_class._check_importable()
        return await default_app().publisher.apublish(self.task_class, app_data, args, kwargs,
                                              delay_sec=delay_sec, group_id=group_id,
                                              dedup_id=dedup_id, labels=labels,
                                              queue_name=self.queue, eta=eta)

    async def apublish_batch(self, app_data: Any, calls: Iterable[Any], delay_sec: float = 0,
                             group_id: Optional[str] = None,
                             labels: Optional[Mapping[str, str]] = None,
                             eta: Any = None) -> list[str]:
        """:meth:`Task.apublish_batch`, to this queue."""
        self.task_class._check_importable()
        return await default_app().publisher.apublish_batch(self.task_class, app_data, calls,
                                                    delay_sec=delay_sec, group_id=group_id,
                                                    labels=labels, queue_name=self.queue, eta=eta)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """:meth:`Task.s`, a node that runs on this queue."""
        return Signature(self.task_class, args, kwargs, queue=self.queue)

    def __repr__(self) -> str:
        return '<%s with_options(queue=%r)>' % (self.task_class.task_path(), self.queue)
