"""Autoscaling signals against queues with known contents on moto's SQS: the
counts, the oldest task's age and the workers serving each queue from the
task records (so the backlog per worker), through kale.admin, `kale queues
--json` and the /metrics collector; and, with records off, the oldest
message's age from CloudWatch (moto serves it on the same port)."""
from __future__ import annotations

import datetime
import json
import time

import boto3
from prometheus_client import generate_latest

from kale import records
from kale.admin import queue_signals, serving_workers
from kale.app import default_app
from kale.cli import main
from kale.contrib.queue_metrics import queue_registry
from kale.store.sql.schema import workers
from tests import tasks


def add_workers(url, now):
    """Two running workers on default and high, one on low that stopped, one
    lost (no heartbeat for long), and a supervisor (not a worker)."""
    rows = [('w1', 'worker', ['default', 'high'], now, None),
            ('w2', 'worker', ['default'], now, None),
            ('w3', 'worker', ['low'], now, now - 5),
            ('w4', 'worker', ['default'], now - 3600, None),
            ('s1', 'supervisor', ['default'], now, None)]
    with records.store(url).begin(write=True) as conn:
        for wid, role, queues, beat, stopped in rows:
            conn.execute(workers.insert().values(
                id=wid, role=role, host='h', pid=1, queues=queues, started_at=now - 60,
                heartbeat_at=beat, heartbeat_sec=10.0, stopped_at=stopped))


def test_the_signals_with_records_on(sqs, records_url, capsys):
    before = time.time()
    ids = tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(6)])
    tasks.HighTask.publish(None)
    assert records.get(ids[0]).status == 'queued'    # (flushes this process's writer)
    now = time.time()
    add_workers(records_url, now)
    later = now + 30
    rows = {row.name: row for row in queue_signals(default_app().broker, records.queries(),
                                                     now=later)}
    default = rows['default']
    assert (default.visible, default.in_flight, default.delayed) == (6, 0, 0)
    assert default.workers == 2 and default.backlog_per_worker == 3.0
    # (published between before and now: 30 s before `later`, or more)
    assert default.oldest_from == 'records' and 29 <= default.oldest_age_sec <= later - before + 1
    assert (rows['high'].workers, rows['high'].backlog_per_worker) == (1, 1.0)
    assert (rows['low'].workers, rows['low'].backlog_per_worker) == (0, None)

    capsys.readouterr()
    assert main(['queues', '--json']) == 0
    listed = {row['name']: row for row in json.loads(capsys.readouterr().out)}
    assert listed['default']['backlog_per_worker'] == 3.0
    assert listed['default']['workers'] == 2 and listed['default']['oldest_from'] == 'records'

    queries = records.queries()
    text = generate_latest(queue_registry(
        default_app().broker, oldest_queued=lambda: queries.oldest_queued(),
        workers=lambda: serving_workers(queries))).decode()
    assert 'kale_queue_workers{queue="default"} 2.0' in text
    assert 'kale_queue_backlog_per_worker{queue="default"} 3.0' in text
    assert 'kale_queue_backlog_per_worker{queue="low"}' not in text     # nobody serves it
    assert 'kale_queue_oldest_task_age_seconds{queue="default"}' in text


def test_without_records_the_oldest_age_comes_from_cloudwatch(sqs):
    tasks.AddTask.publish(None, 1, 2)
    broker = default_app().broker
    name = broker.sqs_name(broker.queues['default'])
    cloudwatch = boto3.client('cloudwatch', endpoint_url=sqs.url, region_name='us-east-1',
                              aws_access_key_id='test', aws_secret_access_key='test')
    cloudwatch.put_metric_data(Namespace='AWS/SQS', MetricData=[{
        'MetricName': 'ApproximateAgeOfOldestMessage', 'Value': 42.0, 'Unit': 'Seconds',
        'Dimensions': [{'Name': 'QueueName', 'Value': name}],
        'Timestamp': datetime.datetime.now(datetime.timezone.utc)}])
    rows = {row.name: row for row in queue_signals(broker, None)}
    assert (rows['default'].oldest_age_sec, rows['default'].oldest_from) == (42.0, 'cloudwatch')
    assert rows['default'].workers is None and rows['high'].oldest_age_sec is None
