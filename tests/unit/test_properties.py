"""Properties over generated inputs: the queue lottery's fairness, and the
memory transport's FIFO group order. (Retry delays are in tests/unit/test_retry.py,
the records' newest-event-wins in tests/integration/test_records_driver.py, the decoder
in tests/test_hostile_bodies.py.)"""
import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kale import queue_selector
from kale.queue_config import TaskQueue
from kale.queue_selector import QueueInfo
from kale.transport import OutgoingMessage, VisibilityChange
from kale.transport.memory import MemoryTransport
from tests.support.clock import FakeClock

DRAWS = 3000


def make_queue(name, priority):
    return TaskQueue(name=name, priority=priority, batch_size=10, visibility_timeout_sec=30,
                     long_poll_time_sec=0, num_iterations=1)


queues_with_work = st.lists(st.tuples(st.integers(1, 100), st.booleans()), min_size=1,
                            max_size=6)


@settings(max_examples=60, deadline=None)
@given(queues=queues_with_work, seed=st.integers(0, 2 ** 32))
def test_the_reduced_lottery_shares_draws_by_priority_among_queues_with_work(queues, seed):
    """Each queue with work wins in proportion to its priority among the
    queues with work (within 5 standard deviations); a queue without work
    never wins while another has some; no queue with work is starved."""
    made = [make_queue('q%d' % i, priority) for i, (priority, _) in enumerate(queues)]
    working = {queue.name for queue, (_, has) in zip(made, queues, strict=True) if has}
    info = QueueInfo(made, lambda queue: queue.name in working)
    chosen = queue_selector.ReducedLottery(info, rng=random.Random(seed))
    wins = {queue.name: 0 for queue in made}
    for _ in range(DRAWS):
        wins[chosen.select().name] += 1
    pool = [queue for queue in made if queue.name in working] or made
    total = sum(queue_selector.tickets(queue) for queue in pool)
    for queue in made:
        if queue not in pool:
            assert wins[queue.name] == 0
            continue
        share = queue_selector.tickets(queue) / total
        spread = 5 * math.sqrt(share * (1 - share) / DRAWS) + 1 / DRAWS
        assert abs(wins[queue.name] / DRAWS - share) <= spread, (queue.name, share, wins)
        if share >= 0.01:
            assert wins[queue.name] > 0


operations = st.lists(st.one_of(
    st.tuples(st.just('send'), st.sampled_from('abc')),
    st.tuples(st.just('receive'), st.integers(1, 10)),
    st.tuples(st.just('delete'), st.integers(0, 9)),
    st.tuples(st.just('release'), st.integers(0, 9)),
    st.tuples(st.just('expire'), st.just(0)),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_a_fifo_queue_hands_out_each_group_in_send_order_one_turn_at_a_time(ops):
    """Whatever is sent, received, deleted, released or left to time out: a
    receive returns, for each group, only groups with nothing in flight, and
    of those the oldest messages not yet deleted, in the order they were sent."""
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    transport.ensure_queue('q.fifo', 30, None, 0)
    sent = {group: [] for group in 'abc'}       # bodies not yet deleted, in send order
    in_flight = {}                              # receipt handle -> (group, body)
    counter = 0
    for op, arg in ops:
        if op == 'send':
            counter += 1
            body = '%s%d' % (arg, counter)
            transport.send_batch('q.fifo', [OutgoingMessage(body, {}, 0, group_id=arg,
                                                            dedup_id=body)])
            sent[arg].append(body)
        elif op == 'receive':
            busy = {group for group, _ in in_flight.values()}
            got = transport.receive('q.fifo', arg, 0, 30)
            by_group = {}
            for message in got:
                by_group.setdefault(message.group_id, []).append(message.body)
                in_flight[message.receipt_handle] = (message.group_id, message.body)
            for group, bodies in by_group.items():
                assert group not in busy, 'a group was handed out while in flight'
                assert bodies == sent[group][:len(bodies)], 'out of send order'
        elif op in ('delete', 'release') and in_flight:
            handle = sorted(in_flight)[arg % len(in_flight)]
            group, body = in_flight.pop(handle)
            if op == 'delete':
                assert transport.delete_batch('q.fifo', [handle]) == []
                sent[group].remove(body)
            else:
                transport.change_visibility_batch('q.fifo', [VisibilityChange(handle, 0)])
                # Its whole group is visible again only once none of it is in flight.
        elif op == 'expire':
            clock.advance(31)
            in_flight.clear()
