"""Elementwise fusion (placeholder until the fused-kernel pass lands)."""
from __future__ import annotations

from ..graph import Graph


def fuse_elementwise(graph: Graph) -> Graph:
    return graph
