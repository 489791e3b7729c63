"""Building a flow: nodes, chains, groups, chords and references become nodes
and edges; a flow that cannot run is refused in one line before anything is
written."""
import itertools
import re

import pytest

from kale import workflow
from kale.conf import settings
from kale.exceptions import InvalidFlowError
from kale.workflow.graph import Graph, Upstream, UpstreamList, resolve
from tests import tasks


def test_a_signature_is_a_node_with_its_own_id_and_nothing_is_sent(memory_broker):
    node = tasks.AddTask.s(1, 2)
    other = tasks.AddTask.s(1, 2)
    assert (node.task_class, node.args, node.kwargs) == (tasks.AddTask, (1, 2), {})
    assert len(node.task_id) == 32 and node.task_id != other.task_id
    queue = memory_broker.queues['default']
    assert memory_broker.counts(queue).total == 0


def test_a_diamond_joins_both_results():
    a = tasks.AddTask.s(1, 2)
    b, c = tasks.AddTask.s(workflow.ref(a), 10), tasks.AddTask.s(workflow.ref(a), 20)
    d = tasks.AddTask.s(workflow.ref(b), b=workflow.ref(c))
    graph = Graph.build(workflow.group(d, b, c, a), settings.config)
    assert list(graph.nodes) == [a.task_id, b.task_id, c.task_id, d.task_id]   # upstream first
    assert [n.task_id for n in graph.roots()] == [a.task_id]
    joined = graph.nodes[d.task_id]
    assert joined.upstream == (b.task_id, c.task_id)
    assert joined.args == (Upstream(b.task_id),) and joined.kwargs == {'b': Upstream(c.task_id)}
    assert sorted(graph.nodes[a.task_id].downstream) == sorted([b.task_id, c.task_id])
    assert resolve((joined.args, joined.kwargs), {b.task_id: 13, c.task_id: 23}) == \
        ((13,), {'b': 23})


def test_a_chain_puts_each_result_before_the_next_nodes_arguments():
    links = [tasks.AddTask.s(1, 1)] + [tasks.AddTask.s(1) for _ in range(9)]
    graph = Graph.build(workflow.chain(*links), settings.config)
    assert list(graph.nodes) == [s.task_id for s in links]
    for earlier, later in itertools.pairwise(links):
        assert graph.nodes[later.task_id].args == (Upstream(earlier.task_id), 1)
    assert graph.result == Upstream(links[-1].task_id)


def test_a_chord_gives_its_callback_the_groups_results_in_order():
    parts = [tasks.AddTask.s(i, i) for i in range(3)]
    callback = tasks.EchoTask.s('total')
    graph = Graph.build(workflow.chord(workflow.group(*parts), callback), settings.config)
    [first] = graph.nodes[callback.task_id].args[:1]
    assert first == UpstreamList(tuple(Upstream(p.task_id) for p in parts))
    assert resolve(graph.nodes[callback.task_id].args,
                   {p.task_id: n * 2 for n, p in enumerate(parts)}) == ([0, 2, 4], 'total')


def test_groups_and_chains_nest_and_a_group_result_is_a_list():
    a, b, c = tasks.AddTask.s(1, 1), tasks.AddTask.s(2), tasks.AddTask.s(3)
    inner = workflow.chain(a, workflow.group(b, c))         # a's result goes to b and c
    graph = Graph.build(inner, settings.config)
    assert graph.nodes[b.task_id].args == (Upstream(a.task_id), 2)
    assert graph.nodes[c.task_id].args == (Upstream(a.task_id), 3)
    assert graph.result == UpstreamList((Upstream(b.task_id), Upstream(c.task_id)))


def test_a_reference_may_sit_inside_a_list_or_a_dict():
    a = tasks.AddTask.s(1, 1)
    echo = tasks.EchoTask.s([1, workflow.ref(a)], opts={'n': workflow.ref(a)})
    graph = Graph.build(workflow.group(a, echo), settings.config)
    node = graph.nodes[echo.task_id]
    assert node.upstream == (a.task_id,)
    assert resolve((node.args, node.kwargs), {a.task_id: None}) == \
        (([1, None],), {'opts': {'n': None}})


def test_the_nodes_a_part_refers_to_are_placed_with_it_transitively_each_once():
    """Submitting d, which refers to b and c, which refer to a: all four."""
    a = tasks.AddTask.s(1, 2)
    b, c = tasks.AddTask.s(workflow.ref(a), 10), tasks.AddTask.s(workflow.ref(a), 20)
    d = tasks.EchoTask.s(workflow.ref(b), [workflow.ref(c)])
    graph = Graph.build(d, settings.config)
    assert list(graph.nodes) == [a.task_id, b.task_id, c.task_id, d.task_id]   # upstream first
    assert [n.task_id for n in graph.roots()] == [a.task_id]
    assert graph.nodes[d.task_id].upstream == (b.task_id, c.task_id)
    assert graph.nodes[b.task_id].upstream == graph.nodes[c.task_id].upstream == (a.task_id,)
    assert sorted(graph.nodes[a.task_id].downstream) == sorted([b.task_id, c.task_id])
    assert graph.result == Upstream(d.task_id)                # the part submitted gives it


def test_a_referenced_chain_or_group_outside_the_flow_comes_whole():
    first, second = tasks.AddTask.s(1, 1), tasks.AddTask.s(1)
    left, right = tasks.AddTask.s(1, 1), tasks.AddTask.s(2, 2)
    pipeline, fan = workflow.chain(first, second), workflow.group(left, right)
    last = tasks.EchoTask.s(workflow.ref(pipeline), fan=workflow.ref(fan))
    graph = Graph.build(workflow.chain(tasks.AddTask.s(0, 0), last), settings.config)
    assert set(graph.nodes) >= {first.task_id, second.task_id, left.task_id, right.task_id}
    assert graph.nodes[second.task_id].args == (Upstream(first.task_id), 1)   # its chain kept
    assert graph.nodes[last.task_id].kwargs == {
        'fan': UpstreamList((Upstream(left.task_id), Upstream(right.task_id)))}
    assert len(graph) == 6


def test_a_part_inside_the_flow_that_is_referenced_is_not_placed_again():
    a = tasks.AddTask.s(1, 2)
    b = tasks.AddTask.s(workflow.ref(a), 1)
    graph = Graph.build(workflow.group(b, a), settings.config)
    assert list(graph.nodes) == [a.task_id, b.task_id]
    assert graph.result == UpstreamList((Upstream(b.task_id), Upstream(a.task_id)))


def test_a_cycle_is_refused():
    b = tasks.AddTask.s(1)
    a = tasks.AddTask.s(workflow.ref(b), 1)
    with pytest.raises(InvalidFlowError, match=r'^workflow: the flow has a cycle through node '):
        Graph.build(workflow.chain(a, b), settings.config)       # b after a, and a needs b


@pytest.mark.parametrize('size', [1, 3])
def test_a_cycle_made_of_references_alone_is_refused_in_one_line(size):
    """A node whose arguments (a list filled in afterwards) refer, through
    the nodes its references reach, back to itself."""
    later: list = []
    first = tasks.EchoTask.s(later)
    nodes = [first]
    for _ in range(size - 1):
        nodes.append(tasks.EchoTask.s(workflow.ref(nodes[-1])))
    later.append(workflow.ref(nodes[-1]))
    with pytest.raises(InvalidFlowError) as refused:
        Graph.build(nodes[-1], settings.config)
    assert re.fullmatch(r'workflow: the flow has a cycle through node [0-9a-f]{32} '
                        r'\(tests\.tasks\.EchoTask\)', str(refused.value))


def test_a_node_placed_twice_is_refused():
    a = tasks.AddTask.s(1, 1)
    with pytest.raises(InvalidFlowError, match=r'is placed twice in the flow; make another '
                                               r'with \.s\(\)$'):
        Graph.build(workflow.group(a, a), settings.config)


def test_arguments_that_do_not_bind_are_refused_with_the_upstream_result_counted():
    a = tasks.AddTask.s(1, 1)
    b = tasks.AddTask.s(1, 2)            # with a's result first: three positional arguments
    with pytest.raises(InvalidFlowError, match=r'^workflow: node %s: task tests\.tasks\.AddTask: '
                                               r'arguments do not match run_task\(a, b, '
                                               r'\*\*kwargs\): too many' % b.task_id):
        Graph.build(workflow.chain(a, b), settings.config)


@pytest.mark.parametrize('build, message', [
    (lambda: workflow.chain(), r'^workflow\.chain\(\) needs at least one part$'),
    (lambda: workflow.group(tasks.AddTask.s(1, 1), 'x'),
     r"^workflow\.group\(\) takes nodes \(MyTask\.s\(\.\.\.\)\), chains and groups, got 'x'$"),
    (lambda: workflow.chord(tasks.AddTask.s(1, 1), tasks.AddTask.s(1, 1)),
     r'^workflow\.chord\(\) takes a group first'),
    (lambda: workflow.ref(42), r'^workflow\.ref\(\) takes a node'),
])
def test_bad_building_blocks_are_refused_in_one_line(build, message):
    with pytest.raises(InvalidFlowError, match=message):
        build()


# --- workflow.map -----------------------------------------------------------------------------

def test_map_is_a_group_of_one_node_per_item_each_item_one_argument():
    items = [1, (2, 3), {'k': 4}]
    mapped = workflow.map(tasks.EchoTask, items)
    assert isinstance(mapped, workflow.Group)
    assert [(node.task_class, node.args, node.kwargs) for node in mapped.parts] == \
        [(tasks.EchoTask, (item,), {}) for item in items]          # a tuple is not unpacked
    graph = Graph.build(mapped, settings.config)
    assert graph.result == UpstreamList(tuple(Upstream(node.task_id) for node in mapped.parts))


def test_map_takes_any_iterable_and_a_placement():
    mapped = workflow.map(tasks.AddTask.with_options(queue='high'), (n for n in range(3)))
    assert [(node.args, node.queue) for node in mapped.parts] == \
        [((0,), 'high'), ((1,), 'high'), ((2,), 'high')]


def test_map_is_a_chords_header_and_its_items_may_hold_references():
    seed = tasks.AddTask.s(1, 1)
    mapped = workflow.map(tasks.EchoTask, [workflow.ref(seed), 5])
    callback = tasks.EchoTask.s('total')
    graph = Graph.build(workflow.chord(mapped, callback), settings.config)
    members = [node.task_id for node in mapped.parts]
    assert graph.nodes[callback.task_id].args == (
        UpstreamList(tuple(Upstream(member) for member in members)), 'total')
    assert graph.nodes[members[0]].upstream == (seed.task_id,)      # reached by its reference
    assert len(graph) == 4


def test_map_after_a_chain_link_gets_its_result_first_as_a_group_does():
    first = tasks.AddTask.s(1, 1)
    mapped = workflow.map(tasks.AddTask, [10, 20])
    graph = Graph.build(workflow.chain(first, mapped), settings.config)
    assert [graph.nodes[node.task_id].args for node in mapped.parts] == \
        [(Upstream(first.task_id), 10), (Upstream(first.task_id), 20)]


@pytest.mark.parametrize('build, message', [
    (lambda: workflow.map(tasks.AddTask, []), r'^workflow\.map\(\) needs at least one item, '
                                              r'got none$'),
    (lambda: workflow.map(tasks.AddTask, 5), r'^workflow\.map\(\) takes an iterable of items, '
                                             r'one per node, got 5$'),
    (lambda: workflow.map(tasks.AddTask.s(1, 1), [1]), r'^workflow\.map\(\) takes a task class '
                                                       r'\(or MyTask\.with_options\(\.\.\.\)\) '
                                                       r'first, got <Signature'),
    (lambda: workflow.map('tests.tasks.AddTask', [1]), r'^workflow\.map\(\) takes a task class'),
])
def test_map_refuses_no_items_and_what_is_not_a_task_in_one_line(build, message):
    with pytest.raises(InvalidFlowError, match=message):
        build()
