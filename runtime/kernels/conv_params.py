"""A convolution's ``stride``/``padding``/``dilation`` argument as a pair of ints."""
from __future__ import annotations

from typing import Optional


def int_pair(value) -> Optional[tuple]:
    """``(a, b)`` for an int or a 2-sequence of ints; None for anything else (a string
    padding, a symbolic size, another length)."""
    if type(value) is int:
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and \
            all(type(v) is int for v in value):
        return tuple(value)
    return None
