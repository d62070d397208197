"""The backward of a row program (``rows.py``) as another row program: reverse mode.

``plan(spec, needs, whole)`` is ``pointwise_backward.plan`` for kernels that reduce along
the last dimension (``whole``: over the whole tensor, one row): the same ``BackwardPlan``,
the same per-op rules (``pointwise.derivative``), the same choice of saving the group's
inputs and recomputing the rest. What rows add:

* every value is a vec value (one per element) or a row value (one per row: a reduction,
  a per-row input, math on those); a share of the gradient is a vec value when the step it
  comes from is, else a row value;
* a reduction passes its row gradient ``g`` to its operand ``x`` as torch's backward does:
  ``sum``: ``g`` (expanded); ``mean``: ``g / inner``; ``amax``/``amin`` along the last
  dim: ``(g / count) * (x == out)`` with ``count`` the row's ties (torch's
  ``scale_grad_by_count``: a NaN row gets NaN). Whole-tensor ``amax``/``amin`` have no
  plan: ``torch.max(x)`` spreads its gradient over NaNs instead, and the spec does not say
  which op it was;
* the gradient of a row value is the sum of its row shares and, each reduced over the row
  apart (as autograd reduces each broadcast use apart: ``sum_to_size``), of its vec shares;
* a per-row input's gradient is a row output, a per-element one's a vec output (a row
  gradient broadcast); the caller sums each to its input's shape (``sum_to_size``).

The backward kernel reads the forward's inputs it needs, then the incoming gradients:
``full`` for vec outputs, per row (``outer``; ``scalar`` when ``whole``) for row outputs.
For a softmax written out (``amax``, ``sub``, ``exp``, ``sum``, ``div``) that is one C call
of five loops over each row: the maximum and the sum again, ``sum(dy * e)``, the maximum's
(tiny) share, then ``dx``; for an RMSNorm, three loops. Torch-free, cached like the
elementwise plans.
"""
from __future__ import annotations

import functools
from typing import Dict, List, Optional, Tuple

from .codegen import KernelSpec, Operand, Step
from .pointwise import NONDIFF, derivative
from .pointwise_backward import BackwardPlan, depends, prune

_ADD = "({0} + {1})"
_SHARE = {"sum": None, "mean": "({0} / (T)inner)"}      # row share of the operand


class _Steps:
    """The backward's steps: the forward's, then new ones, each known as vec or row."""

    def __init__(self, spec: KernelSpec):
        self.steps: List[Step] = list(spec.steps)
        self.row: List[bool] = [bool(s.reduce or s.row) for s in spec.steps]
        # inputs: the forward's, then the incoming gradient of each forward output
        self.row_input = [mode in ("outer", "scalar") for _, mode in spec.inputs] + \
            list(spec.output_rows)

    def is_row(self, op: Operand) -> bool:
        if op.kind == "in":
            return self.row_input[op.value]
        return op.kind == "c" or self.row[op.value]

    def add(self, template: str, operands, reduce: str = "", vec: bool = False) -> Operand:
        """A new step; a row step when every operand is per row (and ``vec`` is off)."""
        row = not reduce and not vec and all(self.is_row(op) for op in operands)
        self.steps.append(Step(template, tuple(operands), reduce=reduce, row=row))
        self.row.append(bool(reduce) or row)
        return Operand("v", len(self.steps) - 1)

    def total(self, shares: List[Operand], row: bool) -> Operand:
        """The sum of ``shares``; when ``row``, each vec share is reduced over the row."""
        if row:
            shares = [s if self.is_row(s) else self.add("", (s,), reduce="dsum")
                      for s in shares]
        total = shares[0]
        for share in shares[1:]:
            total = self.add(_ADD, (total, share))
        return total


@functools.lru_cache(maxsize=4096)
def plan(spec: KernelSpec, needs: Tuple[bool, ...], whole: bool) -> Optional[BackwardPlan]:
    """The backward of row program ``spec`` for the inputs needing a gradient (``needs``);
    None when it cannot be generated (a gradient reaching a step without a rule)."""
    if not spec.rows or spec.gemm or len(needs) != len(spec.inputs):
        return None
    n_in = len(spec.inputs)
    rules = [None if step.reduce else derivative(step.template) for step in spec.steps]
    dep: List[bool] = []
    for step, rule in zip(spec.steps, rules):
        if step.reduce:
            dep.append(depends(step.operands[0], needs, dep))
        elif rule is None:
            dep.append(any(depends(op, needs, dep) for op in step.operands))
        else:
            dep.append(bool(rule) and any(d is not None and depends(op, needs, dep)
                                          for op, d in zip(step.operands, rule)))
    differentiable = tuple(dt != "bool" and dep[v] for v, dt in spec.outputs)

    b = _Steps(spec)
    to_value: Dict[int, List[Operand]] = {}
    to_input: Dict[int, List[Operand]] = {}
    for o, (v, _) in enumerate(spec.outputs):
        if differentiable[o]:
            to_value.setdefault(v, []).append(Operand("in", n_in + o))
    for k in reversed(range(len(spec.steps))):
        shares = to_value.get(k)
        if not shares:
            continue
        step = spec.steps[k]
        g = b.total(shares, b.row[k])
        if step.reduce:
            x = step.operands[0]
            if not depends(x, needs, dep):
                continue
            if step.reduce in _SHARE:
                share = g if _SHARE[step.reduce] is None else b.add(_SHARE[step.reduce], (g,))
            elif whole:
                return None                  # torch.max(x) or x.amax(): NaN rules differ
            else:                            # torch's scale_grad_by_count
                mask = b.add("((T)({0} == {1}))", (x, Operand("v", k)), vec=True)
                count = b.add("", (mask,), reduce="dsum")
                share = b.add("(({0} / {1}) * {2})", (g, count, mask), vec=True)
            (to_value if x.kind == "v" else to_input).setdefault(x.value, []).append(share)
            continue
        rule = rules[k]
        if rule is None or (rule != NONDIFF and len(rule) != len(step.operands)):
            return None                      # a gradient reaches a step with no rule
        if rule == NONDIFF:
            continue
        n = len(step.operands)
        vec = not b.row[k]       # a vec step's shares are per element, even when every
        for op, d in zip(step.operands, rule):      # operand is per row (a sum's gradient)
            if d is None or op.kind == "c" or not depends(op, needs, dep):
                continue
            if d.strip() == "{g}":
                share = b.add("({0})", (g,), vec=True) if vec and b.is_row(g) else g
            else:
                template = d.replace("{out}", "{%d}" % n).replace("{g}", "{%d}" % (n + 1))
                share = b.add(template, step.operands + (Operand("v", k), g), vec=vec)
            (to_value if op.kind == "v" else to_input).setdefault(op.value, []).append(share)

    sources: List[Optional[Tuple[str, int]]] = []
    outputs: List[int] = []
    for i, (_, mode) in enumerate(spec.inputs):
        shares = to_input.get(i)
        if not needs[i] or not shares:
            sources.append(None)
            continue
        row = mode in ("outer", "scalar")
        g = b.total(shares, row)
        if g.kind == "in" and b.is_row(g) == row:          # an incoming gradient, as is
            sources.append(("g", g.value - n_in))
            continue
        if not row and b.is_row(g):                        # a row gradient, broadcast
            g = b.add("({0})", (g,), vec=True)
        sources.append(("k", len(outputs)))
        outputs.append(g.value)
    if not outputs:
        return BackwardPlan(None, (), (), tuple(sources), differentiable)
    row_mode = "scalar" if whole else "outer"
    kernel, saved, grads = prune(spec, b.steps, outputs, n_in,
                                 lambda i: row_mode if b.row_input[i] else "full")
    return BackwardPlan(kernel, saved, grads, tuple(sources), differentiable)
