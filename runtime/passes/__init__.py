"""Optimizer passes (``Graph -> Graph``, one module each) and the pass manager.

    fold        small pure computations on literals and factories -> constants
    fold_cond   cond on a folded predicate -> the taken branch, inlined
    simplify    algebraic identities, a rule table (x*1 -> x, -(-x) -> x, x**2 -> x*x...)
    cse         repeated pure computations -> one
    dce         nodes nothing needs -> gone (and unused subgraph captures)
    licm        loop-invariant nodes of while bodies -> before the loop
    open_attention  multi_head_attention_forward (self-attention) -> linear, sdpa, linear
    patch_conv  conv2d over non-overlapping patches (stride == kernel) -> one GEMM
    fuse_patterns  matmul+add -> addmm/linear, conv+bias(+relu), x*sigmoid(x) -> silu...
    fuse_elementwise, plan_memory  run last

``optimize(graph)`` runs them all on a copy (see ``manager``); the facts that keep them
correct around mutation, aliasing, outputs and grad mode live in ``rewrite``.
"""
from __future__ import annotations

from .cse import cse
from .dce import dce
from .fold import fold
from .fold_cond import fold_cond
from .fuse_elementwise import fuse_elementwise
from .licm import licm
from .manager import CLEANUP, PASSES, optimize, run_pass, to_fixed_point
from .patterns import fuse_patterns
from .plan_memory import plan_memory
from .simplify import simplify

__all__ = ["optimize", "PASSES", "CLEANUP", "run_pass", "to_fixed_point", "fold",
           "fold_cond", "simplify", "cse", "dce", "licm", "fuse_patterns",
           "fuse_elementwise", "plan_memory"]
