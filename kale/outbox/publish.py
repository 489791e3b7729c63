"""Publishing inside the caller's transaction, and consuming once: signed rows
into ``kale_outbox`` on the caller's connection (docs/explanation/internals-workflow.md, "The outbox")."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from kale.default import default_app
from kale.exceptions import OutboxError
from kale.outbox import proof
from kale.outbox.proof import as_stored
from kale.publish_checks import unique_window
from kale.publisher import Publication, Sender, unique_claims
from kale.queue_config import TaskQueue
from kale.store.outbox import OutboxWriter
from kale.transport import OutgoingMessage

if TYPE_CHECKING:
    from kale.app import App


def _writer(conn: Any) -> OutboxWriter:
    """Where rows go in ``conn``'s transaction: a SQLAlchemy Connection or
    Session, or an :class:`~kale.store.outbox.OutboxWriter` itself (a memory
    store's outbox, which has no transactions; one on Django's connection)."""
    if callable(getattr(conn, 'insert', None)) and callable(getattr(conn, 'consume', None)):
        return conn
    from kale.store.sql.outbox import writer_in
    return writer_in(conn)


def publish(conn: Any, task: Any, app_data: Any, *args: Any, delay_sec: float = 0,
            group_id: Optional[str] = None, dedup_id: Optional[str] = None,
            labels: Optional[Mapping[str, str]] = None,
            unique_for_sec: Optional[float] = None, eta: Any = None,
            app: Optional['App'] = None, **kwargs: Any) -> str:
    """Publish one run of ``task`` (a Task class, or ``Task.with_options(...)``)
    when ``conn``'s transaction commits; returns its task id. A wait longer
    than SQS's 15-minute delay (``delay_sec``, or ``eta``) is a due time
    counted from this call, whenever the relay sends it; a shorter
    ``delay_sec`` counts from the relay's send."""
    return publish_batch(conn, task, app_data, [(args, kwargs)], delay_sec=delay_sec,
                         group_id=group_id, dedup_id=dedup_id, labels=labels,
                         unique_for_sec=unique_for_sec, eta=eta, app=app)[0]


def publish_batch(conn: Any, task: Any, app_data: Any, calls: Iterable[Any],
                  delay_sec: float = 0, group_id: Optional[str] = None,
                  dedup_id: Optional[str] = None,
                  labels: Optional[Mapping[str, str]] = None,
                  unique_for_sec: Optional[float] = None, eta: Any = None,
                  app: Optional['App'] = None) -> list[str]:
    """Publish many runs of ``task`` when ``conn``'s transaction commits
    (each call ``(args, kwargs)``, ``args`` or a single value, as
    ``publish_batch`` takes them); their task ids in order. A unique task
    (``unique_for_sec``) is decided when the relay sends it: a run whose key
    another task holds is not sent, and is recorded ``deduplicated``."""
    writer = _writer(conn)
    task_class = getattr(task, 'task_class', task)     # a Task, or Task.with_options(...)
    queue_name = getattr(task, 'queue', None) if task_class is not task else None
    getattr(task_class, '_check_importable', lambda: None)()
    # The default app publishes through the publisher Task.publish uses (one
    # set in place by eager mode or a test included).
    publisher = (app or default_app()).publisher
    sender = OutboxSender(publisher.sender, publisher.app, unique_for_sec)
    task_ids = publisher.publish_batch(task_class, app_data, calls, delay_sec, group_id,
                                       dedup_id, labels, queue_name, eta=eta, sender=sender)
    sender.insert(writer)
    return task_ids


class OutboxSender:
    """The publisher's sender into the outbox (a :class:`~kale.publisher.KeepingSender`): each
    message becomes a MACed ``kale_outbox`` row with its record and unique key, for :meth:`insert`."""

    def __init__(self, names: Sender, app: 'App', unique_for_sec: Optional[float]):
        self.names = names              # the queues' SQS names, which bodies are signed for
        self.app = app
        self.config = app.config
        #: The call's ``unique_for_sec`` (None: the class's; 0: not unique).
        self.unique_for_sec = unique_for_sec
        self.rows: list[dict[str, Any]] = []

    def sqs_name(self, queue: TaskQueue) -> str:
        return self.names.sqs_name(queue)

    def keep(self, publication: Publication, outgoing: list[OutgoingMessage]) -> None:
        now, config, name = time.time(), self.config, publication.task_class.task_path()
        unique_sec = unique_window(name, self.unique_for_sec,
                                   getattr(publication.task_class, 'unique_for_sec', None))
        records = _record_rows(publication, now, self.app)
        claims = unique_claims(config, name, unique_sec,
                               [(m.args, m.kwargs) for m in publication.messages],
                               publication.messages)
        for number, (message, out) in enumerate(zip(publication.messages, outgoing,
                                                    strict=True)):
            row = {'task_id': message.task_id, 'task': message.task_name,
                   'queue': publication.queue.name, 'body': out.body,
                   'attributes': as_stored(dict(out.attributes) or None),
                   'delay_sec': out.delay_sec,
                   'group_id': out.group_id or None, 'dedup_id': out.dedup_id or None,
                   'record': as_stored(records[number]) if records else None,
                   'unique_key': claims[number][0] if claims else None,
                   'unique_for_sec': float(unique_sec) if claims and unique_sec else None,
                   'created_at': now}
            row['mac'] = proof.sign(config, row)
            self.rows.append(row)

    def insert(self, writer: OutboxWriter) -> None:
        """Write the rows kept into ``kale_outbox``, in the caller's transaction."""
        if self.rows:
            writer.insert(self.rows)


def _record_rows(publication: Publication, now: float,
                 app: 'App') -> Optional[list[dict[str, Any]]]:
    """The tasks' ``queued`` records, as ``app``'s records database will
    hold them (inputs MACed, values sealed: the relay writes them as they
    are), for the relay to write once they are sent (None with records off)."""
    if not app.config.RECORDS_URL:
        return None
    from kale.records.hooks import publication_rows
    recorder = app.recorder
    rows = publication_rows(publication, recorder.max_value_chars, now)
    sealer = recorder.store.sealer
    return [sealer.stored({key: value for key, value in row.items() if value is not None},
                          published=True) for row in rows]


def consume_once(conn: Any, task_id: str) -> bool:
    """Note ``task_id`` as consumed in ``conn``'s transaction: True the first
    time, False when it already was (commit the effects with it: a
    redelivered message then changes nothing). Two transactions racing on one
    id: the second waits for the first, and gets False if it commits."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > 128:
        raise OutboxError('consume_once: task_id must be the task\'s id (1-128 characters), '
                          'got %r' % (str(task_id)[:140],))
    return _writer(conn).consume(task_id, time.time())
