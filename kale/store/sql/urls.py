"""Database URLs: the one to connect with, and the one to show."""
from __future__ import annotations

import sqlalchemy


def engine_url(url: str) -> sqlalchemy.URL:
    """The URL to connect with: ``postgresql://`` means psycopg (version 3),
    the driver ``kale-sqs[postgres]`` installs."""
    parsed = sqlalchemy.make_url(url)
    if parsed.drivername == 'postgresql':
        parsed = parsed.set(drivername='postgresql+psycopg')
    return parsed


def safe_url(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return '<unparsable URL>'
