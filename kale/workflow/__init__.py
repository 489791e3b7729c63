"""Workflows: tasks arranged into a flow whose results go downstream.

Build a flow from nodes (``MyTask.s(...)``) with :func:`chain`,
:func:`group` and :func:`chord`, and pass one node's result to another with
:func:`ref`. :class:`~kale.workflow.graph.Graph` turns a flow into its nodes
and edges, refusing one that cannot run.
"""
from kale.signature import Signature
from kale.workflow.flow import Chain, Group, Ref, chain, chord, group, ref
from kale.workflow.graph import Graph, Node, Upstream, UpstreamList

__all__ = ['Chain', 'Graph', 'Group', 'Node', 'Ref', 'Signature', 'Upstream', 'UpstreamList',
           'chain', 'chord', 'group', 'ref']
