"""Received messages and batches made by hand, for the runner's tests."""
import time

from kale import codec as kale_codec
from kale import message as kale_message
from kale.conf import settings
from kale.events import Settlement
from kale.queue_config import build_queue_config
from kale.transport import ReceivedMessage
from kale.worker.batch import Batch

QUEUE = 'tq-default'


def received_for(task_class, *args, retry_num=0, failure_num=0, **kwargs):
    message = kale_message.Message('tid-%s' % task_class.__name__, task_class.task_path(), args,
                                   kwargs, retry_num=retry_num, failure_num=failure_num)
    outgoing = kale_codec.to_outgoing(message, QUEUE)
    return ReceivedMessage('mid', 'handle', outgoing.body,
                           {k: str(v) for k, v in outgoing.attributes.items()})


def batch_for(received):
    return Batch(build_queue_config(settings.config)['default'], [received], time.monotonic(), QUEUE)


def settled(outcome):
    """A verified, settled settlement of ``outcome`` in a batch of its own."""
    from kale.worker.runner import TaskRunner
    from tests import tasks
    received = received_for(tasks.RecordTask)
    batch = Batch(build_queue_config(settings.config)['default'], [received], 0.0, QUEUE)
    runner = TaskRunner()
    opened = runner.open(batch, received)
    message = runner.read(batch, received, opened)
    settlement = Settlement(received, outcome, message=message, settled=True,
                            reason='because', duration_sec=0.01)
    batch.settlements.append(settlement)
    return batch, settlement
