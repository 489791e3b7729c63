"""A fair queue on the embedded endpoint (moto's SQS over HTTP): the tenant
reaches SQS as the MessageGroupId of a message on a standard queue, with its
delay, and a real ``kale worker`` keeps it in the copies it sends.

Moto keeps and returns the group of a standard queue's message, but does not
reorder deliveries by tenant; that part is SQS's own and needs no code here."""
import time

import pytest

from tests import flow_tasks as ft
from tests.support.processes import WorkerProcess

pytestmark = pytest.mark.slow


def groups(sqs, queue, expected, wait_sec=3, signed_for=None):
    """The MessageGroupId of each message of ``queue`` (full name without the
    test's prefix), received with raw boto3 and put back at once."""
    url = sqs.queue_url(queue)
    found = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for message in sqs.client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_sec,
                VisibilityTimeout=30, MessageAttributeNames=['All'],
                MessageSystemAttributeNames=['MessageGroupId']).get('Messages', []):
            found[sqs.decode(message['Body'], signed_for or queue).task_id] = \
                message.get('Attributes', {}).get('MessageGroupId')
            sqs.client.change_message_visibility(QueueUrl=url,
                                                 ReceiptHandle=message['ReceiptHandle'],
                                                 VisibilityTimeout=0)
        if len(found) >= expected:
            break
        time.sleep(0.2)
    return found


def test_the_tenant_reaches_sqs_and_a_worker_keeps_it_in_its_copies(sqs, tmp_path):
    given = ft.UntenantedTask.publish(None, 1, group_id='acme', delay_sec=1)
    derived = ft.TenantTask.publish(None, 'globex', 2)
    untenanted = ft.UntenantedTask.publish(None, 3)
    assert groups(sqs, 'tenants', 3) == {given: 'acme', derived: 'globex', untenanted: None}

    doomed = ft.DoomedTenantTask.publish(None, 'initech', 4, fail=True)
    worker = WorkerProcess(tmp_path, '--queues', 'tenants', '--burst')
    assert worker.wait(60) == 0, worker.output()
    assert 'task %s' % doomed in worker.output()
    assert groups(sqs, 'dlq-tenants', 1, wait_sec=0, signed_for='tenants') == {doomed: 'initech'}
