"""Per-task time limits as swappable context managers (SIGALRM by default),
the :class:`Guard` a worker holds runs to their limits with, and
:class:`AsyncLimit` for coroutines (docs/explanation/internals-top.md, "Time
limits")."""
from __future__ import annotations

import contextvars
import signal
import time
from types import FrameType, TracebackType
from typing import Any, Callable, ClassVar, Optional, Protocol, TypeVar

from kale.exceptions import TimeLimitExceeded

T = TypeVar('T')


class BaseTimeout:
    """A context manager enforcing ``seconds`` on the code it wraps. A worker
    calls :meth:`setup` once before its first run and :meth:`teardown` after
    its last (for what is set up once, a signal handler)."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.started = 0.0
        self.fired = False

    @classmethod
    def setup(cls) -> None:
        """Before a worker's first run."""

    @classmethod
    def teardown(cls) -> None:
        """After a worker's last run."""

    @classmethod
    def after_batch(cls) -> None:
        """After the last run of a batch, before the worker settles it."""

    def __enter__(self) -> 'BaseTimeout':
        self.started = time.monotonic()
        self.arm()
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.disarm()
        if exc_type is None and self.fired:
            raise TimeLimitExceeded(self.seconds)

    def arm(self) -> None:
        raise NotImplementedError

    def disarm(self) -> None:
        raise NotImplementedError


class SignalTimeout(BaseTimeout):
    """SIGALRM with sub-second precision (POSIX, main thread only), its handler
    kept installed from :meth:`setup` to :meth:`teardown` so a batch of short
    runs costs one ``setitimer`` (docs/explanation/internals-top.md, "Time limits")."""

    repeat_sec = 0.25

    # Shared by every SignalTimeout: there is one SIGALRM.
    _active: ClassVar[Optional['SignalTimeout']] = None
    _setups: ClassVar[int] = 0
    _previous_handler: ClassVar[Any] = None
    _previous_timer: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 0.0)
    #: When the alarm on its way goes off (monotonic; 0.0: none is).
    _alarm_at: ClassVar[float] = 0.0

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.deadline = 0.0
        self._armed = False
        self._installed_here = False

    @classmethod
    def setup(cls) -> None:
        if SignalTimeout._setups == 0:
            _install()
        SignalTimeout._setups += 1

    @classmethod
    def teardown(cls) -> None:
        SignalTimeout._setups = max(SignalTimeout._setups - 1, 0)
        if SignalTimeout._setups == 0:
            _uninstall()

    @classmethod
    def after_batch(cls) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        SignalTimeout._alarm_at = 0.0

    def arm(self) -> None:
        seconds = self.seconds if self.seconds > 0.001 else 0.001
        self.deadline = deadline = self.started + seconds
        SignalTimeout._active = self
        self._armed = True
        if SignalTimeout._setups == 0:
            _install()
            self._installed_here = True
        elif 0.0 < SignalTimeout._alarm_at <= deadline \
                and signal.getitimer(signal.ITIMER_REAL)[0] > 0.0:
            # That alarm comes first; the handler sets the timer for this run.
            # (Asked, not assumed: a task may have stopped the timer itself.)
            return
        _set_alarm(deadline, deadline - self.started)

    def disarm(self) -> None:
        """End the run's alarm (safe to call twice, and from a ``finally``)."""
        self._armed = False
        if SignalTimeout._active is self:
            SignalTimeout._active = None
        if self._installed_here:
            self._installed_here = False
            _uninstall()


def _set_alarm(at: float, delay: float) -> None:
    """Set the timer to go off in ``delay`` seconds (at ``at``), then every repeat_sec."""
    SignalTimeout._alarm_at = at
    signal.setitimer(signal.ITIMER_REAL, delay if delay > 0.0001 else 0.0001,
                     SignalTimeout.repeat_sec)


def _on_alarm(signum: int, frame: Optional[FrameType]) -> None:
    now = time.monotonic()
    SignalTimeout._alarm_at = now + SignalTimeout.repeat_sec      # the timer repeats
    current = SignalTimeout._active
    if current is None or not current._armed:
        return          # an alarm that was already on its way when the run ended
    if now < current.deadline:  # set by an earlier run: wait for this run's own deadline
        _set_alarm(current.deadline, current.deadline - now)
        return
    current.fired = True
    raise TimeLimitExceeded(current.seconds)


def _install() -> None:
    delay, interval = signal.getitimer(signal.ITIMER_REAL)
    SignalTimeout._previous_timer = (delay, interval, time.monotonic())
    SignalTimeout._previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    SignalTimeout._alarm_at = 0.0


def _uninstall() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    SignalTimeout._alarm_at = 0.0
    previous = SignalTimeout._previous_handler
    signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
    SignalTimeout._previous_handler = None
    delay, interval, saved_at = SignalTimeout._previous_timer
    SignalTimeout._previous_timer = (0.0, 0.0, 0.0)
    if delay:
        left = delay - (time.monotonic() - saved_at)
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), interval)


class NoTimeout(BaseTimeout):
    """Enforces nothing (for debugging a task under a debugger)."""

    def arm(self) -> None:
        pass

    def disarm(self) -> None:
        pass


class Guard(Protocol):
    """Holds calls to their time limits: what a worker's runner is given.

    ``run(call, seconds)`` returns what ``call()`` returns, or raises
    :class:`TimeLimitExceeded` once ``seconds`` have passed (also when the
    call swallowed the interruption, or raised something else after it)."""

    def setup(self) -> None:
        """Before a worker's first run."""

    def teardown(self) -> None:
        """After a worker's last run."""

    def after_batch(self) -> None:
        """After the last run of a batch, before the worker settles it."""

    def run(self, call: Callable[..., T], seconds: float, /, *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)`` under a limit of ``seconds``."""


class TimeoutGuard:
    """A :class:`Guard` made of a :class:`BaseTimeout` class (by default
    :class:`SignalTimeout`, or the ``TASK_TIMEOUT_CLASS`` setting): one timer
    per time limit, reused from run to run. Exceptions of ``passes_through``
    (a worker's own interruption) are never turned into TimeLimitExceeded."""

    def __init__(self, timeout_class: type[BaseTimeout] = SignalTimeout,
                 passes_through: tuple[type[BaseException], ...] = ()):
        self.timeout_class = timeout_class
        self.passes_through = passes_through
        self._timers: dict[float, BaseTimeout] = {}
        self.setup = timeout_class.setup
        self.teardown = timeout_class.teardown
        self.after_batch = timeout_class.after_batch

    def run(self, call: Callable[..., T], seconds: float, /, *args: Any, **kwargs: Any) -> T:
        timer = self._timers.get(seconds)
        if timer is None:
            timer = self._timers[seconds] = self.timeout_class(seconds)
        timer.fired = False
        try:
            with timer:
                return call(*args, **kwargs)
        except BaseException as exc:
            timer.disarm()          # even if the alarm interrupted the timer's own exit
            if timer.fired and not isinstance(exc, (TimeLimitExceeded, *self.passes_through)):
                raise TimeLimitExceeded(timer.seconds) from exc
            raise


class AsyncLimit:
    """Holds a coroutine's run to ``seconds`` on its event loop: at the limit
    its asyncio task is cancelled, and again every ``repeat_sec`` while it
    swallows that. :func:`failure_of` turns the cancellation into
    :class:`TimeLimitExceeded` (one :meth:`stop` asked for, into ``stop_error``).
    Use within the run's task: ``with AsyncLimit(2.5, stop_error): await run()``.
    """

    repeat_sec = 0.25

    def __init__(self, seconds: float, stop_error: Optional[type[BaseException]] = None):
        self.seconds = float(seconds)
        self.stop_error = stop_error
        self.fired = False
        self.stopped = False
        self._task: Any = None
        self._handle: Any = None
        self._token: Any = None

    def __enter__(self) -> 'AsyncLimit':
        import asyncio
        self._task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(max(self.seconds, 0.001), self._fire)
        self._token = _CURRENT_LIMIT.set(self)
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        _CURRENT_LIMIT.reset(self._token)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._task = None

    def _fire(self) -> None:
        task = self._task
        if task is None or task.done():
            return
        self.fired = True
        task.cancel()
        self._handle = task.get_loop().call_later(self.repeat_sec, self._fire)

    def stop(self) -> None:
        """Cancel the run now, for the worker's shutdown (on the loop's thread)."""
        task = self._task
        if task is not None and not task.done():
            self.stopped = True
            task.cancel()


_CURRENT_LIMIT: 'contextvars.ContextVar[Optional[AsyncLimit]]' = contextvars.ContextVar(
    'kale_async_limit', default=None)


def failure_of(exc: BaseException) -> BaseException:
    """What a coroutine's run failed with: a cancellation made by the run's
    :class:`AsyncLimit` is its time limit (or the worker's stop); anything
    else is itself."""
    import asyncio
    limit = _CURRENT_LIMIT.get()
    if limit is None or not isinstance(exc, asyncio.CancelledError):
        return exc
    if limit.stopped and limit.stop_error is not None:
        return limit.stop_error()
    if limit.fired:
        return TimeLimitExceeded(limit.seconds)
    return exc
