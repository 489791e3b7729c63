"""Payloads over the SQS limit through S3, end to end: real `kale worker`
processes and the `kale` command line against the embedded endpoint, whose
moto server serves S3 on the same port. Each test has a bucket of its own
(PAYLOAD_BUCKET), looked into with raw boto3."""
from __future__ import annotations

import hashlib
import os

import pytest

from kale.exceptions import MessageTooLargeError
from tests import tasks
from tests.support.processes import WorkerProcess, console_script, dead_letters, one_line_error, reasons
from tests.support.records import records_of

pytestmark = pytest.mark.slow

BIG = 3 * 1024 * 1024       # three times SQS's limit


def burst(tmp_path, timeout=90):
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst')
    assert worker.wait(timeout) == 0, worker.output()
    return worker


def test_a_3_mb_incompressible_argument_round_trips_and_leaves_no_object(
        sqs, payload_bucket, record, tmp_path):
    data = os.urandom(BIG)
    task_id = tasks.DigestTask.publish(None, data)
    [key] = payload_bucket.keys()
    assert key.startswith('kale-payloads/%s/' % task_id)
    burst(tmp_path)
    [ran] = records_of(record, 'ran')
    assert ran[1] == task_id
    assert ran[4:] == [hashlib.sha256(data).hexdigest(), str(BIG)]
    assert payload_bucket.keys() == []
    assert dead_letters(sqs, 'default') == []


def test_a_retry_reuses_the_object(sqs, payload_bucket, record, tmp_path):
    payload_bucket.client.put_bucket_versioning(
        Bucket=payload_bucket.name, VersioningConfiguration={'Status': 'Enabled'})
    data = os.urandom(BIG)
    task_id = tasks.DigestTask.publish(None, data, fail_times=1)
    burst(tmp_path)
    digest = hashlib.sha256(data).hexdigest()
    assert [r[4] for r in records_of(record, 'failed')] == [digest]
    assert [(r[1], r[4]) for r in records_of(record, 'ran')] == [(task_id, digest)]
    history = payload_bucket.client.list_object_versions(Bucket=payload_bucket.name)
    assert len(history.get('Versions', [])) == 1, 'uploaded once, for both attempts'
    assert len(history.get('DeleteMarkers', [])) == 1, 'deleted after the retry succeeded'


def test_a_dead_letter_keeps_its_object_until_purge_dead_letters(
        sqs, payload_bucket, record, tmp_path):
    task_id = tasks.DigestTask.publish(None, os.urandom(BIG), fail_times=5)
    burst(tmp_path)
    assert [r[1] for r in records_of(record, 'permanent')] == [task_id]
    [key] = payload_bucket.keys()
    assert key.startswith('kale-payloads/%s/' % task_id)
    result = console_script('purge', 'default', '--dead-letters', '--yes',
                            KALE_TEST_ENDPOINT=sqs.url, KALE_TEST_PREFIX=sqs.prefix,
                            KALE_TEST_PAYLOAD_BUCKET=payload_bucket.name)
    assert result.returncode == 0, result.stderr
    assert 'purged %sdlq-default: 1 dead letters and the 1 payload objects' % sqs.prefix \
        in result.stdout
    assert payload_bucket.keys() == []
    assert dead_letters(sqs, 'default') == []


def test_an_object_whose_digest_no_longer_matches_is_dead_lettered(
        sqs, payload_bucket, record, tmp_path):
    tampered_id = tasks.DigestTask.publish(None, os.urandom(BIG))
    [key] = payload_bucket.keys()
    original = payload_bucket.read(key)
    payload_bucket.write(key, bytes([original[0] ^ 1]) + original[1:])
    fine_id = tasks.DigestTask.publish(None, b'small and fine')
    worker = burst(tmp_path)
    assert [r[1] for r in records_of(record, 'ran')] == [fine_id]
    [dead] = dead_letters(sqs, 'default')
    assert reasons([dead]) == ['payload_mismatch']
    assert dead['MessageAttributes']['kale_task_id']['StringValue'] == tampered_id
    assert 'does not match the SHA-256 of its signed pointer' in worker.output()
    assert payload_bucket.keys() == [key], 'kept with its dead letter'


def test_with_payload_bucket_off_a_big_payload_is_refused_at_publish(sqs, record, tmp_path):
    with pytest.raises(MessageTooLargeError, match='PAYLOAD_BUCKET'):
        tasks.DigestTask.publish(None, os.urandom(BIG))
    small_id = tasks.DigestTask.publish(None, os.urandom(1000))
    burst(tmp_path)
    assert [r[1] for r in records_of(record, 'ran')] == [small_id]


def test_a_small_payload_never_touches_the_bucket(sqs, payload_bucket, record, tmp_path):
    task_id = tasks.DigestTask.publish(None, os.urandom(100000))
    assert payload_bucket.keys() == []
    burst(tmp_path)
    assert [r[1] for r in records_of(record, 'ran')] == [task_id]


@pytest.mark.parametrize('name,value,problem', [
    ('KALE_TEST_PAYLOAD_BUCKET', 'Not_A_Bucket',
     'setting PAYLOAD_BUCKET must be an S3 bucket name'),
])
def test_a_worker_with_a_wrong_payload_setting_exits_with_one_line(sqs, name, value, problem):
    result = console_script('worker', '--burst', KALE_TEST_ENDPOINT=sqs.url,
                            KALE_TEST_PREFIX=sqs.prefix, **{name: value})
    assert problem in one_line_error(result)
