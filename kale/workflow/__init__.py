"""Workflows: tasks arranged into a flow whose results go downstream.

Build a flow from nodes (``MyTask.s(...)``) with :func:`chain`,
:func:`group` and :func:`chord`, and pass one node's result to another with
:func:`ref`. :class:`~kale.workflow.graph.Graph` turns a flow into its nodes
and edges, refusing one that cannot run; :func:`submit` records and starts
it (state in the task records, ``RECORDS_URL``), with every part its
references reach, and returns a :class:`Workflow` to follow; :func:`retry`
runs a failed or cancelled one again. :func:`map` makes a group of one node
per item.
"""
from kale.signature import Signature
from kale.workflow.flow import Chain, Group, Ref, chain, chord, group, map, ref
from kale.workflow.graph import Graph, Node, Upstream, UpstreamList
from kale.workflow.run import Workflow, cancel, get, list_workflows, retry, submit

__all__ = ['Chain', 'Graph', 'Group', 'Node', 'Ref', 'Signature', 'Upstream', 'UpstreamList',
           'Workflow', 'cancel', 'chain', 'chord', 'get', 'group', 'list_workflows', 'map', 'ref',
           'retry', 'submit']
