from django.db import transaction

from kale.contrib.django import outbox
from orders.models import Order
from orders.tasks import SendConfirmation


def place_order(item):
    """The order and its confirmation task commit together, or neither does:
    the task waits in the outbox, in this transaction, for `manage.py kale relay`."""
    with transaction.atomic():
        order = Order.objects.create(item=item)
        task_id = outbox.publish(SendConfirmation, None, order.pk)
    return order, task_id
