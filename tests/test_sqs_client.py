"""The boto3 client Kale builds from the settings."""
from kale.conf import settings
from kale.transport import MAX_LONG_POLL_SEC, sqs


def test_the_read_timeout_is_the_setting_beyond_the_longest_long_poll():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:1', SQS_READ_TIMEOUT_SEC=5,
                           SQS_CONNECT_TIMEOUT_SEC=2):
        config = sqs.make_client().meta.config
    assert config.read_timeout == 5 + MAX_LONG_POLL_SEC
    assert config.connect_timeout == 2
