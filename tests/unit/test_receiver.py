"""The receiver: probes keep their batch; the idle watch answers at the first message."""
import threading
import time

import pytest

from kale.events import Outcome, Settlement
from kale.queue_config import TaskQueue
from kale.transport import OutgoingMessage
from kale.worker import receiver as receiver_module
from kale.worker.consumer import Consumer
from kale.worker.prefetch import Prefetch
from kale.worker.receiver import Receiver
from kale.worker.settler import Settler
from tests.support.processes import wait_for


def queues_of(broker, *names, long_poll=None):
    found = [broker.queues[name] for name in names]
    if long_poll is not None:
        found = [TaskQueue(**dict(q.__dict__, long_poll_time_sec=long_poll)) for q in found]
    return found


def fast(*queues):
    """A Prefetch that has seen the queues' tasks run in no time: it receives full batches."""
    prefetch = Prefetch()
    for queue in queues:
        prefetch.ran(queue, 0.0)
    return prefetch


def test_a_probe_keeps_what_it_receives_as_the_next_batch(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    memory_broker.send(default, [OutgoingMessage('a'), OutgoingMessage('b')])
    receiver = Receiver(Consumer(memory_broker), [default], prefetch=fast(default))
    before = sum(memory_broker.transport.requests.values())
    assert receiver.probe(default)
    batch = receiver.take(default)
    assert [m.body for m in batch.messages] == ['a', 'b']
    assert sum(memory_broker.transport.requests.values()) - before == 1


def test_an_empty_probe_is_remembered_for_the_selection(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    receiver = Receiver(Consumer(memory_broker), [default])
    assert not receiver.probe(default)
    assert receiver.known_empty(default)
    receiver.new_selection()
    assert not receiver.known_empty(default)


def test_batches_probed_for_other_queues_run_next(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default')
    memory_broker.send(high, [OutgoingMessage('h')])
    memory_broker.send(default, [OutgoingMessage('d')])
    receiver = Receiver(Consumer(memory_broker), [high, default])
    assert receiver.probe(default) and receiver.probe(high)
    assert [m.body for m in receiver.take(default).messages] == ['d']
    assert [m.body for m in receiver.next_ready().messages] == ['h']
    assert receiver.next_ready() is None


@pytest.mark.real_time('the watch is long polls on real threads, woken by a message from another thread')
def test_the_watch_answers_as_soon_as_any_queue_gets_a_message(memory_broker):
    high, default, low = queues_of(memory_broker, 'high', 'default', 'low', long_poll=20)
    receiver = Receiver(Consumer(memory_broker), [high, default, low])
    threading.Timer(0.3, lambda: memory_broker.send(low, [OutgoingMessage('late')])).start()
    started = time.monotonic()
    assert receiver.watch(max_wait_sec=60) is True
    # At the message, not once the other queues' 20 s polls end (seconds
    # apart, however long a loaded machine pauses the test).
    assert time.monotonic() - started < 10
    assert [m.body for m in receiver.next_ready().messages] == ['late']
    assert memory_broker.transport.requests['ReceiveMessage'] == 3
    for queue in (high, default):           # ends the polls still out, which close waits for
        memory_broker.send(queue, [OutgoingMessage('end')])
    receiver.close()


def test_the_watch_returns_once_every_queue_answered_empty(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default', long_poll=0)
    receiver = Receiver(Consumer(memory_broker), [high, default])
    assert receiver.watch() is False


def test_close_releases_batches_that_were_never_run(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    memory_broker.send(default, [OutgoingMessage('a')])
    receiver = Receiver(Consumer(memory_broker), [default])
    assert receiver.probe(default)
    receiver.close()
    assert memory_broker.counts(default).visible == 1


def test_the_settler_settles_in_order_in_the_background(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    memory_broker.send(default, [OutgoingMessage(str(i)) for i in range(20)])
    consumer = Consumer(memory_broker)
    settler = Settler(consumer)
    batches = [consumer.receive(default), consumer.receive(default)]
    for batch in batches:
        batch.settlements = [Settlement(m, Outcome.SUCCEEDED) for m in batch.messages]
        settler.submit(batch)
    settler.flush()
    assert settler.completed() == batches
    assert memory_broker.counts(default).total == 0
    settler.close()


@pytest.mark.real_time('the watch is long polls on real threads, stopped from another thread')
def test_the_watch_returns_soon_after_a_stop_request(memory_broker):
    high, = queues_of(memory_broker, 'high', long_poll=20)
    stopping = []
    receiver = Receiver(Consumer(memory_broker), [high], stopping=lambda: bool(stopping))
    threading.Timer(0.3, lambda: stopping.append(True)).start()
    started = time.monotonic()
    assert receiver.watch(max_wait_sec=60) is False
    # At the stop, not at the end of the 20 s poll or of the watch's 60 s.
    assert time.monotonic() - started < 10
    memory_broker.send(high, [OutgoingMessage('end')])      # ends the poll still out
    receiver.close()


def test_release_ready_gives_back_batches_not_yet_run(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default')
    memory_broker.send(high, [OutgoingMessage('h')])
    receiver = Receiver(Consumer(memory_broker), [high, default])
    assert receiver.probe(high)
    receiver.take(default)                       # high's batch now waits its turn
    receiver.release_ready()
    assert receiver.next_ready() is None
    assert memory_broker.counts(high).visible == 1


def with_long_poll(queue, seconds):
    return TaskQueue(**dict(queue.__dict__, long_poll_time_sec=seconds))


def test_a_queue_is_polled_again_as_soon_as_its_own_poll_answers(memory_broker):
    """A message on a queue with a short long poll starts at once, however long
    another queue's long poll is."""
    quick, slow = (with_long_poll(memory_broker.queues['high'], 1),
                   with_long_poll(memory_broker.queues['low'], 20))
    receiver = Receiver(Consumer(memory_broker), [quick, slow])
    polls = []
    memory_broker.transport.on_request = polls.append
    threading.Timer(1.6, lambda: memory_broker.send(quick, [OutgoingMessage('q')])).start()
    assert receiver.watch(max_wait_sec=10) is True            # long before the 20 s poll ends
    assert [m.body for m in receiver.next_ready().messages] == ['q']
    assert polls.count('ReceiveMessage') >= 3                 # quick polled twice, slow once
    assert 'low' in receiver._polling                          # the 20 s poll is still out
    memory_broker.send(slow, [OutgoingMessage('end')])        # ends it: close waits for it
    receiver.close()


def test_a_queue_without_a_long_poll_is_not_polled_in_a_busy_loop(memory_broker):
    instant = with_long_poll(memory_broker.queues['default'], 0)
    receiver = Receiver(Consumer(memory_broker), [instant])
    polls = []
    memory_broker.transport.on_request = polls.append
    # (3 s: a second poll comes even if a loaded machine pauses the test for two)
    assert receiver.watch(max_wait_sec=3.0) is False
    assert 2 <= polls.count('ReceiveMessage') <= 3.0 / 0.25 + 1
    receiver.close()


def test_a_burst_watch_ends_once_every_queue_answered_empty(memory_broker):
    queues = [with_long_poll(memory_broker.queues[name], 0) for name in ('high', 'default')]
    receiver = Receiver(Consumer(memory_broker), queues)
    assert receiver.watch(each_once=True, max_wait_sec=30) is False
    assert memory_broker.transport.requests['ReceiveMessage'] == 2
    receiver.close()


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
    assert Worker(queue_names=['default'], burst=True, broker=broker).run() == 0
    assert sorted(recorded_ids(record, 'ran')) == sorted(ids)


def test_a_slow_endpoint_s_next_batches_are_received_while_one_runs(memory_broker, record):
    memory_broker.transport.latency_sec = 0.01
    names = receiving_threads(memory_broker)
    drain(memory_broker, 60, record)
    assert any(name.startswith('kale-read-ahead') for name in names)
    assert memory_broker.transport.late_settles == 0


def test_a_fast_endpoint_is_not_read_ahead(memory_broker, record):
    names = receiving_threads(memory_broker)
    drain(memory_broker, 60, record)
    assert not any(name.startswith('kale-read-ahead') for name in names)


@pytest.mark.real_time('the read-ahead is a real thread receiving while the test waits')
def test_a_batch_read_ahead_is_held_to_its_own_budget(memory_broker):
    """The time a batch waited after it arrived counts against its visibility timeout."""
    queue = memory_broker.queues['default']
    memory_broker.send(queue, [OutgoingMessage(str(i)) for i in range(30)])
    consumer = Consumer(memory_broker)
    receiver = Receiver(consumer, [queue], read_ahead_above_sec=0.0, prefetch=fast(queue))
    receiver.receive(queue)
    ahead = receiver._ahead['default']
    assert len(ahead) == 2
    wait_for(lambda: all(future.done() for future in ahead), 30, 'the batches read ahead')
    time.sleep(0.3)                                   # the first batch "runs"
    asked = time.monotonic()
    second = receiver.receive(queue)
    assert second.received_at < asked                 # it arrived while the first ran
    assert second.time_left(time.monotonic()) <= queue.visibility_timeout_sec - 0.3
    receiver.close()
    counts = memory_broker.counts(queue)
    assert (counts.in_flight, counts.visible) == (20, 10)    # what was read ahead went back


@pytest.mark.real_time('the watch is long polls on real threads, woken by a message from another thread')
def test_a_queue_whose_poll_brought_work_is_polled_again_at_once(memory_broker, monkeypatch):
    """Regression: a task published right after another on the same idle queue
    waited out the pause meant for queues that answer empty."""
    # That pause is 30 s here, so being held back shows however loaded the machine.
    monkeypatch.setattr(receiver_module, 'MIN_POLL_INTERVAL_SEC', 30.0)
    quick = with_long_poll(memory_broker.queues['high'], 20)
    receiver = Receiver(Consumer(memory_broker), [quick])
    threading.Timer(0.05, lambda: memory_broker.send(quick, [OutgoingMessage('1')])).start()
    assert receiver.watch(max_wait_sec=60) is True
    receiver.next_ready()
    threading.Timer(0.05, lambda: memory_broker.send(quick, [OutgoingMessage('2')])).start()
    started = time.monotonic()
    assert receiver.watch(max_wait_sec=60) is True
    assert time.monotonic() - started < 10                  # not held back
    receiver.close()


def test_a_batch_that_arrives_while_a_task_runs_that_may_outlast_its_budget_is_given_back_at_once(
        memory_broker):
    [short] = queues_of(memory_broker, 'short', long_poll=0)     # a 4-second budget
    receiver = Receiver(Consumer(memory_broker), [short])
    receiver.busy_until(time.monotonic() + 10)      # a task with a 10-second limit runs
    memory_broker.send(short, [OutgoingMessage('quick')])
    assert receiver.watch(each_once=True) is False  # what it received went back
    assert receiver.next_ready() is None
    [again] = memory_broker.receive(short)         # visible at once, not after 4 s
    assert again.body == 'quick'
    receiver.close()


def test_batches_waiting_to_run_are_given_back_when_the_next_run_may_outlast_them(memory_broker):
    short, default = queues_of(memory_broker, 'short', 'default')
    memory_broker.send(short, [OutgoingMessage('s')])
    memory_broker.send(default, [OutgoingMessage('d')])
    receiver = Receiver(Consumer(memory_broker), [short, default])
    assert receiver.probe(short) and receiver.probe(default)
    receiver.take(default)                      # the short queue's batch waits its turn
    receiver.busy_until(time.monotonic() + 2)   # it outlasts a 2-second run: kept
    assert receiver.has_ready()
    receiver.busy_until(time.monotonic() + 10)  # not a 10-second one: given back
    assert not receiver.has_ready()
    assert [m.body for m in memory_broker.receive(short)] == ['s']
    receiver.close()


def test_once_the_task_ended_arriving_batches_are_kept_again(memory_broker):
    [short] = queues_of(memory_broker, 'short', long_poll=0)
    receiver = Receiver(Consumer(memory_broker), [short])
    receiver.busy_until(time.monotonic() + 10)
    receiver.busy_until(0.0)
    memory_broker.send(short, [OutgoingMessage('quick')])
    assert receiver.watch(each_once=True) is True
    assert [m.body for m in receiver.next_ready().messages] == ['quick']
    receiver.close()


def test_what_a_poll_brings_while_a_message_runs_alone_is_given_back_at_once(memory_broker):
    """A suspect running alone (nothing else held, in case it kills the
    worker): a batch a poll still out brings meanwhile is given back by the
    poll's thread, not held beside it (its unverified messages would die
    with the worker, unseen)."""
    [default] = queues_of(memory_broker, 'default', long_poll=0)
    receiver = Receiver(Consumer(memory_broker), [default])
    receiver.alone = True
    memory_broker.send(default, [OutgoingMessage('arrived')])
    assert receiver.watch(each_once=True) is False  # what it received went back
    assert receiver.next_ready() is None
    [again] = memory_broker.receive(default)        # visible at once
    assert again.body == 'arrived'
    receiver.alone = False
    receiver.close()


def test_the_serial_worker_gives_back_what_arrives_while_a_suspect_runs_alone(
        tmp_path, monkeypatch, app):
    """(The serial worker's side of it.) Its receiver is alone while its
    suspects' group runs, and no longer after."""
    from kale.worker import Worker
    from kale.worker.batch import Batch
    worker = Worker(queue_names=['default'], app=app, pool='serial')
    seen = []
    monkeypatch.setattr(worker, 'run_batch', lambda batch, parts_after=None: seen.append(
        worker.receiver.alone))
    monkeypatch.setattr(worker, 'settle', lambda batch: None)
    worker.settler = Settler(worker.consumer)
    queue = app.broker.queues['default']
    worker._run_alone([], Batch(queue, [], 0.0, app.broker.sqs_name(queue)))
    worker.settler.close()
    assert seen == [True] and worker.receiver.alone is False
