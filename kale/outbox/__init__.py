"""Publishing inside a database transaction (the outbox), consuming once
(the inbox).

``outbox.publish(conn, MyTask, app_data, *args, **kwargs)`` encodes and signs
the task as ``MyTask.publish`` would and inserts it into ``kale_outbox`` in
the caller's transaction: nothing is sent if it rolls back, and ``kale relay``
sends it once it commits (at least once: a task id already succeeded is
skipped by workers with records on). ``outbox.consume_once(conn, task_id)``
lets a task apply its database effects once however often its message is
delivered. ``kale outbox init --url URL`` creates the tables.
"""
from kale.outbox.publish import consume_once, publish, publish_batch
from kale.outbox.relay import Relay
from kale.store.sql.outbox_schema import init, open_database

__all__ = ['Relay', 'consume_once', 'init', 'open_database', 'publish', 'publish_batch']
