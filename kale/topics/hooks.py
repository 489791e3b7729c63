"""With AUTO_CREATE_TOPICS on, a worker sets up the topics of its queues'
subscribers when it starts (as ``kale topics sync`` would, for those queues)."""
from __future__ import annotations

import logging
from typing import Any

from kale.config import Config
from kale.exceptions import KaleError
from kale.hooks import PublishHooks, WorkerHooks

logger = logging.getLogger(__name__)


class TopicHooks(PublishHooks, WorkerHooks):
    """Subscribes a starting worker's queues to their subscribers' topics."""

    def __init__(self, config: Config):
        self.config = config

    @classmethod
    def for_config(cls, config: Config) -> 'TopicHooks':
        """The hooks of an app whose configuration is ``config``."""
        return cls(config)

    def on_worker_startup(self, worker: Any) -> None:
        from kale.topics.backend import topics_backend
        from kale.topics.subscribers import get_subscriptions
        from kale.topics.sync import sync
        config = self.config
        try:
            if not get_subscriptions(config).subscribers:
                return
            names = {queue.name for queue in getattr(worker, 'queues', [])}
            for line in sync(config, topics_backend(config), queues=names):
                logger.info('topic subscription: %s', line)
        except KaleError as exc:
            logger.error('topics not set up for this worker\'s queues: %s', exc)
