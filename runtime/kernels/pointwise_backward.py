"""The backward of a fused elementwise kernel, as another kernel: reverse mode over its steps.

``plan(spec, needs)`` takes a forward ``KernelSpec`` (flat or outer x inner, no gemm, no
row steps) and which of its inputs need a gradient, and returns a ``BackwardPlan``: a
``KernelSpec`` that, in one pass per element, recomputes the forward values it needs from
the saved inputs and runs the chain rule backwards over the steps (each step's rule from
``pointwise.derivative``; shares reaching one value are summed), writing one gradient per
input over the whole iteration space (the caller sums it to the input's shape:
``sum_to_size``). It returns None when a step the gradient passes through has no rule (the
group then keeps its torch ops under autograd).

Saved for backward: the group's INPUTS the backward reads, never an intermediate. Cost
measure: an intermediate would be a fresh buffer of the full size per value (eager saves
one per nonlinear op), while the inputs are tensors the program holds anyway (parameters,
the previous layer's output, which its own backward usually saves too); recomputing costs
the forward's arithmetic again, a fraction of a memory pass even for exp/erf chains
(libmvec), so recomputation wins at these sizes and the memory saved is at most eager's.
Inputs that enter linearly only (``x + y``) are not saved at all; gradients that are
the incoming gradient itself (a sum, a residual) are passed on without a kernel.

Torch-free: plans are pure functions of the spec, cached by ``(spec, needs)``.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple

from .codegen import KernelSpec, Operand, Step
from .pointwise import NONDIFF, derivative

# C helpers for derivatives too long for one line of the table (torch's formulas)
MACROS = r"""
#define m_silu_grad(x) ((T)1 / ((T)1 + m_exp(-(x))) * ((T)1 + (x) * ((T)1 - (T)1 / ((T)1 + m_exp(-(x))))))
#define m_mish_grad(x) (m_tanh(m_log1p(m_exp(x))) + (x) * ((T)1 / ((T)1 + m_exp(-(x)))) * \
    ((T)1 - m_tanh(m_log1p(m_exp(x))) * m_tanh(m_log1p(m_exp(x)))))
#define m_gelu_grad(x) ((T)0.5 * ((T)1 + m_erf((x) * (T)0.70710678118654752440)) + \
    (x) * m_exp((T)-0.5 * (x) * (x)) * (T)0.39894228040143267794)
#define m_gelu_tanh_inner(x) m_tanh((T)0.79788456080286535588 * ((x) + (T)0.044715 * (x) * (x) * (x)))
#define m_gelu_tanh_grad(x) ((T)0.5 * ((T)1 + m_gelu_tanh_inner(x)) + (T)0.5 * (x) * \
    ((T)1 - m_gelu_tanh_inner(x) * m_gelu_tanh_inner(x)) * \
    ((T)0.79788456080286535588 * ((T)1 + (T)3 * (T)0.044715 * (x) * (x))))
#define m_softplus_grad(x, b, t) ((x) * (b) > (t) ? (T)1 : \
    m_exp((x) * (b)) / (m_exp((x) * (b)) + (T)1))
"""

_ADD = "({0} + {1})"


@dataclass(frozen=True)
class BackwardPlan:
    """How to get a fused group's input gradients.

    kernel:  the backward ``KernelSpec`` (None when every gradient is an incoming one as
             is); its inputs are the forward inputs ``saved`` (in that order, modes as in
             the forward) then the incoming gradients of the outputs ``grads`` (full)
    saved:   forward input indices the kernel reads (what the forward saves)
    grads:   forward output indices whose incoming gradient the kernel reads
    sources: per forward input: None (no gradient), ("k", j) the kernel's output j, or
             ("g", o) the incoming gradient of output o as is
    differentiable: per forward output: whether it carries a gradient (as eager's
             ``requires_grad``: some input needing one reaches it through differentiable
             steps)
    """

    kernel: Optional[KernelSpec]
    saved: Tuple[int, ...]
    grads: Tuple[int, ...]
    sources: Tuple[Optional[Tuple[str, int]], ...]
    differentiable: Tuple[bool, ...]


@functools.lru_cache(maxsize=4096)
def plan(spec: KernelSpec, needs: Tuple[bool, ...]) -> Optional[BackwardPlan]:
    """The backward of ``spec`` for inputs needing a gradient where ``needs``; None when it
    cannot be generated (a row or gemm kernel, a step without a derivative rule)."""
    if spec.rows or spec.gemm or len(needs) != len(spec.inputs):
        return None
    n_steps = len(spec.steps)
    rules = [derivative(step.template) for step in spec.steps]
    # which values depend differentiably on an input needing a gradient
    dep: List[bool] = []
    for step, rule in zip(spec.steps, rules):
        dep.append(bool(rule) and any(
            d is not None and depends(op, needs, dep)
            for op, d in zip(step.operands, rule)) if rule is not None else
            any(depends(op, needs, dep) for op in step.operands))
    differentiable = tuple(dt != "bool" and dep[v] for v, dt in spec.outputs)

    steps: List[Step] = list(spec.steps)           # the forward, recomputed
    grad_in = len(spec.inputs)                     # incoming gradients follow the inputs
    to_value: Dict[int, List[Operand]] = {}
    to_input: Dict[int, List[Operand]] = {}
    for o, (v, _) in enumerate(spec.outputs):
        if differentiable[o]:
            to_value.setdefault(v, []).append(Operand("in", grad_in + o))
    for k in reversed(range(n_steps)):
        shares = to_value.get(k)
        if not shares:
            continue
        rule = rules[k]
        if rule is None or (rule != NONDIFF and len(rule) != len(spec.steps[k].operands)):
            return None                           # a gradient reaches a step with no rule
        if rule == NONDIFF:
            continue
        g = _sum(shares, steps)
        operands = spec.steps[k].operands
        for op, d in zip(operands, rule):
            if d is None or op.kind == "c" or not depends(op, needs, dep):
                continue
            if d.strip() == "{g}":
                share = g
            else:
                steps.append(_rule_step(d, operands + (Operand("v", k), g)))
                share = Operand("v", len(steps) - 1)
            (to_value if op.kind == "v" else to_input).setdefault(op.value, []).append(share)

    sources: List[Optional[Tuple[str, int]]] = []
    outputs: List[int] = []
    for i in range(len(spec.inputs)):
        shares = to_input.get(i)
        if not needs[i] or not shares:
            sources.append(None)
            continue
        g = _sum(shares, steps)
        if g.kind == "in":                        # an incoming gradient, as is
            sources.append(("g", g.value - grad_in))
        else:                                     # (inputs with one gradient share it)
            if g.value not in outputs:
                outputs.append(g.value)
            sources.append(("k", outputs.index(g.value)))
    if not outputs:
        return BackwardPlan(None, (), (), tuple(sources), differentiable)
    kernel, saved, grads = prune(spec, steps, outputs, grad_in)
    return BackwardPlan(kernel, saved, grads, tuple(sources), differentiable)


def _rule_step(rule: str, operands: Tuple[Operand, ...]) -> Step:
    """A step of ``rule`` over ``operands`` (then the op's result ``{out}`` and the incoming
    gradient ``{g}``), reading only the operands the rule names."""
    n = len(operands) - 2
    template = rule.replace("{out}", "{%d}" % n).replace("{g}", "{%d}" % (n + 1))
    used = sorted({int(m) for m in re.findall(r"\{(\d+)\}", template)})
    template = re.sub(r"\{(\d+)\}", lambda m: "{%d}" % used.index(int(m.group(1))), template)
    return Step(template, tuple(operands[i] for i in used))


def depends(op: Operand, needs, dep) -> bool:
    """Whether operand ``op`` depends differentiably on an input needing a gradient."""
    if op.kind == "in":
        return needs[op.value]
    return op.kind == "v" and dep[op.value]


def _sum(shares: List[Operand], steps: List[Step]) -> Operand:
    total = shares[0]
    for share in shares[1:]:
        steps.append(Step(_ADD, (total, share)))
        total = Operand("v", len(steps) - 1)
    return total


def prune(spec: KernelSpec, steps: List[Step], outputs: List[int], n_in: int,
          grad_mode: Callable[[int], str] = lambda i: "full"):
    """The kernel of the steps ``outputs`` need, reading only the inputs they read: inputs
    below ``n_in`` are ``spec``'s (saved), the rest incoming gradients of mode
    ``grad_mode(i)``. Returns (kernel, saved input indices, gradient indices); shared by the
    row backward (rows_backward), whose steps keep their reduce/row fields."""
    live = set()
    stack = list(outputs)
    while stack:
        k = stack.pop()
        if k in live:
            continue
        live.add(k)
        stack.extend(op.value for op in steps[k].operands if op.kind == "v")
    read = sorted({op.value for k in live for op in steps[k].operands if op.kind == "in"})
    new_input = {old: new for new, old in enumerate(read)}
    new_value: Dict[int, int] = {}
    kept: List[Step] = []
    for k in sorted(live):
        ops = tuple(Operand("in", new_input[op.value]) if op.kind == "in" else
                    Operand("v", new_value[op.value]) if op.kind == "v" else op
                    for op in steps[k].operands)
        new_value[k] = len(kept)
        kept.append(replace(steps[k], operands=ops))
    inputs = tuple(spec.inputs[i] if i < n_in else (spec.outputs[i - n_in][1], grad_mode(i))
                   for i in read)
    kernel = KernelSpec(dtype=spec.dtype, inputs=inputs, steps=tuple(kept),
                        outputs=tuple((new_value[v], spec.dtype) for v in outputs))
    saved = tuple(i for i in read if i < n_in)
    grads = tuple(i - n_in for i in read if i >= n_in)
    return kernel, saved, grads
