"""A second subscriber of 'orders' on queue 'default': refused."""
from kale import task


class SecondMailer(task.Task):
    queue = 'default'
    subscribes = ('orders',)

    def run_task(self, event):
        pass
