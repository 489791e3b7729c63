"""The building blocks of a flow: nodes, chains, groups, chords, maps and
references; nothing here is sent (docs/explanation/internals-workflow.md, "The building blocks")."""
from __future__ import annotations

from typing import Any, Iterable, Union

from kale.exceptions import InvalidFlowError
from kale.signature import Signature
from kale.task import Task, TaskOptions


class _Parts:
    """Parts of a flow, arranged as the subclass says."""

    __slots__ = ('parts',)
    kind = ''

    def __init__(self, *parts: 'Part'):
        if not parts:
            raise InvalidFlowError('workflow.%s() needs at least one part' % self.kind)
        for part in parts:
            if not isinstance(part, (Signature, Chain, Group)):
                raise InvalidFlowError('workflow.%s() takes nodes (MyTask.s(...)), chains and '
                                       'groups, got %r' % (self.kind, part))
        self.parts = parts

    def __repr__(self) -> str:
        return '%s(%s)' % (self.kind, ', '.join(repr(part) for part in self.parts))


class Chain(_Parts):
    """Parts run one after another, each result passed to the next."""

    __slots__ = ()
    kind = 'chain'


class Group(_Parts):
    """Parts run side by side; their results, in order, are the group's."""

    __slots__ = ()
    kind = 'group'


#: What a flow is made of.
Part = Union[Signature, Chain, Group]


class Ref:
    """Stands, in a node's arguments, for the result of ``part``."""

    __slots__ = ('part',)

    def __init__(self, part: Part):
        if not isinstance(part, (Signature, Chain, Group)):
            raise InvalidFlowError('workflow.ref() takes a node (MyTask.s(...)), a chain or '
                                   'a group, got %r' % (part,))
        self.part = part

    def __repr__(self) -> str:
        return 'ref(%r)' % (self.part,)


def chain(*parts: Part) -> Chain:
    """``parts`` one after another, each one's result put first in the next
    one's positional arguments."""
    return Chain(*parts)


def group(*parts: Part) -> Group:
    """``parts`` side by side; as an input, the list of their results."""
    return Group(*parts)


def chord(header: Group, callback: Part) -> Chain:
    """The parts of ``header`` side by side, then ``callback`` with the list
    of their results as its first argument."""
    if not isinstance(header, Group):
        raise InvalidFlowError('workflow.chord() takes a group first, got %r' % (header,))
    return Chain(header, callback)


def ref(part: Part) -> Ref:
    """The result of ``part`` (a node, a chain's last result, a group's list),
    as an argument of another node. A part a flow refers to but does not
    hold is submitted with it (and, in turn, what its nodes refer to)."""
    return Ref(part)


def map(task: Union[type[Task], TaskOptions], items: Iterable[Any]) -> Group:
    """A group of one node per item of ``items``, each ``task.s(item)``: the
    item is the node's one positional argument, as given (a tuple is not
    unpacked; a reference in it works as in any argument). ``task`` is a
    task class or ``MyTask.with_options(...)``. Usable wherever a group is:
    ``chord(map(MyTask, items), Callback.s())``. No items is refused, as an
    empty group is."""
    if not (isinstance(task, TaskOptions) or (isinstance(task, type) and issubclass(task, Task))):
        raise InvalidFlowError('workflow.map() takes a task class (or MyTask.with_options(...)) '
                               'first, got %r' % (task,))
    try:
        each = iter(items)
    except TypeError:
        raise InvalidFlowError('workflow.map() takes an iterable of items, one per node, got %r'
                               % (items,)) from None
    nodes = [task.s(item) for item in each]
    if not nodes:
        raise InvalidFlowError('workflow.map() needs at least one item, got none')
    return Group(*nodes)
