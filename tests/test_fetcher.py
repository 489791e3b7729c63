"""The fetcher: probes keep their batch; the idle watch answers at the first message."""
import threading
import time

from kale.events import Outcome, Settlement
from kale.queue_config import TaskQueue
from kale.transport import OutgoingMessage
from kale.worker.consumer import Consumer
from kale.worker.fetcher import MIN_POLL_INTERVAL_SEC, Fetcher
from kale.worker.prefetch import Prefetch
from kale.worker.settler import Settler


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
    fetcher = Fetcher(Consumer(memory_broker), [default], prefetch=fast(default))
    before = sum(memory_broker.transport.requests.values())
    assert fetcher.probe(default)
    batch = fetcher.take(default)
    assert [m.body for m in batch.messages] == ['a', 'b']
    assert sum(memory_broker.transport.requests.values()) - before == 1


def test_an_empty_probe_is_remembered_for_the_selection(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    fetcher = Fetcher(Consumer(memory_broker), [default])
    assert not fetcher.probe(default)
    assert fetcher.known_empty(default)
    fetcher.new_selection()
    assert not fetcher.known_empty(default)


def test_batches_probed_for_other_queues_run_next(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default')
    memory_broker.send(high, [OutgoingMessage('h')])
    memory_broker.send(default, [OutgoingMessage('d')])
    fetcher = Fetcher(Consumer(memory_broker), [high, default])
    assert fetcher.probe(default) and fetcher.probe(high)
    assert [m.body for m in fetcher.take(default).messages] == ['d']
    assert [m.body for m in fetcher.next_ready().messages] == ['h']
    assert fetcher.next_ready() is None


def test_the_watch_answers_as_soon_as_any_queue_gets_a_message(memory_broker):
    high, default, low = queues_of(memory_broker, 'high', 'default', 'low', long_poll=5)
    fetcher = Fetcher(Consumer(memory_broker), [high, default, low])
    threading.Timer(0.3, lambda: memory_broker.send(low, [OutgoingMessage('late')])).start()
    started = time.monotonic()
    assert fetcher.watch() is True
    assert time.monotonic() - started < 1.0
    assert [m.body for m in fetcher.next_ready().messages] == ['late']
    assert memory_broker.transport.requests['ReceiveMessage'] == 3
    fetcher.close()


def test_the_watch_returns_once_every_queue_answered_empty(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default', long_poll=0)
    fetcher = Fetcher(Consumer(memory_broker), [high, default])
    assert fetcher.watch() is False


def test_close_releases_batches_that_were_never_run(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    memory_broker.send(default, [OutgoingMessage('a')])
    fetcher = Fetcher(Consumer(memory_broker), [default])
    assert fetcher.probe(default)
    fetcher.close()
    assert memory_broker.counts(default).visible == 1


def test_the_settler_settles_in_order_in_the_background(memory_broker):
    [default] = queues_of(memory_broker, 'default')
    memory_broker.send(default, [OutgoingMessage(str(i)) for i in range(20)])
    consumer = Consumer(memory_broker)
    settler = Settler(consumer)
    batches = [consumer.fetch(default), consumer.fetch(default)]
    for batch in batches:
        batch.settlements = [Settlement(m, Outcome.SUCCEEDED) for m in batch.messages]
        settler.submit(batch)
    settler.flush()
    assert settler.completed() == batches
    assert memory_broker.counts(default).total == 0
    settler.close()


def test_the_watch_returns_soon_after_a_stop_request(memory_broker):
    high, = queues_of(memory_broker, 'high', long_poll=5)
    stopping = []
    fetcher = Fetcher(Consumer(memory_broker), [high], stopping=lambda: bool(stopping))
    threading.Timer(0.3, lambda: stopping.append(True)).start()
    started = time.monotonic()
    assert fetcher.watch() is False
    assert time.monotonic() - started < 0.6


def test_release_ready_gives_back_batches_not_yet_run(memory_broker):
    high, default = queues_of(memory_broker, 'high', 'default')
    memory_broker.send(high, [OutgoingMessage('h')])
    fetcher = Fetcher(Consumer(memory_broker), [high, default])
    assert fetcher.probe(high)
    fetcher.take(default)                       # high's batch now waits its turn
    fetcher.release_ready()
    assert fetcher.next_ready() is None
    assert memory_broker.counts(high).visible == 1


def with_long_poll(queue, seconds):
    return TaskQueue(**dict(queue.__dict__, long_poll_time_sec=seconds))


def test_a_queue_is_polled_again_as_soon_as_its_own_poll_answers(memory_broker):
    """A message on a queue with a short long poll starts at once, however long
    another queue's long poll is."""
    quick, slow = (with_long_poll(memory_broker.queues['high'], 1),
                   with_long_poll(memory_broker.queues['low'], 20))
    fetcher = Fetcher(Consumer(memory_broker), [quick, slow])
    polls = []
    memory_broker.transport.on_request = polls.append
    threading.Timer(1.6, lambda: memory_broker.send(quick, [OutgoingMessage('q')])).start()
    assert fetcher.watch(max_wait_sec=10) is True            # long before the 20 s poll ends
    assert [m.body for m in fetcher.next_ready().messages] == ['q']
    assert polls.count('ReceiveMessage') >= 3                 # quick polled twice, slow once
    assert 'low' in fetcher._polling                          # the 20 s poll is still out
    fetcher.close()


def test_a_queue_without_a_long_poll_is_not_polled_in_a_busy_loop(memory_broker):
    instant = with_long_poll(memory_broker.queues['default'], 0)
    fetcher = Fetcher(Consumer(memory_broker), [instant])
    polls = []
    memory_broker.transport.on_request = polls.append
    assert fetcher.watch(max_wait_sec=1.0) is False
    assert 2 <= polls.count('ReceiveMessage') <= 1.0 / 0.25 + 1
    fetcher.close()


def test_a_burst_watch_ends_once_every_queue_answered_empty(memory_broker):
    queues = [with_long_poll(memory_broker.queues[name], 0) for name in ('high', 'default')]
    fetcher = Fetcher(Consumer(memory_broker), queues)
    assert fetcher.watch(each_once=True, max_wait_sec=30) is False
    assert memory_broker.transport.requests['ReceiveMessage'] == 2
    fetcher.close()


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


def test_a_batch_read_ahead_is_held_to_its_own_budget(memory_broker):
    """The time a batch waited after it arrived counts against its visibility timeout."""
    queue = memory_broker.queues['default']
    memory_broker.send(queue, [OutgoingMessage(str(i)) for i in range(30)])
    consumer = Consumer(memory_broker)
    fetcher = Fetcher(consumer, [queue], read_ahead_above_sec=0.0, prefetch=fast(queue))
    first = fetcher.fetch(queue)
    assert len(fetcher._ahead['default']) == 2
    time.sleep(0.3)                                   # the first batch "runs"
    second = fetcher.fetch(queue)
    assert second.received_at <= first.received_at + 0.1     # it arrived while the first ran
    assert second.time_left(time.monotonic()) < queue.visibility_timeout_sec - 0.25
    fetcher.close()
    counts = memory_broker.counts(queue)
    assert (counts.in_flight, counts.visible) == (20, 10)    # what was read ahead went back


def test_a_queue_whose_poll_brought_work_is_polled_again_at_once(memory_broker):
    """Regression: a task published right after another on the same idle queue
    waited out the pause meant for queues that answer empty."""
    quick = with_long_poll(memory_broker.queues['high'], 20)
    fetcher = Fetcher(Consumer(memory_broker), [quick])
    threading.Timer(0.05, lambda: memory_broker.send(quick, [OutgoingMessage('1')])).start()
    assert fetcher.watch(max_wait_sec=5) is True
    fetcher.next_ready()
    threading.Timer(0.05, lambda: memory_broker.send(quick, [OutgoingMessage('2')])).start()
    started = time.monotonic()
    assert fetcher.watch(max_wait_sec=5) is True
    assert time.monotonic() - started < MIN_POLL_INTERVAL_SEC      # not held back
    fetcher.close()


def test_a_batch_that_arrives_while_a_task_runs_that_may_outlast_its_budget_is_given_back_at_once(
        memory_broker):
    [short] = queues_of(memory_broker, 'short', long_poll=0)     # a 4-second budget
    fetcher = Fetcher(Consumer(memory_broker), [short])
    fetcher.busy_until(time.monotonic() + 10)      # a task with a 10-second limit runs
    memory_broker.send(short, [OutgoingMessage('quick')])
    assert fetcher.watch(each_once=True) is False  # what it received went back
    assert fetcher.next_ready() is None
    [again] = memory_broker.receive(short)         # visible at once, not after 4 s
    assert again.body == 'quick'
    fetcher.close()


def test_batches_waiting_to_run_are_given_back_when_the_next_run_may_outlast_them(memory_broker):
    short, default = queues_of(memory_broker, 'short', 'default')
    memory_broker.send(short, [OutgoingMessage('s')])
    memory_broker.send(default, [OutgoingMessage('d')])
    fetcher = Fetcher(Consumer(memory_broker), [short, default])
    assert fetcher.probe(short) and fetcher.probe(default)
    fetcher.take(default)                      # the short queue's batch waits its turn
    fetcher.busy_until(time.monotonic() + 2)   # it outlasts a 2-second run: kept
    assert fetcher.has_ready()
    fetcher.busy_until(time.monotonic() + 10)  # not a 10-second one: given back
    assert not fetcher.has_ready()
    assert [m.body for m in memory_broker.receive(short)] == ['s']
    fetcher.close()


def test_once_the_task_ended_arriving_batches_are_kept_again(memory_broker):
    [short] = queues_of(memory_broker, 'short', long_poll=0)
    fetcher = Fetcher(Consumer(memory_broker), [short])
    fetcher.busy_until(time.monotonic() + 10)
    fetcher.busy_until(0.0)
    memory_broker.send(short, [OutgoingMessage('quick')])
    assert fetcher.watch(each_once=True) is True
    assert [m.body for m in fetcher.next_ready().messages] == ['quick']
    fetcher.close()
