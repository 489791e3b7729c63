import json

from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from kale.contrib.django import outbox
from shop.models import Order
from shop.tasks import Note


@csrf_exempt
def place_order(request):
    """The order and its task commit together, through the outbox."""
    given = json.loads(request.body)
    with transaction.atomic():
        order = Order.objects.create(item=given['item'])
        task_id = outbox.publish(Note, None, given['path'], 'order %s' % order.item)
    return JsonResponse({'order': order.pk, 'task': task_id})
