"""The app: one configuration and everything built from it.

An :class:`App` owns a :class:`~kale.config.Config` (typed, checked once) and
the parts built from it, each on first use and once per process: the queue
config, the codec, the broker (with its SQS client), the task registry and
the publisher with its hooks. A :class:`~kale.worker.Worker` given an app
works with its parts and settings. ``App(config)`` and ``App(SETTING=value, ...)``
make one explicitly; two apps with different settings work side by side in
one process::

    from kale import App
    from kale.config import Config, register_default

    eu = App(Config.load('myapp.settings_eu'))
    us = App(Config.load('myapp.settings_us'))
    eu.publish(SendMail, None, 'a@example.com')
    us.publish(SendMail, None, 'b@example.com')

``KALE_SETTINGS_MODULE`` and every setting keep working: they build the
default app (:func:`default_app`), which ``MyTask.publish`` uses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from kale.broker import Broker, get_broker
from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec import Codec, build_codec, get_codec
from kale.conf import settings
from kale.config import Config, register_default
from kale.publisher import Publisher, get_publisher
from kale.queue_config import QueueConfig, get_queue_config
from kale.registry import Registry, get_registry

if TYPE_CHECKING:
    from kale.task import Task
    from kale.transport import Transport


class App:
    """A configuration and the parts built from it; see the module docstring."""

    def __init__(self, config: Optional[Config] = None, *,
                 transport: Optional['Transport'] = None, clock: Clock = SYSTEM_CLOCK,
                 **values: Any):
        """``config`` (by default the defaults and the settings module that
        ``KALE_SETTINGS_MODULE`` names), with ``values`` over it. ``transport``
        replaces SQS under its broker (the in-memory transport, in tests);
        ``clock`` is what its publisher and workers read time from."""
        if config is None:
            config = Config.load()
        self.config: Config = config.replace(**values) if values else config
        #: The transport its broker uses; None: SQS, as the settings say.
        self.transport = transport
        self.clock = clock
        #: The default app (see :func:`default_app`).
        self._default = False
        #: The parts it builds itself (over its own transport or clock).
        self._parts: dict[str, Any] = {}
        if self._own() and self.config is not settings.config:
            # The features given only its configuration (their hooks, built
            # with for_config) reach this app, its transport and clock.
            self.config.part('app', lambda: self)

    def replace(self, **values: Any) -> 'App':
        """This app with some settings changed: the same transport and clock,
        parts built afresh for the new settings."""
        return App(self.config.replace(**values), transport=self.transport, clock=self.clock)

    def _own(self) -> bool:
        """Whether its broker and publisher are its own, not the process's for
        its configuration."""
        return self.transport is not None or self.clock is not SYSTEM_CLOCK

    def _part(self, name: str, build: Any) -> Any:
        if name not in self._parts:
            self._parts[name] = build()
        return self._parts[name]

    def __repr__(self) -> str:
        return 'App(%s)' % (self.config.module_name or 'defaults')

    @property
    def queues(self) -> QueueConfig:
        """The queue config QUEUE_CONFIG names."""
        return get_queue_config(self.config)

    @property
    def codec(self) -> Codec:
        """The codec: keys, serializer, compression, encryption, payload store."""
        if self._own():
            return self._part('codec', lambda: build_codec(self.config, self.clock))
        return get_codec(self.config)

    @property
    def broker(self) -> Broker:
        """The broker over SQS (this process's client for this app), or over
        the app's own transport."""
        if self.transport is None:
            return get_broker(self.config)
        transport = self.transport
        return self._part('broker', lambda: Broker.from_config(self.config, transport))

    @property
    def registry(self) -> Registry:
        """The task classes messages name, under TASK_MAPPER and TASK_MODULES."""
        return get_registry(self.config)

    @property
    def publisher(self) -> Publisher:
        """The publisher, with this app's publish hooks (the default app's is
        the one ``MyTask.publish`` uses, which eager mode and tests may set)."""
        if self._default:
            return get_publisher()
        config = self.config
        if self._own():
            return self._part('publisher', lambda: Publisher(
                self.broker, config=config, clock=self.clock))
        return config.part('publisher', lambda: Publisher(config=config))

    def publish(self, task_class: type['Task'], app_data: Any, *args: Any,
                delay_sec: float = 0, group_id: Optional[str] = None,
                dedup_id: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
                **kwargs: Any) -> str:
        """``task_class.publish(...)`` through this app; returns the task id."""
        task_class._check_importable()
        return self.publisher.publish(task_class, app_data, args, kwargs, delay_sec=delay_sec,
                                      group_id=group_id, dedup_id=dedup_id, labels=labels)

    def publish_batch(self, task_class: type['Task'], app_data: Any, calls: Iterable[Any],
                      delay_sec: float = 0, group_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None) -> list[str]:
        """``task_class.publish_batch(...)`` through this app."""
        task_class._check_importable()
        return self.publisher.publish_batch(task_class, app_data, calls, delay_sec=delay_sec,
                                            group_id=group_id, labels=labels)


def default_app() -> App:
    """The app the settings build: ``KALE_SETTINGS_MODULE`` and any
    :meth:`kale.conf.Settings.override` in force."""
    config = settings.config
    return config.part('app', lambda: _made_default(App(config)))


def app_of(config: Config) -> App:
    """The app whose configuration is ``config``: the default app for the
    settings' own, else one made once for it (feature hooks, given a
    configuration, reach their app's parts this way)."""
    if config is settings.config:
        return default_app()
    return config.part('app', lambda: App(config))


def _made_default(app: App) -> App:
    app._default = True
    return app


register_default(lambda: default_app().config)
