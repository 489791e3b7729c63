"""The intake: probes keep their batch; an idle watch answers at the first
message; what cannot run in time goes back at once; the serial pool reads
ahead only on a slow endpoint. (How a pool shares room out: test_pools.py.)"""
import queue as queue_module
import threading
import time

import pytest

from kale.queue_config import TaskQueue
from kale.queue_selector import HighestPriorityFirst
from kale.transport import OutgoingMessage
from kale.worker import intake as intake_module
from kale.worker.consumer import Consumer
from kale.worker.intake import Arrival, Intake


def queues_of(broker, *names, long_poll=None):
    found = [broker.queues[name] for name in names]
    if long_poll is not None:
        found = [TaskQueue(**dict(q.__dict__, long_poll_time_sec=long_poll)) for q in found]
    return found


def intake_of(broker, queues, inline=True):
    arrivals = queue_module.SimpleQueue()
    intake = Intake(Consumer(broker), queues, HighestPriorityFirst, arrivals.put,
                    max_receives=3, inline=inline)
    return intake, arrivals


def next_batch(intake, arrivals, timeout=10.0):
    """The next arrival's batch (None for an empty answer), accounted for."""
    return intake.arrived(arrivals.get(timeout=timeout))


def test_a_probe_keeps_what_it_receives_as_a_batch(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default')
    memory_broker.send(default, [OutgoingMessage('a'), OutgoingMessage('b')])
    intake, arrivals = intake_of(memory_broker, [high, default])
    intake.refill(10)                                   # inline: answered before it returns
    batch = next_batch(intake, arrivals, timeout=0)
    assert [m.body for m in batch.messages] == ['a', 'b']
    assert memory_broker.transport.requests['ReceiveMessage'] == 2     # the two probes
    assert arrivals.empty() and intake.asked == 0
    intake.close()


def test_a_selection_that_finds_every_queue_empty_makes_the_intake_idle(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default')
    intake, arrivals = intake_of(memory_broker, [high, default])
    intake.refill(10)
    assert next_batch(intake, arrivals, timeout=0) is None and intake.idle
    intake.close()


def test_a_queue_that_runs_dry_in_its_turn_hands_over_to_another_not_to_the_idle_watch(
        memory_broker):
    """The high queue brings one full batch and is then empty while its turn
    goes on: the same receive selects again and brings the default queue's
    messages. Taken for an idle worker, it would long-poll every queue
    first (a drain of three queues ran at a fifth of its speed)."""
    high, default = queues_of(memory_broker, 'high', 'default')
    memory_broker.send(high, [OutgoingMessage('h%d' % i) for i in range(10)])
    memory_broker.send(default, [OutgoingMessage('d')])
    intake, arrivals = intake_of(memory_broker, [high, default])
    intake.refill(10)
    assert len(next_batch(intake, arrivals, timeout=0).messages) == 10
    intake.refill(10)
    batch = next_batch(intake, arrivals, timeout=0)
    assert batch is not None and [m.body for m in batch.messages] == ['d']
    assert not intake.idle and arrivals.empty()
    intake.close()


@pytest.mark.real_time('the watch is long polls on real threads, woken by a message from another thread')
def test_an_idle_intake_answers_as_soon_as_any_queue_gets_a_message(memory_broker):
    high, default, low = queues_of(memory_broker, 'high', 'default', 'low', long_poll=20)
    intake, arrivals = intake_of(memory_broker, [high, default, low])
    intake.idle = True
    threading.Timer(0.3, lambda: memory_broker.send(low, [OutgoingMessage('late')])).start()
    started = time.monotonic()
    intake.refill(10)
    batch = next_batch(intake, arrivals, timeout=60)
    assert time.monotonic() - started < 10                        # not the 20 s long poll
    assert [m.body for m in batch.messages] == ['late'] and not intake.idle
    assert memory_broker.transport.requests['ReceiveMessage'] == 3
    memory_broker.send(high, [OutgoingMessage('wake')])           # the polls still out end
    intake.close()


@pytest.mark.real_time('the watch is long polls on real threads, woken by a message from another thread')
def test_a_queue_whose_poll_brought_work_is_polled_again_at_once(memory_broker, monkeypatch):
    """Regression: a task published right after another on the same idle queue
    waited out the pause meant for queues that answer empty."""
    # That pause is 30 s here, so being held back shows however loaded the machine.
    monkeypatch.setattr(intake_module, 'MIN_POLL_INTERVAL_SEC', 30.0)
    [quick] = queues_of(memory_broker, 'high', long_poll=20)
    intake, arrivals = intake_of(memory_broker, [quick])
    intake.idle = True
    threading.Timer(0.05, lambda: memory_broker.send(quick, [OutgoingMessage('1')])).start()
    intake.refill(10)
    assert [m.body for m in next_batch(intake, arrivals).messages] == ['1']
    intake.idle = True
    threading.Timer(0.05, lambda: memory_broker.send(quick, [OutgoingMessage('2')])).start()
    started = time.monotonic()
    intake.refill(10)
    assert [m.body for m in next_batch(intake, arrivals, timeout=60).messages] == ['2']
    assert time.monotonic() - started < 10                          # not held back
    intake.close()


def test_what_arrives_after_close_is_given_back(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    memory_broker.send(default, [OutgoingMessage('a')])
    intake, arrivals = intake_of(memory_broker, [default])
    intake.close()
    intake._answer(intake.out.sent(0), Arrival(10), 'receiving', intake._select, 10)  # still out
    assert arrivals.empty()
    assert memory_broker.counts(default).visible == 1


def test_a_batch_that_arrives_while_a_task_runs_that_may_outlast_its_budget_goes_back_at_once(
        memory_broker):
    [short] = queues_of(memory_broker, 'short', long_poll=0)      # a 4-second budget
    intake, arrivals = intake_of(memory_broker, [short])
    intake.busy_until = time.monotonic() + 10       # a task with a 10-second limit runs
    memory_broker.send(short, [OutgoingMessage('quick')])
    intake.refill(10)
    assert next_batch(intake, arrivals, timeout=0) is None          # an empty answer
    [again] = memory_broker.receive(short)          # visible at once, not after 4 s
    assert again.body == 'quick'
    intake.busy_until = 0.0                         # once the task ended, kept again
    memory_broker.send(short, [OutgoingMessage('kept')])
    intake.refill(10)
    assert [m.body for m in next_batch(intake, arrivals, timeout=0).messages] == ['kept']
    intake.close()


def test_the_serial_worker_gives_back_what_waits_when_the_next_run_may_outlast_it(
        memory_broker, record):
    """A 4-second budget's batch waits while a task with a 10-second limit
    starts: it could start nothing in time, so it goes back at once."""
    from kale import codec
    from kale.message import Message
    from kale.worker import Worker
    from kale.worker.batch import Batch
    from kale.worker.jobs import Job
    from kale.worker.settler import Settler
    from tests import tasks
    worker = Worker(queue_names=['default', 'short'], broker=memory_broker, pool='serial')
    worker.settler = Settler(worker.consumer)
    short = memory_broker.queues['short']
    message = Message('t-short', tasks.RecordTask.task_path(), (1,))
    memory_broker.send(short, [codec.to_outgoing(message, memory_broker.sqs_name(short))])
    waiting = worker.consumer.receive(short)
    worker.verify(waiting)
    [received] = waiting.messages
    worker.waiting = [Job(waiting, received, waiting.opened[received.message_id])]
    running = Batch(memory_broker.queues['default'], [], time.monotonic(), 'default')
    worker._busy(running, time.monotonic() + 2)         # it outlasts a 2-second run: kept
    assert len(worker.waiting) == 1
    worker._busy(running, time.monotonic() + tasks.RecordTask.time_limit + 10)
    assert worker.waiting == [] and worker.stats['release'] == 0   # (counted once settled)
    worker._settle_now()
    [again] = memory_broker.receive(short)
    assert codec.decode(again.body, memory_broker.sqs_name(short)).task_id == 't-short'
    worker.settler.close()
    worker.intake.close()


def receiving_threads(broker):
    names = []
    broker.transport.on_request = lambda operation: operation == 'ReceiveMessage' and \
        names.append(threading.current_thread().name)
    return names


def drain(broker, count, record):
    from kale.worker import Worker
    from tests import tasks
    from tests.support.records import recorded_ids
    ids = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(count)])
    assert Worker(queue_names=['default'], burst=True, broker=broker, pool='serial').run() == 0
    assert sorted(recorded_ids(record, 'ran')) == sorted(ids)


def test_a_slow_endpoint_s_next_batches_are_received_while_one_runs(memory_broker, record):
    memory_broker.transport.latency_sec = 0.01
    names = receiving_threads(memory_broker)
    drain(memory_broker, 60, record)
    assert any(name.startswith('kale-receive') for name in names)
    assert memory_broker.transport.late_settles == 0


def test_a_fast_endpoint_is_not_read_ahead(memory_broker, record):
    names = receiving_threads(memory_broker)
    drain(memory_broker, 60, record)
    assert not any(name.startswith('kale-receive') for name in names)
    assert 'MainThread' in names
