"""Static facts about a value in a graph: shape (with dynamic dimensions) and dtype.

A dimension is an ``int`` when it is known when the graph is built and ``None`` when it
is only known when the graph runs (``nonzero``, a branch-dependent shape, a list grown
in a loop). ``shape=None`` means even the rank is unknown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128",
}

Shape = Optional[Tuple[Optional[int], ...]]


def dtype_short(dtype: torch.dtype) -> str:
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def shape_text(shape: Shape) -> str:
    if shape is None:
        return "[*]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of one tensor value."""

    shape: Shape
    dtype: torch.dtype

    def __str__(self) -> str:
        return dtype_short(self.dtype) + shape_text(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    @staticmethod
    def of(t: torch.Tensor) -> "TensorMeta":
        return TensorMeta(tuple(int(d) for d in t.shape), t.dtype)

    def join(self, other: "TensorMeta") -> "TensorMeta":
        """The least general meta covering both (dtype must agree): differing dims -> None."""
        assert self.dtype == other.dtype
        if self.shape is None or other.shape is None or len(self.shape) != len(other.shape):
            return TensorMeta(None, self.dtype)
        dims = tuple(a if a == b else None for a, b in zip(self.shape, other.shape))
        return TensorMeta(dims, self.dtype)


def meta_text(meta) -> str:
    """Text of a node's meta: a TensorMeta, a tuple of them (multi-output), or None."""
    if meta is None:
        return "()"
    if isinstance(meta, tuple):
        if len(meta) > 4 and all(m == meta[0] for m in meta):
            return f"({meta_text(meta[0])} x{len(meta)})"
        return "(" + ", ".join(meta_text(m) for m in meta) + ")"
    return str(meta)


def meta_empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """A meta tensor (no data) of this shape, never recorded into a graph being traced."""
    with torch._C.DisableTorchFunction():
        return torch.empty(tuple(shape), dtype=dtype, device="meta")
