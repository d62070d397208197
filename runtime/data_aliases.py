"""``p.data`` of a real tensor while tracing: read again on every run.

``p.data`` is a fresh alias of ``p``'s storage each time eager asks. The trace answers it
for real (Python code may read its values, an in-place write through it is noted as a
write to ``p``, ``trace_reads``), but a graph holding that alias as a constant would keep
the storage ``p`` had while tracing: after ``p.data = new`` (MoCo's momentum update,
``vector_to_parameters``), in this call or any other, later runs would read the old one.
So where the alias enters the graph it is a ``tensor_data`` node of the constant ``p``
(``p.data`` when the graph runs), impure so that no pass folds it back into a constant
or moves it across a write. ``note`` (the trace's ``.data`` read) remembers which real
tensor each alias came from; ``node_of`` (a graph taking a real tensor as an input)
makes the node, once per graph.
"""
from __future__ import annotations

from . import grad_flags
from .meta import TensorMeta

_ALIASES = "_data_aliases"     # root graph __dict__: id(alias) -> (alias, owner)
_NODES = "_data_nodes"         # graph __dict__: id(alias) -> its tensor_data node


def tensor_data(t):
    """``t.data`` when the graph runs."""
    return t.data


tensor_data._tograph_impure = True


def note(graph, owner, alias) -> None:
    """The trace read ``owner.data`` and got ``alias`` (a real tensor)."""
    graph.root.__dict__.setdefault(_ALIASES, {})[id(alias)] = (alias, owner)


def node_of(graph, value):
    """The ``tensor_data`` node standing for ``value`` in ``graph`` when ``value`` is an
    alias ``note`` saw, else None."""
    entry = graph.root.__dict__.get(_ALIASES, {}).get(id(value))
    if entry is None or entry[0] is not value:
        return None
    nodes = graph.__dict__.setdefault(_NODES, {})
    node = nodes.get(id(value))
    if node is None:
        node = graph.add_node("tensor_data", tensor_data, (graph.constant(entry[1]),), {},
                              meta=TensorMeta.of(value), impure=True)
        node.attrs[grad_flags.KEY] = False
        nodes[id(value)] = node
    return node
