"""The app: one configuration and every part built from it, on first use, handed
down to the parts so that two apps work side by side; the default app serves only
the conveniences and entry points (docs/explanation/internals-top.md, "The app")."""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, TypeVar

from kale.clock import SYSTEM_CLOCK, Clock
from kale.conf import settings
from kale.config import Config
from kale.default import register_default

if TYPE_CHECKING:
    from kale.broker import Broker
    from kale.codec import Codec
    from kale.publisher import Publisher
    from kale.queue_config import QueueConfig
    from kale.records.recorder import Recorder
    from kale.registry import Registry
    from kale.schedules.discovery import Schedules
    from kale.schedules.scheduler import Scheduler
    from kale.store import Store
    from kale.task import Task
    from kale.topics.names import Subscriptions
    from kale.transport import Transport
    from kale.transport.payloads import PayloadStore

T = TypeVar('T')

#: Held while an app takes its configuration (see App.__init__).
_owning = threading.RLock()


class App:
    """A configuration and the parts built from it, each once, on first use, and
    handed down: two apps with different settings work side by side."""

    def __init__(self, config: Optional[Config] = None, *,
                 transport: Optional['Transport'] = None, clock: Clock = SYSTEM_CLOCK,
                 **values: Any):
        """``config`` (by default the defaults and the settings module that
        ``KALE_SETTINGS_MODULE`` names), with ``values`` over it. ``transport``
        replaces SQS under its broker (the in-memory transport, in tests);
        ``clock`` is what its parts read time from."""
        if config is None:
            config = Config.load()
        with _owning:
            # The first app built on a Config owns it; another one, or one
            # with values over it, owns a copy: two apps share no part.
            if values or config._owner is not None:
                config = config.replace(**values)
            object.__setattr__(config, '_owner', self)
        self.config: Config = config
        self._transport = transport
        self.clock = clock
        self._parts: dict[Any, Any] = {}
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._given: Optional[tuple['Publisher', 'Publisher']] = None
        self._default = False

    def replace(self, **values: Any) -> 'App':
        """This app with some settings changed: the same transport and clock,
        parts built afresh for the new settings."""
        return App(self.config, transport=self._transport, clock=self.clock, **values)

    @property
    def is_default(self) -> bool:
        """Whether it is (or was) the default app: :func:`default_app` returned
        it, whether it built it or it was built by hand on the configuration
        the settings give."""
        return self._default

    def __repr__(self) -> str:
        return 'App(%s)' % (self.config.module_name or 'defaults')

    def part(self, name: Any, build: Callable[[], T]) -> T:
        """The part ``name`` of this app, built by ``build()`` on first use and
        kept (features keep theirs here too); a forked child builds its own
        (clients and connections do not survive a fork)."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._parts, self._pid = {}, os.getpid()
        try:
            return self._parts[name]
        except KeyError:
            pass
        with self._lock:
            if name not in self._parts:
                self._parts[name] = build()
            return self._parts[name]

    # --- the parts --------------------------------------------------------------------

    @property
    def transport(self) -> 'Transport':
        """The transport given, else SQS as the settings say."""
        if self._transport is not None:
            return self._transport
        from kale.transport.sqs import SQSTransport
        return self.part('transport', lambda: SQSTransport(config=self.config))

    @property
    def queues(self) -> 'QueueConfig':
        """The queue config QUEUE_CONFIG names."""
        from kale.queue_config import build_queue_config
        return self.part('queues', lambda: build_queue_config(self.config))

    @property
    def payloads(self) -> 'PayloadStore':
        """Where payloads too big for SQS go: S3 (or the store
        :func:`~kale.transport.payloads.using_payload_store` put in place)."""
        from kale.transport.payloads import replaced_payload_store
        from kale.transport.s3 import S3PayloadStore
        return replaced_payload_store() or self.part(
            'payloads', lambda: S3PayloadStore(config=self.config))

    @property
    def codec(self) -> 'Codec':
        """The codec: keys, serializer, compression, encryption, payload store."""
        from kale.codec import build_codec
        return self.part('codec', lambda: build_codec(self.config, self.clock,
                                                      lambda: self.payloads))

    @property
    def broker(self) -> 'Broker':
        """The broker over its transport."""
        from kale.broker import Broker
        return self.part('broker', lambda: Broker.from_config(
            self.config, self.transport, self.queues, self.codec))

    @property
    def command_broker(self) -> 'Broker':
        """The broker operators' commands use (``kale queues``, ``kale web``):
        over SQS, a client that gives up after about SQS_READ_TIMEOUT_SEC (one
        attempt a request); over a transport given, its broker."""
        if self._transport is not None:
            return self.broker
        from kale.broker import Broker
        from kale.transport.sqs import SQSTransport, make_client
        return self.part('command-broker', lambda: Broker.from_config(
            self.config, SQSTransport(make_client(for_commands=True, config=self.config),
                                      config=self.config), self.queues, self.codec))

    @property
    def registry(self) -> 'Registry':
        """The task classes messages name, under TASK_MAPPER and TASK_MODULES."""
        from kale.registry import Registry
        return self.part('registry', lambda: Registry(self.config, self))

    def feature_hooks(self) -> list[Any]:
        """The hooks of the features turned on, built for this app (new ones each call)."""
        from kale.hooks import load_feature_hooks
        return load_feature_hooks(self)

    @property
    def publisher(self) -> 'Publisher':
        """The publisher, with this app's publish hooks (the default app's may be
        one put in place with :func:`kale.publisher.set_publisher`)."""
        from kale.publisher import Publisher, replaced_publisher
        given = replaced_publisher() if self.is_default else None
        if given is not None:
            if given.has_app:
                return given
            # The copy given this app's parts, kept beside the very publisher it
            # copies (an id alone may be a later publisher's, once it is freed).
            bound = self._given
            if bound is None or bound[0] is not given:
                bound = self._given = (given, given.given_parts(self))
            return bound[1]
        return self.part('publisher', lambda: Publisher(self.broker, clock=self.clock).given_parts(self))

    @property
    def store(self) -> 'Store':
        """The store on RECORDS_URL (task records, workflows, limits, ...)."""
        return self.recorder.store

    def store_at(self, url: str) -> 'Store':
        """The store on ``url`` (RATE_LIMIT_URL's) with this app's keys."""
        if url == self.config.RECORDS_URL:
            return self.store
        from kale.store import open_store
        return self.part(('store', url), lambda: open_store(url, self.config))

    @property
    def recorder(self) -> 'Recorder':
        """This process's recorder of RECORDS_URL (ImproperlyConfigured when off)."""
        from kale.records.recorder import Recorder
        return self.part('recorder', lambda: Recorder(self.config))

    @property
    def topics(self) -> Any:
        """The topics beside its queues: SNS beside SQS, or in memory."""
        from kale.topics.sync import topics_backend
        return topics_backend(self)

    @property
    def subscriptions(self) -> 'Subscriptions':
        """The topic subscribers of TASK_MODULES."""
        from kale.topics.names import find_subscribers
        return self.part('subscriptions', lambda: find_subscribers(self.config, self.queues))

    @property
    def schedules(self) -> 'Schedules':
        """The schedules of TASK_MODULES and SCHEDULES."""
        from kale.schedules.discovery import find_schedules
        return self.part('schedules', lambda: find_schedules(self))

    def scheduler(self, **options: Any) -> 'Scheduler':
        """A scheduler of its schedules, its lease in its store (ScheduleError
        without records or schedules)."""
        from kale.schedules.scheduler import make_scheduler
        return make_scheduler(self, **options)

    # --- publishing -------------------------------------------------------------------

    def publish(self, task_class: type['Task'], app_data: Any, /, *args: Any,
                delay_sec: float = 0, group_id: Optional[str] = None,
                dedup_id: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
                unique_for_sec: Optional[float] = None, eta: Any = None, **kwargs: Any) -> str:
        """``task_class.publish(...)`` through this app; returns the task id."""
        task_class._check_importable()
        return self.publisher.publish(task_class, app_data, args, kwargs, delay_sec=delay_sec,
                                      group_id=group_id, dedup_id=dedup_id, labels=labels,
                                      unique_for_sec=unique_for_sec, eta=eta)

    def publish_batch(self, task_class: type['Task'], app_data: Any, calls: Iterable[Any],
                      delay_sec: float = 0, group_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      unique_for_sec: Optional[float] = None, eta: Any = None) -> list[str]:
        """``task_class.publish_batch(...)`` through this app."""
        task_class._check_importable()
        return self.publisher.publish_batch(task_class, app_data, calls, delay_sec=delay_sec,
                                            group_id=group_id, labels=labels,
                                            unique_for_sec=unique_for_sec, eta=eta)

    async def apublish(self, task_class: type['Task'], app_data: Any, /, *args: Any,
                       delay_sec: float = 0, group_id: Optional[str] = None,
                       dedup_id: Optional[str] = None,
                       labels: Optional[Mapping[str, str]] = None, eta: Any = None,
                       **kwargs: Any) -> str:
        """``await task_class.apublish(...)`` through this app."""
        task_class._check_importable()
        return await self.publisher.apublish(task_class, app_data, args, kwargs,
                                             delay_sec=delay_sec, group_id=group_id,
                                             dedup_id=dedup_id, labels=labels, eta=eta)

    async def apublish_batch(self, task_class: type['Task'], app_data: Any,
                             calls: Iterable[Any], delay_sec: float = 0,
                             group_id: Optional[str] = None,
                             labels: Optional[Mapping[str, str]] = None,
                             eta: Any = None) -> list[str]:
        """``await task_class.apublish_batch(...)`` through this app."""
        task_class._check_importable()
        return await self.publisher.apublish_batch(task_class, app_data, calls,
                                                   delay_sec=delay_sec, group_id=group_id,
                                                   labels=labels, eta=eta)


def default_app() -> App:
    """The app the settings build (``KALE_SETTINGS_MODULE`` and any
    :meth:`kale.conf.Settings.override` in force), built on first use (an
    override's block has its own; the app before it is back after it)."""
    config = settings.config
    app = config._owner
    if app is None:
        with _owning:
            app = config._owner
            if app is None:
                app = App(config)
    app._default = True     # (one built by hand on this configuration, too)
    return app


register_default(default_app)
