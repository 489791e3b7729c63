"""The orders' tasks (an app's ``tasks`` module: Kale finds it)."""
import logging

from kale import task
from orders.models import Order

logger = logging.getLogger(__name__)


class SendConfirmation(task.Task):
    queue = 'default'
    time_limit = 10

    def run_task(self, order_id):
        order = Order.objects.get(pk=order_id)
        order.confirmed = True              # stands for the mail sent
        order.save(update_fields=['confirmed'])
        logger.info('order %d (%s) confirmed', order.pk, order.item)
