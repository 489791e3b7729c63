"""Fair queues (kale.publish_checks): a standard queue configured ``fair: true`` takes a
tenant per task (``group_id``, or the class's ``fair_key``), sent as the
MessageGroupId, kept in every copy a worker sends, and nowhere else."""
import time

import pytest

from kale.exceptions import InvalidDelayError, InvalidGroupError, QueueConfigError
from kale.queue_config import load_queue_config
from kale.transport import message_fields
from tests import flow_tasks as ft
from tests import tasks
from tests.support.work import work
from tests.unit.test_queue_config import entry_yaml, load_entry, write_config


class Sent:
    """What the transport was asked to send, per full SQS queue name."""

    def __init__(self, transport):
        self.by_queue = {}
        send, send_batch = transport.send, transport.send_batch

        def one(queue, message):
            self.by_queue.setdefault(queue, []).append(message)
            return send(queue, message)

        def many(queue, messages):
            self.by_queue.setdefault(queue, []).extend(messages)
            return send_batch(queue, messages)
        transport.send, transport.send_batch = one, many

    def to(self, broker, name):
        return self.by_queue.get(broker.sqs_name(broker.queues[name]), [])


@pytest.fixture
def sent(memory_broker):
    ft.runs.clear()
    yield Sent(memory_broker.transport)
    ft.runs.clear()


# --- the queue config ------------------------------------------------------------------

def test_fair_is_a_boolean_of_standard_queues(tmp_path):
    assert load_entry(tmp_path, fair='true')['q'].fair is True
    assert load_entry(tmp_path)['q'].fair is False
    with pytest.raises(QueueConfigError, match=r"queue 'q': field 'fair' must be true or false, "
                                               r"got 'yes' \(str\)"):
        load_entry(tmp_path, fair="'yes'")
    with pytest.raises(QueueConfigError, match=r"queues.yaml: queue 'q': fields 'fifo' and 'fair' "
                                               r"cannot both be true"):
        load_queue_config(write_config(tmp_path, entry_yaml(fifo='true', fair='true')))


# --- publishing ------------------------------------------------------------------------

def test_group_id_is_the_tenant_and_delays_stay_allowed(memory_broker, sent):
    ft.UntenantedTask.publish(None, 1, group_id='acme', delay_sec=2)
    ft.UntenantedTask.publish(None, 2)
    first, second = sent.to(memory_broker, 'tenants')
    assert (first.group_id, first.dedup_id, first.delay_sec) == ('acme', '', 2)
    assert (second.group_id, second.dedup_id) == ('', '')
    # the request: a group and a delay, and no deduplication id on a standard queue
    fields = message_fields(first)
    assert (fields['MessageGroupId'], fields['DelaySeconds']) == ('acme', 2)
    assert 'MessageDeduplicationId' not in fields
    assert message_fields(second)['DelaySeconds'] == 0
    assert 'MessageGroupId' not in message_fields(second)
    # a tenant without a delay still says DelaySeconds 0 (only FIFO messages,
    # which carry a deduplication id, leave it out)
    ft.UntenantedTask.publish(None, 3, group_id='acme')
    third = sent.to(memory_broker, 'tenants')[2]
    assert message_fields(third)['DelaySeconds'] == 0
    fifo = tasks.OrderedTask.publish(None, 'x', group_id='g')
    [ordered] = sent.to(memory_broker, 'ordered')
    assert fifo and 'DelaySeconds' not in message_fields(ordered)


def test_fair_key_gives_each_task_its_tenant_and_group_id_overrides_it(memory_broker, sent):
    ft.TenantTask.publish_batch(None, [(('acme', 1), {}), (('globex', 2), {}), ((7, 3), {})])
    ft.TenantTask.publish(None, 'acme', 4, group_id='initech')
    assert [m.group_id for m in sent.to(memory_broker, 'tenants')] == \
        ['acme', 'globex', '7', 'initech']


def test_a_bad_tenant_is_one_line_and_nothing_is_sent(memory_broker, sent):
    with pytest.raises(InvalidGroupError, match=r"^task tests.flow_tasks.BadTenantTask: fair_key "
                                                r"returned 'tenant with spaces é'; a tenant is None "
                                                r"or 1-128 letters, digits or punctuation$"):
        ft.BadTenantTask.publish_batch(None, [((0,), {}), ((1,), {})])
    with pytest.raises(InvalidGroupError, match=r"task tests.flow_tasks.UntenantedTask: group_id "
                                                r"\(its tenant on fair queue 'tenants'\) must be "
                                                r"1-128 letters"):
        ft.UntenantedTask.publish(None, 1, group_id='x' * 129)
    with pytest.raises(InvalidGroupError, match=r"dedup_id is only for FIFO queues, and queue "
                                                r"'tenants' is not one"):
        ft.UntenantedTask.publish(None, 1, dedup_id='d')
    assert sent.by_queue == {}
    ft.BadTenantTask.publish(None, 0)            # None: no tenant
    assert [m.group_id for m in sent.to(memory_broker, 'tenants')] == ['']


def test_fair_key_is_not_used_off_a_fair_queue(memory_broker, sent):
    ft.TenantTask.with_options(queue='default').publish(None, 'acme', 1)
    [message] = sent.to(memory_broker, 'default')
    assert message.group_id == ''
    with pytest.raises(InvalidGroupError, match=r"group_id is for FIFO and fair queues, and "
                                                r"queue 'default' is neither"):
        ft.TenantTask.with_options(queue='default').publish(None, 'acme', 1, group_id='acme')


def test_a_fifo_queue_still_refuses_a_delay(memory_broker):
    with pytest.raises(InvalidDelayError, match=r"queue 'ordered' is a FIFO queue"):
        tasks.OrderedTask.publish(None, 'x', group_id='g', delay_sec=1)


# --- the worker's copies ---------------------------------------------------------------

@pytest.mark.usefixtures('pool')
def test_a_retry_keeps_its_tenant(memory_broker, sent, monkeypatch):
    monkeypatch.setattr(ft.TenantTask, 'retry_delay_sec', classmethod(lambda cls, n: 0))
    ft.TenantTask.publish_batch(None, [(('acme', 1), {'fail': True}), (('globex', 2), {})])
    worker = work(memory_broker, queues=['tenants'])
    assert sorted((key, attempt) for key, _, _, attempt in ft.runs.items) == \
        [(('acme', 1), 1), (('acme', 1), 2), (('globex', 2), 1)]
    assert worker.stats['retry'] == 1
    published, retried = sent.to(memory_broker, 'tenants')[:2], sent.to(memory_broker,
                                                                         'tenants')[2:]
    assert [m.group_id for m in published] == ['acme', 'globex']
    assert [m.group_id for m in retried] == ['acme']     # the retry copy, in its tenant


@pytest.mark.real_time('the bucket refills on the machine\'s clock')
def test_a_release_by_the_rate_limit_keeps_its_tenant(memory_broker, sent, records_url,
                                                      monkeypatch):
    monkeypatch.setattr(ft.TenantTask, 'rate_limit', '1/s', raising=False)
    from kale.flow import spec
    monkeypatch.setattr(spec, '_SPECS', {})
    ft.TenantTask.publish_batch(None, [(('acme', n), {}) for n in range(3)])
    started = time.time()
    worker = work(memory_broker, queues=['tenants'])
    assert len(ft.runs.items) == 3 and time.time() - started < 10
    assert worker.stats['release'] >= 1
    assert {m.group_id for m in sent.to(memory_broker, 'tenants')} == {'acme'}
    assert len(sent.to(memory_broker, 'tenants')) == 3 + worker.stats['release']


def test_a_dead_letter_keeps_its_tenant_and_a_redrive_puts_it_back_in_it(memory_broker, sent,
                                                                       monkeypatch):
    from kale import admin
    monkeypatch.setattr(ft.TenantTask, 'max_retries', 0)
    ft.TenantTask.publish(None, 'acme', 1, fail=True)
    work(memory_broker, queues=['tenants'])
    queue = memory_broker.queues['tenants']
    [dead] = sent.by_queue[memory_broker.dead_letter_name(queue)]
    assert dead.group_id == 'acme'
    report = admin.redrive(memory_broker, queue)
    assert report.moved == 1
    assert [m.group_id for m in sent.to(memory_broker, 'tenants')] == ['acme', 'acme']


@pytest.mark.usefixtures('pool')
def test_a_dead_run_keeps_its_tenant(memory_broker, sent):
    ft.HandledTenantTask.publish(None, 'acme', 1, fail=True)
    work(memory_broker, queues=['tenants'])
    queue = memory_broker.queues['tenants']
    [dead_run] = sent.by_queue[memory_broker.dead_run_name(queue)]
    assert dead_run.group_id == 'acme'
