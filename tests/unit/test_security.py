"""What an attacker with access to a queue can and cannot do, against a real
worker loop (in-process, on the memory transport)."""
import logging
import time

import pytest

from kale.app import App
from kale.codec import serialize
from kale.message import Message
from kale.transport import OutgoingMessage, VisibilityChange
from kale.worker import Worker
from kale.worker.runner import TaskRunner
from tests import tasks
from tests.support.hostile import CreatesFileWhenUnpickled, signed_legacy_body
from tests.support.records import recorded_ids
from tests.support.unavailable import require_module

DAY = 24 * 3600.0


def dead_letters(broker, queue='default'):
    queue_ = broker.queues[queue]
    return broker.transport.receive(broker.dead_letter_name(queue_), 10, 0, 30)


def reasons(dead):
    return sorted(m.attributes['kale_dead_letter_reason'].split(':')[0] for m in dead)


def send_raw(broker, body, queue='default'):
    broker.send(broker.queues[queue], [OutgoingMessage(body)])


def run_worker(app, queues=('default',)):
    """Run a burst worker of ``app`` on ``queues``; it exits 0."""
    code = Worker(queue_names=list(queues), burst=True, app=app).run()
    assert code == 0, 'the worker exited %d, not 0' % code


def test_a_captured_body_replayed_after_the_window_never_runs(app, record):
    old = Message('payment-1', tasks.RecordTask.task_path(), ('charge',),
                  published_at=time.time() - 400 * DAY)
    captured = app.codec.encode(old, app.broker.sqs_name(app.broker.queues['default'])).body
    for _ in range(3):
        send_raw(app.broker, captured)
    run_worker(app, queues=['default'])
    assert recorded_ids(record, 'ran') == []
    assert reasons(dead_letters(app.broker)) == ['expired'] * 3


def test_a_body_replayed_into_another_queue_never_runs(app, record):
    task_id = app.publish(tasks.HighRecordTask, None, 'x')
    high = app.broker.queues['high']
    [captured] = app.broker.transport.receive(app.broker.sqs_name(high), 10, 0, 30)
    send_raw(app.broker, captured.body, 'default')
    run_worker(app, queues=('default',))
    assert recorded_ids(record, 'ran') == []
    assert reasons(dead_letters(app.broker)) == ['wrong_queue']
    opened = app.codec.open(captured.body, app.broker.sqs_name(high))
    assert task_id == opened.task_id


def test_a_json_worker_dead_letters_a_signed_pickle_without_unpickling_it(app, tmp_path):
    marker = tmp_path / 'pwned'
    evil = Message('evil', tasks.RecordTask.task_path(), (CreatesFileWhenUnpickled(str(marker)),))
    body = app.codec.encode(evil, app.broker.sqs_name(app.broker.queues['default'])).body
    send_raw(app.broker, body)
    run_worker(app.replace(SERIALIZER='json'), queues=['default'])
    assert not marker.exists()
    assert reasons(dead_letters(app.broker)) == ['serializer_not_accepted']


def test_nobody_who_reads_the_queue_can_read_an_encrypted_task(app, record):
    secret = app.replace(MESSAGE_ENCRYPTION_KEY='an-encryption-secret-of-32-chars!!',
                         SERIALIZER='json', ACCEPT_SERIALIZERS=['json'])
    task_id = secret.publish(tasks.RecordTask, None, 'iban-DE89370400440532013000')
    queue = secret.broker.queues['default']
    name = secret.broker.sqs_name(queue)
    [seen] = secret.broker.transport.receive(name, 10, 0, 30)
    secret.broker.transport.change_visibility_batch(
        name, [VisibilityChange(seen.receipt_handle, 0)])
    run_worker(secret, queues=['default'])
    assert 'DE8937' not in seen.body and 'DE8937' not in repr(seen.attributes)
    assert recorded_ids(record, 'ran') == [task_id]


def test_an_unverified_message_is_logged_by_its_sqs_id_never_its_claimed_task(app, caplog):
    forged = OutgoingMessage('kale2:forged\nERROR fake line', {'kale_task_id': 'FORGED-ID',
                                                                'kale_task_name': 'evil.Task'})
    [message_id] = app.broker.send(app.broker.queues['default'], [forged])
    with caplog.at_level(logging.INFO):
        run_worker(app, queues=['default'])
    assert 'FORGED-ID' not in caplog.text and 'evil.Task' not in caplog.text
    assert 'message:%s' % message_id in caplog.text
    assert not any(line.startswith('ERROR fake line') for line in caplog.text.splitlines())


def test_payloads_are_decoded_one_at_a_time_just_before_each_run(app, record, monkeypatch):
    order = []
    real_read = TaskRunner.read

    def read(self, batch, received, opened):
        order.append('read')
        return real_read(self, batch, received, opened)

    monkeypatch.setattr(TaskRunner, 'read', read)
    monkeypatch.setattr(tasks.RecordTask, 'before_run', lambda self, *a: order.append('run'))
    app.publish_batch(tasks.RecordTask, None, [(('x' * 20000,), {}) for _ in range(4)])
    run_worker(app, queues=['default'])
    assert order == ['read', 'run'] * 4


def test_legacy_bodies_drain_only_when_accepted(app, record):
    payload = Message('old-1', tasks.RecordTask.task_path(), ('legacy',)).to_payload()
    body = signed_legacy_body('p-', __import__('base64').b64encode(
        serialize.SerializeStep('pickle')._dumps(payload)))
    send_raw(app.broker, body)
    run_worker(app, queues=['default'])
    assert recorded_ids(record, 'ran') == []
    [dead] = dead_letters(app.broker)
    assert reasons([dead]) == ['not_kale_message']
    send_raw(app.broker, dead.body)
    run_worker(app.replace(ACCEPT_LEGACY_MESSAGES=True), queues=['default'])
    assert recorded_ids(record, 'ran') == ['old-1']


@pytest.mark.parametrize('key, problem', [
    ('kale-development-key-not-for-production', 'is a development key'),
    ('a-short-but-valid-key', 'is too short'),
])
def test_a_worker_against_aws_refuses_a_weak_key_before_any_request(app, key, problem,
                                                                     monkeypatch):
    requests = []
    monkeypatch.setattr('botocore.endpoint.Endpoint.make_request',
                        lambda *a, **k: requests.append(a))
    # On SQS, not the app fixture's in-memory transport (which has no key to guard).
    aws = App(app.config, MESSAGE_QUEUE_ENDPOINT_URL='', AWS_REGION='eu-west-1',
              MESSAGE_SIGNING_KEY=key)
    with pytest.raises(Exception, match='MESSAGE_SIGNING_KEY ' + problem):
        Worker(app=aws)
    with pytest.raises(Exception, match='MESSAGE_SIGNING_KEY ' + problem):
        aws.publish(tasks.AddTask, None, 1, 2)
    assert requests == []


def test_an_endpoint_elsewhere_needs_a_strong_key_too(app, monkeypatch):
    # On SQS, not the app fixture's in-memory transport (which has no key to guard).
    elsewhere = App(app.config, MESSAGE_QUEUE_ENDPOINT_URL='https://sqs.eu-west-1.amazonaws.com',
                    MESSAGE_SIGNING_KEY='kale-development-key-not-for-production')
    with pytest.raises(Exception, match='MESSAGE_SIGNING_KEY is a development key'):
        Worker(app=elsewhere)
    here = App(app.config, MESSAGE_QUEUE_ENDPOINT_URL='http://localhost:1',
               MESSAGE_SIGNING_KEY='kale-development-key-not-for-production')
    Worker(app=here)                    # this machine: the development key is fine


def test_a_queue_config_cannot_construct_python_objects(tmp_path):
    from kale.exceptions import QueueConfigError
    from kale.queue_config import load_queue_config
    hostile = tmp_path / 'queues.yaml'
    hostile.write_text('default: !!python/object/apply:os.system ["touch %s"]\n'
                       % (tmp_path / 'pwned'))
    with pytest.raises(QueueConfigError, match='not valid YAML'):
        load_queue_config(str(hostile))
    assert not (tmp_path / 'pwned').exists()


def test_the_supervisors_metrics_directory_is_its_own(monkeypatch):
    import os
    import stat
    require_module('prometheus_client', 'the supervisor\'s metrics endpoint (extra metrics)')
    from kale.contrib.exposition import SupervisorEndpoint
    endpoint = SupervisorEndpoint(0, '127.0.0.1')
    env = {}
    endpoint.start(env)
    try:
        assert stat.S_IMODE(os.stat(endpoint.path).st_mode) == 0o700
        assert endpoint.server.httpd.server_address[0] == '127.0.0.1'
    finally:
        endpoint.stop()
