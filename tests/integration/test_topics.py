"""Topics over the in-memory transport and its in-memory SNS, run by real
worker loops: each subscriber gets its own copy of an event, with its own
retries, outcome and record; a subscription's label filter; an event signed
for one topic and replayed onto another topic's queue is dead-lettered
``wrong_queue``; publish_batch; the checks on what is published."""
from __future__ import annotations

import pytest

from kale import records, topics
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import PublishError, TopicError
from kale.topics.names import copy_task_id, find_subscribers
from kale.transport import OutgoingMessage
from tests import topic_tasks as tt
from tests.support.work import work


@pytest.fixture
def subscribed(memory_broker, monkeypatch, settings_env):
    """Subscribers from tests.topic_tasks, topics created on first use."""
    monkeypatch.setenv('KALE_TEST_TASK_MODULES', 'tests.topic_tasks')
    monkeypatch.setenv('KALE_TEST_AUTO_CREATE_TOPICS', '1')
    monkeypatch.setenv('KALE_TEST_RETRY_DELAY', '0')
    settings_env()
    yield memory_broker
    settings_env()


def lines(path):
    return sorted(path.read_text().splitlines()) if path.exists() else []


def run_all(broker):
    for _ in range(3):
        work(broker, queues=['default', 'high', 'low', 'budget'])


def test_each_subscriber_runs_its_own_copy_with_its_own_retries_and_record(
        subscribed, records_url, tmp_path):
    out = tmp_path / 'runs'
    event_id = topics.publish('orders', {'out': str(out), 'n': 1})
    run_all(subscribed)
    assert lines(out) == ['mail 1', 'stock-attempt-1 1', 'stock-attempt-2 1']
    mail = records.get(copy_task_id(event_id, tt.ReceiptMailer.task_path()))
    stock = records.get(copy_task_id(event_id, tt.StockUpdater.task_path()))
    assert (mail.status, mail.attempts, mail.task) == ('succeeded', 1, tt.ReceiptMailer.task_path())
    assert (stock.status, stock.attempts) == ('succeeded', 2)
    assert mail.id != stock.id and mail.id.startswith(event_id)
    assert records.get(event_id) is None            # the event itself is no task


def test_a_label_filter_lets_only_matching_events_through(subscribed, tmp_path):
    out = tmp_path / 'runs'
    topics.publish('orders', {'out': str(out), 'n': 1}, labels={'tenant': 'acme'})
    topics.publish('orders', {'out': str(out), 'n': 2}, labels={'tenant': 'globex'})
    topics.publish('refunds', {'out': str(out), 'n': 3}, labels={'tenant': 'acme'})
    run_all(subscribed)
    assert [line for line in lines(out) if line.startswith('acme')] == ['acme 1', 'acme 3']
    assert 'mail 2' in lines(out)                   # unfiltered subscribers get every event


def test_publish_batch_sends_ten_to_a_request(subscribed, tmp_path):
    out = tmp_path / 'runs'
    ids = topics.publish_batch('refunds', [{'out': str(out), 'n': n} for n in range(12)],
                               labels={'tenant': 'acme'})
    assert len(set(ids)) == 12
    run_all(subscribed)
    assert lines(out) == sorted('acme %d' % n for n in range(12))


def test_an_event_replayed_onto_a_queue_that_does_not_subscribe_is_wrong_queue(
        subscribed, tmp_path):
    """A body signed for topic 'refunds' copied onto the queue of 'orders'
    only ('default', whose subscriber takes orders): refused unread."""
    from kale.message import Message
    out = tmp_path / 'runs'
    body = default_app().codec.to_outgoing(Message(task_id='e1', task_name='topic:refunds',
                                           args=({'out': str(out), 'n': 9},)),
                                   'topic:%srefunds' % settings.QUEUE_PREFIX).body
    topics.publish('orders', {'out': str(out), 'n': 1})        # creates and subscribes
    default = subscribed.sqs_name(subscribed.queues['default'])
    subscribed.transport.send(default, OutgoingMessage(body))
    worker = work(subscribed, queues=['default'])
    assert lines(out) == ['mail 1']
    dead = subscribed.transport.receive(subscribed.dead_letter_name(subscribed.queues['default']),
                                        10, 0, 30, ['All'])
    assert len(dead) == 1 and 'wrong_queue' in str(dead[0].attributes)
    assert worker is not None


def test_what_is_published_is_checked_first(subscribed):
    with pytest.raises(TopicError, match=r"topic 'no spaces': a topic name is"):
        topics.publish('no spaces', {})
    with pytest.raises(PublishError, match='not JSON-serializable'):
        topics.publish('orders', {'when': object()})
    with pytest.raises(TopicError, match="label key 'a:b'"):
        topics.publish('orders', {}, labels={'a:b': 'x'})


def test_without_auto_create_a_missing_topic_says_what_to_run(memory_broker, monkeypatch, settings_env):
    monkeypatch.setenv('KALE_TEST_TASK_MODULES', 'tests.topic_tasks')
    settings_env()
    with pytest.raises(TopicError, match='run `kale topics sync`'):
        topics.publish('orders', {})


def test_two_subscribers_of_one_topic_on_one_queue_are_refused(monkeypatch, settings_env):
    monkeypatch.setenv('KALE_TEST_TASK_MODULES', 'tests.topic_tasks,tests.topic_clash')
    settings_env()
    with pytest.raises(TopicError, match="both subscribe on queue 'default'"):
        find_subscribers(settings.config, default_app().queues)


def test_sync_subscribes_each_queue_with_its_filter(subscribed):
    from kale.topics.sync import sync
    lines_ = sync(default_app())
    assert 'orders -> tests.topic_tasks.AcmeAudit on queue low (labels tenant=acme)' in lines_
    backend = default_app().topics
    arn = backend.find_topic(settings.QUEUE_PREFIX + 'orders')
    assert {sub['queue_arn'].rsplit(':', 1)[-1] for sub in backend.subscriptions(arn)} == {
        subscribed.sqs_name(subscribed.queues[name]) for name in ('default', 'high', 'low')}


def test_an_event_reaches_the_webhooks_of_its_topic_through_the_fanout(
        subscribed, records_url, tmp_path):
    """A webhook on 'refunds': WEBHOOK_QUEUE ('budget' here) is subscribed to
    the topic, its copy of each event becomes one delivery per matching
    webhook, and the receiver gets the event, signed."""
    import json

    from kale import webhooks
    from kale.webhooks import fanout, sender
    from tests.support.webhook_receiver import Receiver, verify
    server = Receiver()
    try:
        with settings.override(WEBHOOK_ALLOWED_HOSTS=('127.0.0.1',), WEBHOOK_QUEUE='budget'):
            acme = webhooks.add('refunds', server.url(), labels={'tenant': 'acme'})
            webhooks.add('refunds', server.url() + '-other', labels={'tenant': 'globex'})
            assert 'refunds -> kale.webhooks.fanout.WebhookFanout on queue budget' in \
                fanout.subscription_of('refunds', default_app())
            event_id = topics.publish('refunds', {'refund': 3, 'out': str(tmp_path / 'x'),
                                                  'n': 1}, labels={'tenant': 'acme'})
            run_all(subscribed)
            [request] = server.requests
            assert verify(acme.secret, request.headers, request.body)
            body = json.loads(request.body)
            assert (body['type'], body['id'], body['data']['refund']) == ('refunds', event_id, 3)
            fan = records.get(copy_task_id(event_id, fanout.WebhookFanout.task_path()))
            assert fan.status == 'succeeded' and len(fan.result['deliveries']) == 1
    finally:
        sender.close()
        server.close()
