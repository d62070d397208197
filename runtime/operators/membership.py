"""``a in b`` / ``a not in b`` in converted code: ``tg.contains(a, b, negate)``.

Eagerly ``x in t`` of a tensor ``t`` is ``Tensor.__contains__``: ``(x == t).any().item()``,
a Python bool. In a trace the bool is known only when the graph runs, and Python's ``in``
would ask for it at once (it makes ``__contains__``'s answer a bool). Of a traced tensor,
``contains`` is that ``any()`` as a stand-in for the bool (``if x in t:`` becomes a
``cond``); of anything else it is Python's ``in``.
"""
from __future__ import annotations

import numbers

import torch

from ..introspection import mark
from ..symbolic import is_symbolic


def contains(element, container, negate: bool = False):
    if isinstance(container, torch.Tensor) and is_symbolic(container):
        if not isinstance(element, (torch.Tensor, numbers.Number)):
            raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you "
                               f"passed in a {type(element)}.")
        found = (element == container).any()
        if negate:
            found = torch.logical_not(found)
        mark(found, "bool")
        return found
    found = element in container
    return not found if negate else found
