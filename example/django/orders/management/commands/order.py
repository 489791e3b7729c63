from django.core.management.base import BaseCommand

from orders.services import place_order


class Command(BaseCommand):
    help = 'Place an order (as POST /orders does)'

    def add_arguments(self, parser):
        parser.add_argument('item')

    def handle(self, *args, **options):
        order, task_id = place_order(options['item'])
        self.stdout.write('order %d placed; its confirmation is task %s' % (order.pk, task_id))
