"""A flow as nodes and edges, checked before anything is written
(docs/explanation/internals-workflow.md, "The graph")."""
from __future__ import annotations

import dataclasses
import graphlib
import time
from typing import Any, Callable, Mapping, Optional, Union

from kale.config import Config
from kale.delays import check_wait
from kale.exceptions import InvalidFlowError, PublishError
from kale.publisher import check_arguments
from kale.signature import Signature
from kale.workflow.flow import Chain, Part, Ref


@dataclasses.dataclass(frozen=True)
class Upstream:
    """The result of the node ``task_id``."""

    task_id: str


@dataclasses.dataclass(frozen=True)
class UpstreamList:
    """The results of a group's parts, in order."""

    items: tuple['Output', ...]


#: What a part of a flow gives its downstream.
Output = Union[Upstream, UpstreamList]


@dataclasses.dataclass
class Node:
    """One task of the flow: its arguments (with upstream results standing
    as :class:`Upstream`/:class:`UpstreamList`) and its edges."""

    task_id: str
    task_class: type
    queue: Optional[str]
    args: tuple
    kwargs: dict[str, Any]
    #: The nodes whose results it needs, in the order they first appear.
    upstream: tuple[str, ...] = ()
    #: The nodes that need its result.
    downstream: list[str] = dataclasses.field(default_factory=list)
    #: Its run delayed (``Signature.set``): ``{'delay_sec': seconds}`` or
    #: ``{'eta': epoch seconds}``, kept with its call; empty for none.
    wait: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.task_class.task_path())  # type: ignore[attr-defined]

    def describe(self) -> str:
        return 'node %s (%s)' % (self.task_id, self.name)


class Graph:
    """The nodes of a flow in an order where each comes after its upstream,
    and the flow's own result (the last part of a chain, a group's list)."""

    def __init__(self, nodes: list[Node], result: Output):
        self.nodes = {node.task_id: node for node in nodes}
        self.result = result

    @classmethod
    def build(cls, flow: Part, config: Config) -> 'Graph':
        """Place and check every node of ``flow`` (InvalidFlowError, one
        line), its arguments as ``config`` (its app's) says."""
        builder = _Builder(config)
        result = builder.place(flow, None)
        builder.place_referenced()
        return cls(builder.finish(), result)

    def roots(self) -> list[Node]:
        """The nodes with no upstream: they are queued at once."""
        return [node for node in self.nodes.values() if not node.upstream]

    def __len__(self) -> int:
        return len(self.nodes)


class _Builder:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.signatures: dict[str, Signature] = {}
        self.prepended: dict[str, Optional[Output]] = {}
        self.outputs: dict[int, Output] = {}          # id(part) -> what it gives

    def place(self, part: Part, before: Optional[Output]) -> Output:
        """Place ``part`` with ``before`` (the previous link's output) put
        first in its nodes' arguments; returns what the part gives."""
        if isinstance(part, Signature):
            if part.task_id in self.signatures:
                raise InvalidFlowError('workflow: node %s (%s) is placed twice in the flow; '
                                       'make another with .s()' % (part.task_id, part.name))
            self.signatures[part.task_id] = part
            self.prepended[part.task_id] = before
            output: Output = Upstream(part.task_id)
        elif isinstance(part, Chain):
            output = self.place(part.parts[0], before)
            for link in part.parts[1:]:
                output = self.place(link, output)
        else:
            output = UpstreamList(tuple(self.place(member, before) for member in part.parts))
        self.outputs[id(part)] = output
        return output

    def finish(self) -> list[Node]:
        nodes = {}
        for task_id, signature in self.signatures.items():
            args = tuple(self._template(value) for value in signature.args)
            if self.prepended[task_id] is not None:
                args = (self.prepended[task_id],) + args
            kwargs = {key: self._template(value) for key, value in signature.kwargs.items()}
            upstream = tuple(dict.fromkeys(up.task_id for up in _collect((args, kwargs), Upstream)))
            try:
                nodes[task_id] = Node(task_id, signature.task_class, signature.queue, args, kwargs,
                                      upstream, wait=_wait_of(signature))
                check_arguments(signature.task_class, args, kwargs, self.config)
            except PublishError as exc:
                raise InvalidFlowError('workflow: node %s: %s' % (task_id, exc)) from None
        for node in nodes.values():
            for upstream_id in node.upstream:
                nodes[upstream_id].downstream.append(node.task_id)
        return _in_order(nodes)

    def place_referenced(self) -> None:
        """Place, beside the flow, each part a placed node refers to that is
        not placed yet (each once), then what the nodes placed so refer to."""
        seen = 0
        while seen < len(self.signatures):
            newly = list(self.signatures.values())[seen:]
            seen = len(self.signatures)
            for signature in newly:
                for found in _collect((signature.args, signature.kwargs), Ref):
                    if id(found.part) not in self.outputs:
                        self.place(found.part, None)

    def _template(self, value: Any) -> Any:
        """``value`` with each reference replaced by what its part gives."""
        return _walk(value, lambda item: self.outputs[id(item.part)] if isinstance(item, Ref)
                     else _SAME)


#: What a ``replace`` of :func:`_walk` answers for an item it does not replace.
_SAME = object()


def _walk(value: Any, replace: Callable[[Any], Any] = lambda item: _SAME) -> Any:
    """``value`` with every item ``replace`` answers for replaced, at any
    depth of lists, tuples and dicts (copied: a namedtuple is left whole)."""
    found = replace(value)
    if found is not _SAME:
        return found
    if isinstance(value, list):
        return [_walk(item, replace) for item in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_walk(item, replace) for item in value)
    if isinstance(value, dict):
        return {key: _walk(item, replace) for key, item in value.items()}
    return value


def _collect(value: Any, kind: type) -> list[Any]:
    """The items of ``kind`` in ``value``, where :func:`_walk` looks and in groups' lists."""
    found: list[Any] = []

    def take(item: Any) -> Any:
        if isinstance(item, kind):
            found.append(item)
            return item
        return _walk(item.items, take) if isinstance(item, UpstreamList) else _SAME
    _walk(value, take)
    return found


def _wait_of(signature: Signature) -> dict[str, float]:
    """A node's delay (``Signature.set``), checked as publish checks one."""
    check_wait(signature.name, signature.delay_sec, signature.eta, time.time())
    if signature.eta is not None:
        return {'eta': signature.eta.timestamp()}
    return {'delay_sec': float(signature.delay_sec)} if signature.delay_sec else {}


def _in_order(nodes: Mapping[str, Node]) -> list[Node]:
    """The nodes, each after all its upstream; a cycle is refused."""
    sorter = graphlib.TopologicalSorter({task_id: node.upstream for task_id, node in nodes.items()})
    try:
        return [nodes[task_id] for task_id in sorter.static_order()]
    except graphlib.CycleError as exc:
        raise InvalidFlowError('workflow: the flow has a cycle through %s'
                               % nodes[exc.args[1][0]].describe()) from None


def resolve(value: Any, results: Mapping[str, Any]) -> Any:
    """``value`` (a node's arguments) with each upstream result in its place."""
    def replace(item: Any) -> Any:
        if isinstance(item, Upstream):
            return _walk(results[item.task_id])
        if isinstance(item, UpstreamList):
            return [resolve(member, results) for member in item.items]
        return _SAME
    return _walk(value, replace)
