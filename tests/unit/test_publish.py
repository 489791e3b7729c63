"""Publishing: every invalid call is refused with its own error before sending."""
import math
import os

import pytest

from kale import codec
from kale import publisher as kale_publisher
from kale.exceptions import (
    DecodeError,
    ImproperlyConfigured,
    InvalidDelayError,
    InvalidTimeLimitError,
    MessageTooLargeError,
    PublishError,
    SerializationError,
    UnknownQueueError,
)
from kale.task import (
    PERMANENT_FAILURE_NO_RETRIES,
    PERMANENT_FAILURE_NON_RETRIABLE,
    PERMANENT_FAILURE_RETRIES_EXHAUSTED,
    Task,
)
from tests import tasks


class RecordingSender:
    """Stands in for the broker: records what would have been sent."""

    def __init__(self):
        self.sent = []

    def sqs_name(self, queue):
        return 'tq-' + queue.name

    def send(self, queue, messages):
        self.sent.append((queue.name, list(messages)))
        return ['m%d' % i for i in range(len(messages))]


@pytest.fixture
def sender():
    recording = RecordingSender()
    previous = kale_publisher.set_publisher(kale_publisher.Publisher(recording))
    yield recording
    kale_publisher.set_publisher(previous)


def decode(body, queue='tq-default'):
    return codec.decode(body, queue)


def sends(app):
    """The send requests the app's (in-memory) transport got."""
    return app.transport.requests['SendMessage'] + app.transport.requests['SendMessageBatch']


def test_publish_returns_the_task_id_and_sends_one_signed_message(sender):
    task_id = tasks.AddTask.publish({'tenant': 7}, 2, 3, extra='x')
    [(queue, [outgoing])] = sender.sent
    assert queue == 'default'
    message = decode(outgoing.body)
    assert message.task_id == task_id
    assert (message.args, message.kwargs, message.app_data) == ((2, 3), {'extra': 'x'}, {'tenant': 7})
    assert message.task_name == 'tests.tasks.AddTask'
    assert (message.retry_num, message.failure_num) == (0, 0)


def test_delay_is_kales_and_never_reaches_run_task(sender):
    tasks.AddTask.publish(None, 1, 2, delay_sec=30)
    [(_, [outgoing])] = sender.sent
    assert outgoing.delay_sec == 30
    assert decode(outgoing.body).kwargs == {}


def test_an_app_built_on_the_settings_configuration_is_the_default_one(sender):
    """An app built by hand on the configuration the settings give, before
    anything asked for the default app, is the default app: MyTask.publish
    goes through it, and through a publisher put in place for it."""
    from kale.app import App, default_app
    from kale.conf import settings
    with settings.override(RETRY_DELAY_JITTER=0):       # a configuration no app owns yet
        built = App(settings.config)
        assert default_app() is built and built.is_default
        tasks.AddTask.publish(None, 1, 2)
    assert [queue for queue, _ in sender.sent] == ['default']


def test_zero_delay_means_now(sender):
    tasks.AddTask.publish(None, 1, 2)
    assert sender.sent[0][1][0].delay_sec == 0


def test_fractional_delay_rounds_up_to_whole_seconds(sender):
    tasks.AddTask.publish(None, 1, 2, delay_sec=2.1)
    assert sender.sent[0][1][0].delay_sec == 3


@pytest.mark.parametrize('delay', [-1, 366 * 86400, 'soon', True, math.nan, None])
def test_delay_outside_0_to_365_days_is_refused(sender, delay):
    with pytest.raises(InvalidDelayError, match=r'task tests.tasks.AddTask: delay_sec must be .*'
                                                r'within 0..31536000 \(365 days\), got'):
        tasks.AddTask.publish(None, 1, 2, delay_sec=delay)
    assert sender.sent == []


def test_unknown_queue_is_refused(sender):
    with pytest.raises(UnknownQueueError, match=r"task tests.tasks.UnknownQueueTask: queue "
                                                r"'no_such_queue' is not in the queue config"):
        tasks.UnknownQueueTask.publish(None)
    assert sender.sent == []


def test_a_time_limit_longer_than_the_visibility_timeout_is_allowed(sender):
    tasks.LongerThanVisibilityTask.publish(None)      # the worker's heartbeat keeps it invisible
    assert len(sender.sent) == 1


def test_a_time_limit_over_twelve_hours_is_refused(sender):
    with pytest.raises(InvalidTimeLimitError, match=r'task tests.tasks.OverTwelveHoursTask: '
                                                    r'time_limit 43201s is over 12 hours'):
        tasks.OverTwelveHoursTask.publish(None)
    assert sender.sent == []


def test_fractional_time_limit_is_allowed(sender):
    tasks.FractionalLimitTask.publish(None)
    assert len(sender.sent) == 1


def test_a_time_limit_made_non_positive_after_definition_is_refused_at_publish(sender,
                                                                              monkeypatch):
    monkeypatch.setattr(tasks.ZeroLimitTask, 'time_limit', 0)
    with pytest.raises(InvalidTimeLimitError, match='tests.tasks.ZeroLimitTask: time_limit must '
                                                    'be a positive number'):
        tasks.ZeroLimitTask.publish(None)


def test_oversized_message_is_refused(app):
    small = app.replace(SQS_TASK_SIZE_LIMIT=2048)
    with pytest.raises(MessageTooLargeError, match=r'task tests.tasks.EchoTask \(\w+\): encoded '
                                                   r'message is \d+ bytes, over '
                                                   r'SQS_TASK_SIZE_LIMIT of 2048 bytes'):
        small.publish(tasks.EchoTask, None, os.urandom(4096))
    assert sends(app) == 0


def test_unserializable_arguments_are_refused(app):
    with pytest.raises(SerializationError, match=r'task tests.tasks.EchoTask \(\w+\): arguments cannot be '
                                                 'serialized with pickle'):
        app.publish(tasks.EchoTask, None, lambda: 1)
    with pytest.raises(SerializationError, match='serialized with json'):
        app.replace(SERIALIZER='json').publish(tasks.EchoTask, None, {1, 2})
    assert sends(app) == 0         # app.replace keeps the transport: neither app sent


def test_publishing_without_a_signing_key_explains_how_to_set_one(app):
    keyless = app.replace(MESSAGE_SIGNING_KEY='')
    with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is not set'):
        keyless.publish(tasks.AddTask, None, 1, 2)


def test_a_task_defined_in_a_function_cannot_be_published(sender):
    class Local(Task):
        queue = 'default'
        time_limit = 1
    with pytest.raises(PublishError, match='cannot be imported by a worker'):
        Local.publish(None)


def test_publish_batch_sends_every_call_in_one_send(sender):
    ids = tasks.AddTask.publish_batch('app', [((1, 2), {}), ((3, 4), {'z': 1}), ([5, 6], {})])
    [(_, outgoing)] = sender.sent
    assert [decode(o.body).task_id for o in outgoing] == ids
    assert [decode(o.body).args for o in outgoing] == [(1, 2), (3, 4), (5, 6)]
    assert decode(outgoing[1].body).kwargs == {'z': 1}
    assert len(set(ids)) == 3


def test_publish_batch_checks_every_call_before_sending_any(sender):
    with pytest.raises(SerializationError):
        tasks.EchoTask.publish_batch(None, [((1,), {}), ((lambda: 1,), {})])
    with pytest.raises(PublishError, match=r'publish_batch call #1 must be an \(args, kwargs\) pair'):
        tasks.EchoTask.publish_batch(None, [((1,), {}), (1, 2, 3)])
    assert sender.sent == []


def test_publish_batch_of_nothing_sends_nothing(sender):
    assert tasks.AddTask.publish_batch(None, []) == []
    assert sender.sent == []


def test_retry_delay_grows_exponentially_up_to_the_cap(app):
    # The policy a worker of the app retries by (Task.retry_delay_sec is the
    # default app's; test_retry holds the two equal).
    policy = Task.retry_policy(app.replace(RETRY_DELAY_MULTIPLE_SEC=60,
                                           SQS_MAX_TASK_DELAY_SEC=900).config)
    assert [policy.delay_sec(n) for n in range(6)] == [60, 120, 240, 480, 900, 900]
    policy = Task.retry_policy(app.replace(RETRY_DELAY_MULTIPLE_SEC=0.5).config)
    assert [policy.delay_sec(n) for n in range(3)] == [1, 1, 2]
    assert Task.retry_policy(app.config).delay_sec(1000) <= 900


def test_retry_delay_jitter_stays_within_its_spread(app):
    policy = Task.retry_policy(app.replace(RETRY_DELAY_MULTIPLE_SEC=100,
                                           RETRY_DELAY_JITTER=0.2).config)
    delays = {policy.delay_sec(0) for _ in range(200)}
    assert min(delays) >= 80 and max(delays) <= 120 and len(delays) > 5


def test_retry_delay_is_overridable():
    class Fixed(Task):
        @classmethod
        def retry_delay_sec(cls, retry_num):
            return 7
    assert Fixed.retry_delay_sec(5) == 7


def test_permanent_failure_reasons():
    from kale.exceptions import NonRetriableTaskError
    from kale.message import Message
    first = Message('id', 'tests.tasks.AddTask')
    assert tasks.AddTask.permanent_failure_reason(first, RuntimeError()) is None
    assert tasks.AddTask.permanent_failure_reason(first, NonRetriableTaskError()) == \
        PERMANENT_FAILURE_NON_RETRIABLE
    exhausted = Message('id', 'tests.tasks.AddTask', failure_num=tasks.AddTask.max_retries)
    assert tasks.AddTask.permanent_failure_reason(exhausted, RuntimeError()) == \
        PERMANENT_FAILURE_RETRIES_EXHAUSTED

    class NoRetries(tasks.AddTask):
        max_retries = 0
    assert NoRetries.permanent_failure_reason(first, RuntimeError()) == PERMANENT_FAILURE_NO_RETRIES


def test_each_body_is_signed_for_the_queue_it_is_sent_to(sender):
    tasks.HighTask.publish(None)
    [(queue, [outgoing])] = sender.sent
    assert decode(outgoing.body, 'tq-' + queue).task_name == 'tests.tasks.HighTask'
    with pytest.raises(DecodeError, match='wrong_queue'):
        decode(outgoing.body, 'tq-default')


def test_a_weak_or_development_key_is_refused_for_remote_queues_before_any_request(app):
    from kale.broker import Broker

    class Remote:
        local = False

        def __getattr__(self, name):
            raise AssertionError('no request may be made, got %s' % name)

    for key, problem in [('kale-development-key-not-for-production', 'is a development key'),
                         ('sixteen-byte-key', 'is too short')]:
        weak = app.replace(MESSAGE_SIGNING_KEY=key)
        with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY ' + problem):
            Broker(Remote(), weak.queues, config=weak.config)
    old = app.replace(MESSAGE_SIGNING_OLD_KEYS=['kale-development-key-not-for-production'])
    with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_OLD_KEYS is a development'):
        Broker(Remote(), old.queues, config=old.config)


def test_the_publisher_identity_names_this_process_also_after_a_fork():
    import socket

    from kale.events import process_identity
    from kale.message import publisher_identity
    assert publisher_identity() == process_identity()[0]
    assert publisher_identity().startswith('%s:%d@' % (socket.gethostname(), os.getpid()))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child says who it is, then leaves
        os.write(write, publisher_identity().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, 'rb') as f:
        assert f.read().decode().startswith('%s:%d@' % (socket.gethostname(), pid))


def test_a_keeping_sender_is_handed_the_signed_messages_and_nothing_is_sent(app):
    """The pipeline's last stage hands a KeepingSender (the outbox's kind)
    the publication and its encoded bodies, instead of sending them."""
    queue = app.queues['default']
    kept = []

    class Keeper:
        def sqs_name(self, queue_):
            return app.broker.sqs_name(queue_)

        def keep(self, publication, outgoing):
            kept.append((publication, outgoing))

    ids = app.publisher.publish_batch(tasks.AddTask, None, [((1, 2), {}), ((3, 4), {})],
                                      sender=Keeper())
    [(publication, outgoing)] = kept
    assert publication.deferred and publication.task_ids == ids and not publication.message_ids
    name = app.broker.sqs_name(queue)
    assert [app.codec.decode(out.body, name).args for out in outgoing] == [(1, 2), (3, 4)]
    assert app.broker.counts(queue).visible == 0


def test_each_publisher_put_in_place_is_the_one_publishing():
    """The default app gives a publisher put in place its parts once; one put
    in place later publishes through itself, even where the first was freed
    and the new one took its place in memory."""
    for _ in range(20):
        recording = RecordingSender()
        previous = kale_publisher.set_publisher(kale_publisher.Publisher(recording))
        try:
            tasks.AddTask.publish(None, 1, 2)
        finally:
            kale_publisher.set_publisher(previous)
        assert len(recording.sent) == 1
