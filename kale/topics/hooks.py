"""With AUTO_CREATE_TOPICS on, a worker sets up the topics of its queues'
subscribers when it starts (as ``kale topics sync`` would, for those queues)."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kale.exceptions import KaleError
from kale.hooks import PublishHooks, WorkerHooks

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger(__name__)


class TopicHooks(PublishHooks, WorkerHooks):
    """Subscribes a starting worker's queues to their subscribers' topics."""

    def __init__(self, app: 'App'):
        self.app = app

    @classmethod
    def for_app(cls, app: 'App') -> 'TopicHooks':
        return cls(app)

    def on_worker_startup(self, worker: Any) -> None:
        from kale.topics.sync import sync
        try:
            if not self.app.subscriptions.subscribers:
                return
            names = {queue.name for queue in getattr(worker, 'queues', [])}
            for line in sync(self.app, queues=names):
                logger.info('topic subscription: %s', line)
        except KaleError as exc:
            logger.error('topics not set up for this worker\'s queues: %s', exc)
