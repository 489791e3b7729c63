from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orders.services import place_order


@csrf_exempt
@require_POST
def create_order(request):
    order, task_id = place_order(request.POST['item'])
    return JsonResponse({'order': order.pk, 'task': task_id}, status=201)
