"""Flow control's store on PostgreSQL: an ask's bucket write goes to the
server with its commit, in one round trip (psycopg's pipeline mode), since
every other worker's ask on the key waits for the bucket's row until then;
what it wrote is committed all the same."""
import psycopg
from psycopg import pq

from kale.config import Config
from kale.flow.spec import Rate
from kale.store.sql.records import RecordStore
from tests.support.flow import take_token


def test_an_asks_bucket_write_is_sent_with_its_commit(postgres_cluster, monkeypatch):
    store = RecordStore(postgres_cluster.new_database(), Config.load('tests.kale_test_settings'))
    try:
        store.migrate()
        commits = []
        commit = psycopg.Connection.commit

        def noted(self):
            if self.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                commits.append('pipelined' if self._pipeline is not None else 'alone')
            return commit(self)
        monkeypatch.setattr(psycopg.Connection, 'commit', noted)
        rate = Rate(1, 1.0)
        assert take_token(store.flow, 'k', rate, 't1', 100.0) == 0.0
        assert commits == ['pipelined']
        assert take_token(store.flow, 'k', rate, 't2', 100.0) == 1.0    # t1's token is gone
    finally:
        store.dispose()
