"""Database URLs: the one to connect with, and the one to show."""
from __future__ import annotations

from typing import Mapping, Optional

import sqlalchemy

from kale.exceptions import RecordsUnavailableError


def engine_url(url: str) -> sqlalchemy.URL:
    """The URL to connect with: ``postgresql://`` means psycopg (version 3),
    the driver ``kale-sqs[postgres]`` installs."""
    parsed = sqlalchemy.make_url(url)
    if parsed.drivername == 'postgresql':
        parsed = parsed.set(drivername='postgresql+psycopg')
    return parsed


def postgresql_url(user: Optional[str], password: Optional[str], host: Optional[str],
                   port: Optional[int], database: Optional[str],
                   query: Mapping[str, str]) -> str:
    """The ``postgresql://`` URL of these parts, each quoted as a URL needs."""
    return sqlalchemy.URL.create('postgresql', username=user, password=password, host=host,
                                 port=port, database=database, query=dict(query)
                                 ).render_as_string(hide_password=False)


def safe_url(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return '<unparsable URL>'


def kind_of(url: str) -> str:
    """How an error for an API caller names the database at ``url``: its
    kind (``sqlite``, ``postgresql``), never its file or its host."""
    try:
        return sqlalchemy.make_url(url).get_backend_name()
    except Exception:
        return 'database'


def unavailable(what: str, url: str, problem: object) -> RecordsUnavailableError:
    """The error of ``what`` (the records store, an outbox) at ``url`` that
    did not answer: the URL and the driver's ``problem`` (its first line);
    for an API caller (``public``) the database by its kind only."""
    line = str(problem).splitlines()[0] if str(problem) else repr(problem)
    return RecordsUnavailableError('%s %s: %s' % (what, safe_url(url), line),
                                   public='%s (%s): %s' % (what, kind_of(url), line))
