"""The database engine under the stores: a pooled PostgreSQL connection is
pinged before use only when it was idle (a busy worker pays no round trip
for it), and one that died while idle is replaced before it is used."""
import psycopg
import pytest
from sqlalchemy import text

from kale.store.sql.urls import PING_IDLE_SEC, make_engine


@pytest.fixture
def database(postgres_cluster):
    return postgres_cluster.new_database()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def counted_pings(engine):
    pings = []
    ping = engine.dialect.do_ping

    def counting(dbapi_connection):
        pings.append(dbapi_connection)
        return ping(dbapi_connection)
    engine.dialect.do_ping = counting
    return pings


def select_one(engine):
    with engine.connect() as conn:
        return conn.execute(text('SELECT 1')).scalar()


def test_a_connection_back_in_the_pool_a_moment_ago_is_used_without_a_ping(database):
    clock = Clock()
    engine = make_engine(database, clock=clock)
    pings = counted_pings(engine)
    try:
        assert select_one(engine) == 1          # a new connection: pinged once
        clock.now += PING_IDLE_SEC / 2
        assert select_one(engine) == 1
        assert select_one(engine) == 1
        assert len(pings) == 1
        clock.now += PING_IDLE_SEC              # idle long enough: pinged again
        assert select_one(engine) == 1
        assert len(pings) == 2
    finally:
        engine.dispose()


def test_a_connection_that_died_while_idle_is_replaced_before_it_is_used(database,
                                                                          postgres_cluster):
    clock = Clock()
    engine = make_engine(database, clock=clock)
    try:
        with engine.connect() as conn:
            backend = conn.execute(text('SELECT pg_backend_pid()')).scalar()
        with psycopg.connect('host=127.0.0.1 port=%d user=kale dbname=postgres'
                             % postgres_cluster.port, autocommit=True) as admin:
            admin.execute('SELECT pg_terminate_backend(%s)', (backend,))
        clock.now += PING_IDLE_SEC
        with engine.connect() as conn:
            assert conn.execute(text('SELECT pg_backend_pid()')).scalar() != backend
    finally:
        engine.dispose()
