"""Kale's outbox tables (kale_outbox, kale_outbox_rejected, kale_consumed,
and on PostgreSQL the trigger that wakes the relays), made as ``kale outbox
init`` makes them, at the outbox schema's version of this Kale; a later
version of the schema comes with a migration of its own here that brings a
database up to it. A database other than SQLite or PostgreSQL gets nothing:
Kale's outbox does not work there (``outbox.publish`` says so)."""
from functools import partial
from typing import Any, Callable

from django.db import migrations

from kale.store.sql.outbox_schema import create_statements, drop_statements

VENDORS = ('sqlite', 'postgresql')


def execute(statements: Callable[[str], Any], apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor in VENDORS:
        for statement in statements(vendor):
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(partial(execute, create_statements),
                                       partial(execute, drop_statements))]
