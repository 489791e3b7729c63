"""The serial pool's own steps (kale/worker/serial.py) that the tests of a
whole worker do not single out: as a run starts, what waits of other batches
and could no longer start before its budget ends is given back at once."""
from kale.worker.batch import Batch
from kale.worker.intake import Arrival
from kale.worker.loop import Worker
from tests import tasks


def received(app, count, ends_in):
    """A batch of ``count`` tasks whose budget ends ``ends_in`` seconds from
    now (on the app's clock)."""
    queue = app.queues['default']
    app.publish_batch(tasks.AddTask, None, [((i, i), {}) for i in range(count)])
    messages = app.broker.receive(queue, count, 0)
    received_at = app.clock.monotonic() + ends_in - queue.visibility_timeout_sec
    return Batch(queue, messages, received_at, app.broker.sqs_name(queue))


def arrived(app, worker, count, ends_in):
    """Such a batch, admitted: its jobs wait in ``worker.waiting``."""
    batch = received(app, count, ends_in)
    worker.admit(batch)
    return batch


def not_taken_in(app, worker, count, ends_in):
    """Such a batch, arrived but not yet taken in: its arrival."""
    batch = received(app, count, ends_in)
    arrival = Arrival(count, batch)
    worker.events.put(('arrival', arrival))
    return arrival


def visible(app):
    """How many messages of the default queue any worker may receive now (a
    message given back is sent again, as a copy)."""
    return len(app.broker.receive(app.queues['default'], 10, 0))


def waiting(worker):
    return [(job.batch, job.received.message_id) for job in worker.waiting]


def test_a_run_gives_back_what_waits_and_would_end_its_budget_before_the_run_ends(app):
    worker = Worker(app=app, pool='serial', queue_names=['default'], burst=True)
    running = arrived(app, worker, 2, ends_in=60)
    late = arrived(app, worker, 2, ends_in=3)
    worker.waiting.pop(0)                               # the first of `running` starts
    worker._busy(running, app.clock.monotonic() + 5)    # and may run 5 s: `late` cannot wait
    assert waiting(worker) == [(running, running.messages[1].message_id)]
    assert [s.outcome.value for s in late.settlements] == ['release', 'release']


def test_a_batch_arriving_after_the_last_check_is_checked_at_the_next_run(app):
    worker = Worker(app=app, pool='serial', queue_names=['default'], burst=True)
    running = arrived(app, worker, 2, ends_in=60)
    kept = arrived(app, worker, 1, ends_in=3)
    worker.waiting.pop(0)
    worker._busy(running, app.clock.monotonic() + 1)    # 1 s: `kept` may still start
    assert len(worker.waiting) == 2
    later = arrived(app, worker, 1, ends_in=1.5)        # ends sooner than `kept`
    worker._busy(running, app.clock.monotonic() + 1)
    assert [batch for batch, _ in waiting(worker)] == [running, kept]
    assert [s.outcome.value for s in later.settlements] == ['release']


def test_what_arrived_meanwhile_is_given_back_when_it_could_not_start_in_time(app):
    worker = Worker(app=app, pool='serial', queue_names=['default'], burst=True)
    running = arrived(app, worker, 1, ends_in=60)
    kept = not_taken_in(app, worker, 1, ends_in=30)
    worker.waiting.pop(0)
    worker._busy(running, app.clock.monotonic() + 5)
    assert kept.batch.messages                          # it may start in time
    late = not_taken_in(app, worker, 2, ends_in=3)
    worker._busy(running, app.clock.monotonic() + 5)    # a new arrival is looked at
    assert not late.batch.messages and visible(app) == 2
    assert kept.batch.messages and worker.events.qsize() == 2
