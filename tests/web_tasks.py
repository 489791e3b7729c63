"""Tasks the README's web framework examples publish."""
from kale import task


class SendConfirmation(task.Task):
    queue = 'default'

    def run_task(self, order_id):
        pass


class SendReminder(task.Task):
    queue = 'default'

    def run_task(self, order_id):
        pass
