"""Memory planning (placeholder until the planner lands)."""
from __future__ import annotations

from ..graph import Graph


def plan_memory(graph: Graph) -> Graph:
    return graph
