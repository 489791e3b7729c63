"""The worker's flow-control step: take a token and a slot as a run starts, or
release it unrun (docs/explanation/internals-worker.md, "Flow control").
"""
from __future__ import annotations

import dataclasses
import logging
import random
import threading
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec import Codec
from kale.events import Settlement, process_identity
from kale.exceptions import KaleError, TaskDefinitionError, describe
from kale.flow.spec import FlowSpec, spec_of
from kale.logs import exception_messages
from kale.transport import ReceivedMessage
from kale.worker.batch import Batch, Opened
from kale.worker.refusals import verbatim_dead_letter
from kale.worker.suspects import delayed_release

if TYPE_CHECKING:
    from kale.store import Store
    from kale.store.flow import Ask, FlowStore

logger = logging.getLogger('kale.flow')

#: The serial worker takes a run's token at most this long before the run
#: starts: with those of the next runs it expects to start that soon, in one
#: transaction; a token older than that when its run comes is not used (the
#: run asks again). So a key's starts in any window of L seconds stay within
#: its burst and L + TOKEN_AHEAD_SEC seconds of its rate.
TOKEN_AHEAD_SEC = 0.05
#: Seconds a message is released for when it cannot be gated here (no
#: records store, the store unreachable).
UNGATED_DELAY_SEC = 60
#: A message refused a concurrency slot comes back after this many seconds
#: (drawn at random, so that the refused do not all come back at once).
SLOT_BACKOFF_SEC = (1, 5)


#: A message to ask the store about: its batch, itself, what it needs.
_Asking = tuple[Batch, ReceivedMessage, Opened, FlowSpec, 'Ask']


@dataclasses.dataclass
class Refusal:
    delay_sec: int
    reason: str
    #: Dead-letter the message (a limit no worker can honour) rather than release it.
    dead: Optional[BaseException] = None


class FlowGate:
    """One worker's flow control: the step, the slots it holds, their renewal."""

    def __init__(self, config: Any, codec: Codec, clock: Clock = SYSTEM_CLOCK):
        #: Where the buckets and leases are: RATE_LIMIT_URL, else the task records'.
        self._explicit = bool(getattr(config, 'RATE_LIMIT_URL', ''))
        self.url = getattr(config, 'RATE_LIMIT_URL', '') or getattr(config, 'RECORDS_URL', '') \
            or ''
        self.lease_sec = float(getattr(config, 'CONCURRENCY_LEASE_SEC', 60))
        self.clock = clock
        self.codec = codec
        #: Whether log lines may carry exception messages (kale.logs.exception_messages).
        self.messages = exception_messages(config)
        self.worker = process_identity()[0]
        self._store: Optional['Store'] = None
        self._held: dict[int, tuple[str, str]] = {}     # id(received) -> (key, holder)
        self._lock = threading.Lock()
        self._renewer: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._warned: set[Any] = set()
        #: Task classes seen with no rate or concurrency limit.
        self._unlimited: set[type] = set()
        #: Runs whose token was taken ahead of their start, and when (see before_run).
        self._ahead: dict[int, float] = {}

    @property
    def store(self) -> 'Store':
        """The store of the buckets and leases (SQLAlchemy is imported only
        once a limited task comes)."""
        if self._store is None:
            from kale.records import store
            self._store = store(self.url)
        return self._store

    @property
    def state(self) -> 'FlowStore':
        """The buckets and leases: the store's flow facet."""
        return self.store.flow

    def start(self) -> None:
        """At the worker's start: with RATE_LIMIT_URL set, open its store now
        (a wrong URL shows at once, and the first limited batch does not pay
        for the import and the connection)."""
        if not self._explicit:
            return
        try:
            self.store.migrate()
        except KaleError as exc:        # asked again at each limited batch
            logger.warning('flow control: %s', exc)

    # --- the step ---------------------------------------------------------------------

    def refusals(self, starting: Sequence[tuple[Batch, ReceivedMessage]]
                 ) -> list[tuple[Batch, Settlement]]:
        """Take what the limited messages about to start need (one transaction
        for them all): the settlements of those refused (released with a
        delay, or dead-lettered), each with its batch. The others may start."""
        asking: list[_Asking] = []
        refused: list[tuple[Batch, ReceivedMessage, Opened, Refusal]] = []
        for batch, received in starting:
            opened = batch.opened.get(received.message_id)
            if opened is None or not self.limits(opened.task_class):
                continue
            found = self._ask_of(received, opened)
            if isinstance(found, Refusal):
                refused.append((batch, received, opened, found))
            elif found is not None:
                asking.append((batch, received, opened, found[0], found[1]))
        if asking:
            refused.extend(self._ask(asking))
        return [(batch, self._settlement(batch, received, opened, refusal))
                for batch, received, opened, refusal in refused]

    def before_run(self, batch: Batch, received: ReceivedMessage,
                   later: Sequence[ReceivedMessage], mean_run_sec: Optional[float]
                   ) -> tuple[Optional[Settlement], list[Settlement]]:
        """(The serial worker, before each run.) Whether ``received`` may start:
        the settlement that refuses it, or None; and the settlements of the
        ``later`` messages refused meanwhile. Its token is taken now, or was
        taken at most TOKEN_AHEAD_SEC ago with those of the next runs expected
        to start within that time (by the queue's ``mean_run_sec``)."""
        opened = batch.opened.get(received.message_id)
        if opened is None or not self.limits(opened.task_class):
            return None, []
        now = self.clock.monotonic()
        taken = self._ahead.pop(id(received), None)
        if taken is not None and now - taken <= TOKEN_AHEAD_SEC:
            return None, []
        more = int(TOKEN_AHEAD_SEC / mean_run_sec) if mean_run_sec else 0
        asked = [received] + list(later[:more])
        refused = {id(s.received): s for _, s in self.refusals([(batch, m) for m in asked])}
        for ahead in asked[1:]:
            if id(ahead) not in refused:
                self._ahead[id(ahead)] = now
        mine = refused.pop(id(received), None)
        return mine, list(refused.values())

    def _settlement(self, batch: Batch, received: ReceivedMessage, opened: Opened,
                    refusal: Refusal) -> Settlement:
        if refusal.dead is not None:
            return verbatim_dead_letter(received, batch.queue, refusal.reason, opened.message,
                                        refusal.dead, opened.envelope)
        return self._release(batch, received, opened, refusal)

    def limits(self, task_class: type) -> bool:
        """Whether the task class may have limits (a class known to have
        none costs its runs nothing after its first)."""
        if task_class in self._unlimited:
            return False
        try:
            if spec_of(task_class) is not None:
                return True
        except TaskDefinitionError:
            return True             # _ask_of says so, once
        self._unlimited.add(task_class)
        return False

    def _ask_of(self, received: ReceivedMessage,
                opened: Opened) -> Union[Refusal, tuple[FlowSpec, 'Ask'], None]:
        """What the message needs (None: nothing), or why it cannot be asked."""
        task_class = opened.task_class
        try:
            spec = spec_of(task_class)
        except TaskDefinitionError as exc:
            self._warn_once(task_class, '%s; its tasks are dead-lettered unrun' % exc)
            return Refusal(0, str(exc), dead=exc)
        if spec is None:
            return None
        if not self.url:
            self._warn_once(task_class, '%s has a rate_limit or concurrency_limit, which needs '
                            'RATE_LIMIT_URL or RECORDS_URL (a database keeps the limits); its '
                            'tasks are not run by this worker' % spec.name)
            return Refusal(UNGATED_DELAY_SEC, 'neither RATE_LIMIT_URL nor RECORDS_URL is set')
        try:
            rate_key, slot_key = self._keys(spec, opened)
        except Exception as exc:        # a key method that fails, or a payload that does not decode
            if isinstance(exc, KaleError):
                return None             # the run dead-letters it, as without limits
            if self.messages:
                logger.exception('%s: computing its flow-control key failed', spec.name)
                said = describe(exc)
            else:                       # the message may quote the arguments
                said = type(exc).__name__
                logger.error('%s: computing its flow-control key failed: %s', spec.name, said)
            return Refusal(UNGATED_DELAY_SEC, 'its flow-control key failed: %s' % said)
        from kale.store.flow import Ask
        return spec, Ask(opened.task_id, rate=spec.rate, rate_key=rate_key,
                         limit=spec.concurrency, slot_key=slot_key,
                         holder='%s/%s' % (self.worker, received.message_id),
                         worker=self.worker)

    def _ask(self, asking: list['_Asking']
             ) -> list[tuple[Batch, ReceivedMessage, Opened, Refusal]]:
        """Ask the store for the lot; hold the slots granted; the refusals."""
        try:
            answers = self.state.ask([ask for *_, ask in asking], self.clock.time(),
                                     self.lease_sec)
        except KaleError as exc:        # the store is unreachable: hold the runs back
            logger.warning('flow control: %s; releasing %d message(s) for %d s', exc,
                           len(asking), UNGATED_DELAY_SEC)
            return [(batch, received, opened, Refusal(UNGATED_DELAY_SEC, str(exc)))
                    for batch, received, opened, _, _ in asking]
        refusals = []
        for (batch, received, opened, spec, ask), answer in zip(asking, answers, strict=True):
            if answer.slot:
                refusals.append((batch, received, opened, Refusal(
                    random.randint(*SLOT_BACKOFF_SEC),
                    'concurrency_limit %s of %r reached' % (spec.concurrency, ask.slot_key))))
            elif answer.wait_sec:
                refusals.append((batch, received, opened, Refusal(
                    int(answer.wait_sec), 'rate_limit %s of %r reached' % (spec.rate,
                                                                           ask.rate_key))))
            elif ask.limit is not None:
                self._hold(received, (ask.slot_key, ask.holder))
        return refusals

    def _keys(self, spec: FlowSpec, opened: Opened) -> tuple[str, str]:
        if not spec.keyed:
            return spec.name, spec.name
        message = opened.message or self.codec.read(opened.envelope)
        task = opened.task_class(message)
        args, kwargs = message.args, message.kwargs
        rate_key = spec.rate_key(task, args, kwargs) if spec.rate is not None else spec.name
        slot_key = spec.concurrency_key(task, args, kwargs) \
            if spec.concurrency is not None else spec.name
        return rate_key, slot_key

    def _release(self, batch: Batch, received: ReceivedMessage, opened: Opened,
                 refusal: Refusal) -> Settlement:
        return delayed_release(batch, received, opened.envelope, self.codec, refusal.delay_sec,
                               '%s: back in %d s' % (refusal.reason, refusal.delay_sec),
                               message=opened.message)

    def _warn_once(self, what: Any, line: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.error(line)

    # --- slots held -------------------------------------------------------------------

    def _hold(self, received: ReceivedMessage, slot: tuple[str, str]) -> None:
        with self._lock:
            self._held[id(received)] = slot
            self._wake.clear()
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_while_held,
                                                 name='kale-flow-leases', daemon=True)
                self._renewer.start()

    @property
    def held(self) -> int:
        """Slots this worker holds."""
        return len(self._held)

    def settled(self, batch: Batch) -> None:
        """The batch is being settled: give back the slots its messages held
        (and forget the tokens taken ahead for runs that never came)."""
        if self._ahead:
            for s in batch.settlements:
                self._ahead.pop(id(s.received), None)
        if self._held:
            self._give_back([s.received for s in batch.settlements])

    def _give_back(self, messages: list[ReceivedMessage]) -> None:
        """Give back the slots the messages hold."""
        with self._lock:
            slots = [self._held.pop(id(m)) for m in messages if id(m) in self._held]
            if not self._held:
                self._wake.set()
        if slots:
            try:
                self.state.give_back(slots)
            except KaleError as exc:        # they expire after CONCURRENCY_LEASE_SEC
                logger.warning('flow control: giving back %d slot(s) failed: %s', len(slots), exc)

    def renew(self) -> int:
        """Renew the leases of the slots this worker holds (not one whose
        give-back failed: that one expires); returns how many."""
        with self._lock:
            slots = list(self._held.values())
        return self.state.renew(slots, self.clock.time(), self.lease_sec)

    def _renew_while_held(self) -> None:
        while True:
            self._wake.wait(self.lease_sec / 3.0)
            with self._lock:
                if not self._held:
                    self._renewer = None
                    return
            try:
                self.renew()
            except KaleError as exc:
                logger.warning('flow control: renewing leases failed: %s', exc)
