"""Adversarial differential tests for two optimizations: small matrix products taken into
the fused kernel that reads them (``passes/gemm_epilogue.py``) and loop tests / branch
predicates returned from C as Python bools (``executor._loop_tests``/``_branch_tests``,
``FusedKernel.predicate``).

Every test runs ``to_graph(fn)`` and ``fn`` on the same inputs and compares values (within
float tolerance: the kernel sums a product in k order with fused multiply-adds, a library
GEMM in its own blocked order), dtypes, shapes, NaN positions and, where inputs require
grad, gradients. Where the point is to exercise a feature, the optimized graph is
inspected to check that it engaged (a fused node with ``spec.gemm``, a generated
predicate launcher named ``test``).

This round found two bugs, fixed and pinned by the tests below: the product was moved to
where its reader runs past in-place mutations of its operands, and across grad-mode
switches (``torch.no_grad()``/``torch.enable_grad()``); ``gemm_epilogue`` now leaves a
product where it is when an effect or a ``cond``/``while`` lies between it and its reader.
"""
from types import SimpleNamespace

import pytest
import torch

from runtime.executor import lower
from runtime.kernels import compiler
from runtime.options import options
from runtime.passes import gemm_epilogue
from transpiler import to_graph

NAN, INF = float("nan"), float("inf")
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(suite_kernel_cache):
    with options.override(cache_dir=suite_kernel_cache):
        yield


# ----------------------------------------------------------------------------- helpers
def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def products(graph):
    """Fused nodes of ``graph`` (subgraphs too) that begin with an absorbed product; the
    steps an unrolled loop's ``kernel_loop`` runs (``passes/roll_steps``) count once each,
    as stand-ins holding its kernel."""
    found = []
    for n in graph.walk():
        if n.op == "fused" and n.target.spec.gemm:
            found.append(n)
        elif n.op == "kernel_loop" and n.target.kernel.spec.gemm:
            found += [SimpleNamespace(target=n.target.kernel, attrs={})] * n.attrs["steps"]
    return found


def predicate_calls(graph):
    """How many generated predicate launchers (``FusedKernel.predicate``) the lowered
    code of ``graph`` calls, counting a loop run by ``kernels.loop.KernelWhile`` (which
    calls its test kernel's C test function directly)."""
    names = lower(graph).fn.__globals__
    return sum(1 for k, v in names.items()
               if k.startswith("_fused") and getattr(v, "__name__", "") == "test") + \
        sum(1 for k, v in names.items()
            if k.startswith("_kernel_while") and v.test.predicate is not None)


def same(got, exp, tol):
    """Same structure, dtypes, shapes, values within ``tol``, NaN where eager has NaN."""
    if isinstance(exp, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(exp), (got, exp)
        for g, e in zip(got, exp):
            same(g, e, tol)
        return
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
        assert got.shape == exp.shape, (got.shape, exp.shape)
        assert got.requires_grad == exp.requires_grad, (got.requires_grad, exp.requires_grad)
        torch.testing.assert_close(got, exp, equal_nan=True, **tol)
        return
    # a Python number a tensor loop changed comes back as a 0-d tensor (documented)
    if isinstance(got, torch.Tensor):
        got = got.item()
    assert got == exp or (got != got and exp != exp), (got, exp)


def clones(args):
    return [a.detach().clone().requires_grad_(a.requires_grad)
            if isinstance(a, torch.Tensor) else a for a in args]


def differential(fn, *args, tol=F32, absorbed=None, min_absorbed=None, predicates=None,
                 grads=False):
    """Trace, optimize, inspect, run converted and eager on copies, compare.

    ``absorbed``/``min_absorbed``: the number of products the optimized graph must have
    taken in (checked compiled where a compiler exists); ``predicates``: the number of
    predicate launchers the generated code must call (only with a compiler);
    ``grads``: backpropagate a fixed cotangent and compare the input gradients."""
    f = to_graph(fn, strict=True)
    graph = f.graph(*args).optimize()
    taken = products(graph)
    if absorbed is not None:
        assert len(taken) == absorbed, graph
    if min_absorbed is not None:
        assert len(taken) >= min_absorbed, graph
    compiled = compiler.compiler_available()   # options.compiler and a C compiler
    for node in taken:
        assert node.target.compiled == compiled, node.target
    if predicates is not None and compiled:
        assert predicate_calls(graph) == predicates, lower(graph).source
    g_args, e_args = clones(args), clones(args)
    before = [a.detach().clone() for a in args if isinstance(a, torch.Tensor)]
    got, exp = f(*g_args), fn(*e_args)
    same(got, exp, tol)
    # the converted function never writes into its arguments (planned buffers)
    for a, b in zip([a for a in g_args if isinstance(a, torch.Tensor)], before):
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=0, equal_nan=True,
                                   msg="the converted function wrote into an argument")
    if grads:
        outs = [o for o in (got if isinstance(got, tuple) else (got,))
                if isinstance(o, torch.Tensor) and o.requires_grad]
        eouts = [o for o in (exp if isinstance(exp, tuple) else (exp,))
                 if isinstance(o, torch.Tensor) and o.requires_grad]
        assert len(outs) == len(eouts) and outs
        cots = [randn(*o.shape, seed=99 + k, dtype=o.dtype) for k, o in enumerate(outs)]
        torch.autograd.backward(outs, cots)
        torch.autograd.backward(eouts, cots)
        for a, b in zip(g_args, e_args):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                assert (a.grad is None) == (b.grad is None), (a.grad, b.grad)
                if b.grad is not None:
                    torch.testing.assert_close(a.grad, b.grad, **tol)
    return f, graph


# ------------------------------------------------------------------ RNN-like loops
def rnn(x, h, w, v, b):
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ w + h @ v + b)
    return h


def rnn_args(m, k, n, steps=3, dtype=torch.float32):
    return (randn(steps, m, k, dtype=dtype), randn(m, n, seed=1, dtype=dtype),
            randn(k, n, seed=2, dtype=dtype) * 0.3,
            randn(n, n, seed=3, dtype=dtype) * (1.0 / n ** 0.5), randn(n, seed=4, dtype=dtype))


RNN_SHAPES = [(m, k, n) for n in (64, 65, 100, 128, 256) for k in (1, 3, 64)
              for m in (1, 2, 16)]


@pytest.mark.parametrize("m,k,n", RNN_SHAPES)
def test_rnn_loop_every_shape(m, k, n):
    args = rnn_args(m, k, n)
    # h @ v is the M x N x N product; when it is small enough each step takes one in
    fits = m * n * n <= gemm_epilogue.MAX_WORK
    differential(rnn, *args, min_absorbed=1 if fits else None)


@pytest.mark.parametrize("m,k,n", [(2, 3, 100), (16, 64, 64), (1, 1, 256)])
def test_rnn_loop_float64(m, k, n):
    differential(rnn, *rnn_args(m, k, n, dtype=torch.float64), tol=F64, min_absorbed=1)


def test_rnn_loop_gradients_are_eager():
    args = [a.requires_grad_() for a in rnn_args(2, 3, 64)]
    differential(rnn, *args, min_absorbed=1, grads=True)


def test_rnn_loop_long_sequence():
    # 40 contracting steps (|v| small): errors of a different summation order stay
    # within float tolerance instead of growing
    differential(rnn, *rnn_args(4, 8, 64, steps=40), min_absorbed=40)


# ------------------------------------------------------------------ product forms
@pytest.mark.parametrize("addend", [(), (1,), (1, 1), (64,), (1, 64), (5, 1), (5, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_addmm_addend_shapes(addend, dtype):
    def f(c, a, b):
        return torch.sigmoid(torch.addmm(c, a, b)) * 2.0 - 1.0

    tol = F32 if dtype == torch.float32 else F64
    differential(f, randn(*addend, seed=2, dtype=dtype), randn(5, 3, dtype=dtype),
                 randn(3, 64, seed=1, dtype=dtype), tol=tol, absorbed=1)


def form_tensor_mm(a, b, c):
    return torch.tanh(a.mm(b)) * 2.0 + c


def form_tensor_matmul(a, b, c):
    return torch.tanh(a.matmul(b)) * 2.0 + c


def form_tensor_addmm(a, b, c):
    return torch.tanh(c.addmm(a, b)) * 2.0


def form_unit_scales(a, b, c):
    return torch.tanh(torch.addmm(c, a, b, beta=1, alpha=1.0)) * 2.0


def form_beta_zero(a, b, c):                          # NaN in c is ignored: stays a call
    return torch.tanh(torch.addmm(c, a, b, beta=0)) * 2.0


def form_mm_plus(a, b, c):
    return torch.tanh(torch.mm(a, b) + c) * 2.0


def form_plus_product(a, b, c):
    return torch.tanh(c + a @ b) * 2.0


def form_product_minus(a, b, c):
    return torch.tanh(a @ b - c) * 2.0


def form_linear(a, b, c):
    return torch.tanh(torch.nn.functional.linear(a, b.t(), c)) * 2.0


PRODUCT_FORMS = {form_tensor_mm: 1, form_tensor_matmul: 1, form_tensor_addmm: 1,
                 form_unit_scales: 1, form_beta_zero: 0, form_mm_plus: 1,
                 form_plus_product: 1, form_product_minus: 1, form_linear: None}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("fn", list(PRODUCT_FORMS), ids=lambda fn: fn.__name__)
def test_product_spellings(fn, compiled):
    taken = PRODUCT_FORMS[fn]
    a, b, c = randn(5, 3), randn(3, 64, seed=1), randn(64, seed=2)
    c[3] = NAN
    with options.override(compiler=compiled):
        differential(fn, a, b, c, absorbed=taken)


def test_same_tensor_as_a_and_c():
    def addmm_hh(h, w):
        return torch.tanh(torch.addmm(h, h, w)) * 0.5

    def plus_h(h, w):
        return torch.tanh(h @ w + h) * 0.5 - h

    h, w = randn(4, 64), randn(64, 64, seed=1) * 0.1
    differential(addmm_hh, h, w, absorbed=1)
    differential(plus_h, h, w, absorbed=1)
    hd, wd = h.double(), w.double()
    differential(addmm_hh, hd, wd, tol=F64, absorbed=1)


def test_transposed_strided_and_expanded_operands_inside():
    def f(x, w, b):
        return torch.tanh(x[:, ::2] @ w.t() + b.expand(x.shape[0], w.shape[0])) * 2.0

    differential(f, randn(4, 16), randn(64, 8, seed=1), randn(64, seed=2), absorbed=1)


def test_views_passed_as_arguments_after_contiguous_ones():
    def f(x, w, b):
        return torch.tanh(torch.addmm(b, x, w)) * 2.0 + 1.0

    g = to_graph(f, strict=True)
    x, w, b = randn(5, 3), randn(3, 64, seed=1), randn(5, 64, seed=2)
    assert products(g.graph(x, w, b).optimize())
    same(g(x, w, b), f(x, w, b), F32)
    xs = randn(5, 6)[:, ::2]                          # same shapes, other strides
    wt = randn(64, 3, seed=1).t()
    bx = randn(64, seed=2).expand(5, 64)              # stride 0
    assert not xs.is_contiguous() and not wt.is_contiguous() and not bx.is_contiguous()
    same(g(xs, wt, bx), f(xs, wt, bx), F32)
    same(g(x, w, b), f(x, w, b), F32)


def test_zero_d_and_one_by_one_epilogue_inputs():
    def f(x, w, s, t):
        return torch.tanh(x @ w * s + t) * 2.0

    x, w = randn(4, 8), randn(8, 64, seed=1)
    differential(f, x, w, randn(seed=2), randn(1, 1, seed=3), absorbed=1)
    differential(f, x, w, randn(1, seed=2), randn(seed=3), absorbed=1)


def test_identical_products_merged_then_taken_in_once():
    def f(x, w):
        return torch.tanh(x @ w) + torch.sigmoid(x @ w) * 2.0

    differential(f, randn(5, 3), randn(3, 64, seed=1), absorbed=1)


def test_kernel_with_several_outputs():
    def f(x, w):
        p = x @ w
        a = torch.tanh(p)
        return a, a * 2.0 + p

    differential(f, randn(4, 8), randn(8, 64, seed=1), absorbed=1)


def test_bool_and_mixed_dtype_epilogues():
    def compare(x, w):
        return (x @ w) * 2.0 > 1.0

    def mixed(x, w, mask, k):
        return torch.tanh(x @ w) * mask + k

    def widened(x, w):                                # float64 epilogue: stays a call
        return (x @ w).double() * 2.0 + 1.0

    x, w = randn(4, 8), randn(8, 64, seed=1)
    differential(compare, x, w, absorbed=1)
    differential(mixed, x, w, randn(4, 64, seed=3) > 0, torch.arange(64), absorbed=1)
    differential(widened, x, w, absorbed=0)


def test_special_values_in_products():
    def f(c, a, b):
        return torch.tanh(torch.addmm(c, a, b)) * 2.0

    a, b, c = randn(6, 4), randn(4, 64, seed=1), randn(64, seed=2)
    a[0, 0], a[1, 1], b[2, 3], b[3, 5] = NAN, INF, -INF, 0.0
    a[2, :] = 0.0
    c[7] = NAN
    differential(f, c, a, b, absorbed=1)


@pytest.mark.parametrize("m,k,n", [(32, 1, 4096), (2, 16, 4096), (2048, 1, 64)])
def test_largest_products_rows_in_parallel(m, k, n):
    # M*N*K == MAX_WORK: the biggest products taken in, enough rows to run on threads
    assert m * n * k == gemm_epilogue.MAX_WORK

    def f(a, b, c):
        return torch.sigmoid(torch.addmm(c, a, b)) * 2.0 - 1.0

    differential(f, randn(m, k), randn(k, n, seed=1), randn(n, seed=2), absorbed=1)
    differential(f, randn(m, k, dtype=torch.float64), randn(k, n, seed=1, dtype=torch.float64),
                 randn(n, seed=2, dtype=torch.float64), tol=F64, absorbed=1)


def test_limits_and_empty_products():
    def f(a, b):
        return torch.relu(a @ b) * 2.0 - 0.5

    differential(f, randn(4, 3), randn(3, 4097, seed=1), absorbed=0)    # N > MAX_N
    differential(f, randn(4, 3), randn(3, 63, seed=1), absorbed=0)      # N < MIN_N
    differential(f, randn(16, 129), randn(129, 64, seed=1), absorbed=0)  # work > MAX_WORK
    differential(f, randn(0, 3), randn(3, 64, seed=1))                   # no rows
    differential(f, randn(4, 0), randn(0, 64, seed=1), absorbed=0)      # K == 0


# ------------------------------------------------------------- products and branches
def product_before_if(x, w, c):
    p = x @ w
    if c.sum() > 0:
        y = torch.tanh(p) * 2.0
    else:
        y = torch.sigmoid(p) - 1.0
    return y


def product_in_both_branches(x, w, c):
    if c.sum() > 0:
        y = torch.tanh(x @ w) * 2.0
    else:
        y = torch.sigmoid(x @ w + 1.0) - 1.0
    return y * 3.0


def predicate_on_product(x, w):
    p = x @ w
    return torch.tanh(p) * 2.0 if p.sum() > 0 else torch.sigmoid(p) - 1.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_products_and_an_if_on_a_tensor(sign):
    x, w, c = randn(4, 8), randn(8, 64, seed=1), randn(3, seed=2).abs() * sign
    differential(product_before_if, x, w, c, predicates=1)
    differential(product_in_both_branches, x, w, c, absorbed=2, predicates=1)
    differential(predicate_on_product, x * sign, w.abs(), predicates=1)
    # NaN predicate: False, as in eager
    differential(product_in_both_branches, x, w, torch.tensor([1.0, NAN]), absorbed=2)


def test_observed_branches_with_a_bool_predicate():
    from transpiler.debugging.compare import compare
    x, w = randn(4, 8).abs(), randn(8, 64, seed=1)
    for arg, taken in ((x, "then"), (-x, "else")):
        report = compare(product_in_both_branches, arg, w, arg[0])
        assert report.ok, report
        assert report.branches[0].taken[taken] == 1, report.branches


# ------------------------------------------------------------- products and loops
def while_product(h, v, b):
    n = torch.zeros(())
    while h.abs().amax() < 5.0:
        h = torch.tanh(h @ v + b) * 1.7 + h
        n = n + 1.0
    return h, n


def test_product_in_a_while_with_a_tensor_test():
    h, v, b = randn(3, 64) * 0.01, randn(64, 64, seed=1) * 0.1, randn(64, seed=2) * 0.1
    f, _ = differential(while_product, h, v, b, absorbed=1, predicates=1)
    for _ in range(2):                                # the same inputs again
        same(f(h, v, b), while_product(h, v, b), F32)
    # a test that is False at once (NaN compares False): the loop never runs
    hn = h.clone()
    hn[0, 0] = NAN
    same(f(hn, v, b), while_product(hn, v, b), F32)


def while_break_continue(x, w, v):
    h = torch.tanh(x @ w) * 1.0
    n = torch.zeros(())
    while h.abs().mean() < 0.9:
        h = torch.tanh(h @ v + 0.5) * 1.1
        n = n + 1.0
        if n >= 20.0:
            break
        if h.sum() < 0:
            continue
        h = h * 1.01
    return h, n


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_while_with_break_and_continue_on_tensors(seed):
    differential(while_break_continue, randn(2, 8, seed=seed), randn(8, 64, seed=seed + 1),
                 randn(64, 64, seed=seed + 2) * 0.2, min_absorbed=1)


def nested_break_continue(x, w, thresholds):
    s = torch.zeros(x.shape[1], w.shape[1])
    for i in range(x.shape[0]):
        if x[i].sum() < thresholds[0]:
            continue
        for j in range(3):
            if x[i, j].amax() > thresholds[1]:
                break
            s = s * 0.5 + torch.tanh(x[i] @ w + float(j)) * 2.0
    return s


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nested_loops_with_tensor_break_and_continue(seed):
    x, w = randn(5, 4, 8, seed=seed), randn(8, 64, seed=seed + 10)
    thresholds = torch.tensor([-1.0, 1.8])
    differential(nested_break_continue, x, w, thresholds, min_absorbed=1)


def test_predicates_in_a_while_loop_body_with_products():
    def f(h, v, steps):
        i = torch.zeros((), dtype=torch.int64)
        while i < steps:
            p = torch.tanh(h @ v) * 1.5
            if p.amax() > 1.0:
                h = p * 0.5
            else:
                h = p + 0.25
            i = i + 1
        return h

    differential(f, randn(2, 64) * 0.1, randn(64, 64, seed=1) * 0.3, torch.tensor(6))


# ------------------------------------------------------------------------ predicates
def if_gt(x):
    if x.sum() > 0:
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


def if_not_gt(x):
    if not (x.sum() > 0):
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


def if_invert_gt(x):
    if ~(x.sum() > 0):
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


def if_le(x):
    if x.sum() <= 0:
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


def if_self_ne(x):
    s = x.sum()
    if s != s:                                        # NaN test
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


def if_amax_and_sum(x):
    if (x.sum() > 0) & (x.amax() < 3.0):
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


def if_bool_cast(x):
    if (x.sum() * 0.0).bool():                        # NaN * 0 is NaN, which is True
        y = x * 2.0 + 1.0
    else:
        y = x - 1.0
    return torch.tanh(y) * 0.5


PREDICATE_INPUTS = [randn(8), -randn(8).abs(), torch.tensor([1.0, NAN, 2.0]),
                    torch.tensor([NAN]), torch.tensor([0.0, -0.0]),
                    torch.tensor([INF, -INF]), torch.tensor([INF, 1.0])]


@pytest.mark.parametrize("fn", [if_gt, if_not_gt, if_invert_gt, if_le, if_self_ne,
                                if_amax_and_sum, if_bool_cast])
def test_branch_predicates_with_special_values(fn):
    f = to_graph(fn, strict=True)
    if compiler.compiler_available():
        assert predicate_calls(f.graph(PREDICATE_INPUTS[0]).optimize()) == 1
    for x in PREDICATE_INPUTS:
        same(f(x), fn(x), F32)


def test_zero_d_and_one_by_one_predicates():
    def zero_d(s, x):
        if s * 2.0 > 1.0:
            y = x + 1.0
        else:
            y = x - 1.0
        return y

    def row(x):
        if x.sum(-1, keepdim=True) > 0:
            y = x * 2.0
        else:
            y = x - 1.0
        return y

    x = randn(5)
    for s in (torch.tensor(0.75), torch.tensor(0.25), torch.tensor(NAN)):
        differential(zero_d, s, x, predicates=1)
    for r in (randn(1, 5), -randn(1, 5).abs(), torch.tensor([[NAN, 1.0]])):
        differential(row, r, predicates=1)


def test_predicate_returned_used_later_or_carried():
    def returned(x):
        t = x.sum() > 0
        y = x * 2.0 if t else x - 1.0
        return torch.tanh(y) * 0.5, t

    def used_later(x):
        t = x.amax() > 0.5
        y = torch.where(t, x * 2.0, x - 1.0) if x.numel() > 4 else x
        if t:
            y = y + 1.0
        return torch.tanh(y) * 0.5 + t.float()

    def carried(x):
        t = x.sum() > 0
        while t:
            x = x - 1.0
            t = x.sum() > 0
        return x, t

    for x in (randn(8), -randn(8).abs(), torch.tensor([NAN, 1.0])):
        # a predicate read by something else stays a tensor: no bool launcher for it
        differential(returned, x, predicates=0)
        differential(used_later, x, predicates=0)
        differential(carried, x.abs() * 0.3)


def test_while_tests_with_nan_and_zero_iterations():
    def newton(x):                       # 1/sqrt(x) by Newton's method
        y = 1.0 / (x + 1.0)
        while torch.amax(torch.abs(x * y * y - 1.0)) > 1e-5:
            y = y * (1.5 - 0.5 * x * y * y)
        return y

    x = torch.rand(64, generator=torch.Generator().manual_seed(0)) * 50 + 0.5
    f, _ = differential(newton, x, predicates=1)
    for arg in (torch.tensor([8.0, NAN, 27.0]), torch.tensor([1.0]), x.double()):
        tol = F64 if arg.dtype == torch.float64 else F32
        same(f(arg), newton(arg), tol)


def test_predicate_gradients_and_no_grad():
    def f(x, w):
        if x.sum() > 0:
            y = torch.tanh(x @ w) * 2.0
        else:
            y = torch.sigmoid(x @ w) - 1.0
        return y

    x, w = randn(4, 8).abs(), randn(8, 64, seed=1)
    for sign in (1.0, -1.0):
        args = [(x * sign).requires_grad_(), w.clone().requires_grad_()]
        differential(f, *args, grads=True, absorbed=2, predicates=1)
        with torch.no_grad():
            differential(f, *args, absorbed=2, predicates=1)


# ------------------------------------------------------- repeated calls and retracing
def test_repeated_calls_fresh_and_reused_inputs_and_held_results():
    def f(z, x, w, v):
        big = torch.tanh(z * 2.0 + 1.0)               # 4 MB: its buffer is recycled
        h = torch.sigmoid(x @ w) * 3.0
        h = torch.tanh(h @ v + h) - 0.5
        return big, h

    z, x, w, v = randn(1024, 1024), randn(4, 8), randn(8, 64, seed=1), randn(64, 64, seed=2)
    g = to_graph(f, strict=True)
    assert len(products(g.graph(z, x, w, v).optimize())) == 2
    first = g(z, x, w, v)
    kept = [t.clone() for t in first]
    for k in range(4):                                # fresh inputs each call
        args = (randn(1024, 1024, seed=10 + k), randn(4, 8, seed=20 + k), w, v)
        same(g(*args), f(*args), F32)
    for a, b in zip(first, kept):                     # results held are never rewritten
        assert torch.equal(a, b)
    view = g(z, x, w, v)[0][:3]                       # only a view of a result is held
    expect = view.clone()
    g(-z, x, w, v)
    assert torch.equal(view, expect)
    for _ in range(3):                                # the very same inputs again
        same(g(z, x, w, v), f(z, x, w, v), F32)


def test_retrace_for_new_shapes():
    def f(x, w, b):
        return torch.tanh(torch.addmm(b, x, w)) * 2.0 - 1.0

    g = to_graph(f, strict=True)
    for m, k, n, taken in ((4, 3, 64, 1), (4, 3, 65, 1), (4, 3, 63, 0), (1, 5, 64, 1),
                           (4, 3, 64, 1)):
        args = randn(m, k), randn(k, n, seed=1), randn(n, seed=2)
        assert len(products(g.graph(*args).optimize())) == taken
        same(g(*args), f(*args), F32)


def chain(x, w):
    a = torch.tanh(x * 2.0 + 1.0)
    b = torch.sigmoid(a @ w) * 3.0
    c = torch.tanh(b @ w * 0.1) + b                   # b read as A and in the epilogue
    d = torch.exp(c @ w * 0.01) - 1.0
    e = torch.tanh(d @ w) * 0.5 + d
    return e * 2.0 + 1.0


def test_planned_chain_of_products_across_calls_and_layouts():
    x, w = randn(8, 64), randn(64, 64, seed=1) * 0.1
    f, graph = differential(chain, x, w, absorbed=4)
    planned = [n for n in products(graph) if n.attrs.get("planned_out")]
    assert planned                                    # some product kernels write into dead buffers
    for node in planned:
        spec = node.target.spec
        assert node.kwargs["out"] is not node.args[spec.gemm[0]]
        assert node.kwargs["out"] is not node.args[spec.gemm[1]]
    wt = (randn(64, 64, seed=1) * 0.1).t()            # same shape, transposed layout
    for args in ((x, w), (x, wt), (x * 2.0, w), (x, w)):
        same(f(*args), chain(*args), F32)
    with torch.inference_mode():
        same(f(x, w), chain(x, w), F32)
    args = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    differential(chain, *args, absorbed=4, grads=True)   # planning is off under autograd


# ------------------------------------------------------------ modules, grad, compiler
class Cell(torch.nn.Module):
    def __init__(self, k, n):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(k, n, generator=g) * 0.3)
        self.v = torch.nn.Parameter(torch.randn(n, n, generator=g) * 0.1)
        self.b = torch.nn.Parameter(torch.randn(n, generator=g))

    def forward(self, x, h):
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] @ self.w + h @ self.v + self.b)
        return h


def test_module_parameters_in_grad_and_no_grad_mode():
    cell = Cell(3, 64)
    f = to_graph(cell, strict=True)
    x, h = randn(4, 2, 3), randn(2, 64, seed=1)
    assert len(products(f.graph(x, h).optimize())) == 4
    with torch.no_grad():
        same(f(x, h), cell(x, h), F32)
    got, exp = f(x, h), cell(x, h)
    same(got, exp, F32)
    got.sum().backward()
    mine = [p.grad.clone() for p in cell.parameters()]
    cell.zero_grad()
    exp.sum().backward()
    for a, p in zip(mine, cell.parameters()):
        torch.testing.assert_close(a, p.grad, **F32)
    with torch.no_grad():
        same(f(x, h), cell(x, h), F32)                # grad mode off again: the C path
        cell.w.add_(0.5)                              # parameters change between calls
        same(f(x, h), cell(x, h), F32)


W_CLOSED = randn(8, 64, seed=11)
B_CLOSED = randn(64, seed=12)


def closed_over(x):
    return torch.tanh(x @ W_CLOSED + B_CLOSED) * 2.0


def test_closed_over_operands_are_read_live():
    x = randn(4, 8)
    f, _ = differential(closed_over, x, absorbed=1)
    saved = W_CLOSED.clone(), B_CLOSED.clone()
    try:
        with torch.no_grad():                         # the same objects, new values
            W_CLOSED.add_(1.0)
            B_CLOSED.mul_(-1.0)
        same(f(x), closed_over(x), F32)
    finally:
        W_CLOSED.copy_(saved[0])
        B_CLOSED.copy_(saved[1])


def test_compiler_disabled_runs_the_same_graph_as_torch_ops():
    args = rnn_args(2, 3, 64)
    x = torch.rand(40, generator=torch.Generator().manual_seed(3)) * 9 + 1
    with options.override(compiler=False):
        f, graph = differential(rnn, *args, min_absorbed=1)
        assert not any(n.target.compiled for n in products(graph))
        assert predicate_calls(graph) == 0
        differential(while_product, randn(3, 64) * 0.01, randn(64, 64, seed=1) * 0.1,
                     randn(64, seed=2) * 0.1, absorbed=1, predicates=0)
        differential(if_gt, x, predicates=0)
        grad_args = [a.clone().requires_grad_() for a in args]
        differential(rnn, *grad_args, min_absorbed=1, grads=True)


# ------------------------------------------------------------------ bugs found here
def mutate_b(x, w):
    w2 = w * 1.0
    p = x @ w2
    w2.add_(1.0)                                      # after the product, before its reader
    return torch.tanh(p) * 2.0, w2


def mutate_a(x, w):
    a = x * 1.0
    p = a @ w
    a.mul_(2.0)
    return torch.tanh(p) * 2.0, a


def mutate_c(x, w, b):
    c = b + 0.0
    p = torch.addmm(c, x, w)
    c.add_(1.0)
    return torch.tanh(p) * 2.0, c


def mutate_through_view(x, w):
    w2 = w * 1.0
    p = x @ w2
    w2[0].zero_()
    return torch.tanh(p) * 2.0, w2


def copy_into_b(x, w, z):
    w2 = w * 1.0
    p = x @ w2
    w2.copy_(z)
    return torch.tanh(p) * 2.0, w2


def mutate_in_a_branch(x, w, c):
    w2 = w * 1.0
    p = x @ w2
    if c.sum() > 0:
        w2.add_(1.0)
    return torch.tanh(p) * 2.0, w2


@pytest.mark.parametrize("case", ["b", "a", "c", "view", "copy", "branch", "no-compiler"])
def test_product_operand_mutated_before_its_reader(case):
    x, w, b = randn(4, 8), randn(8, 64, seed=1), randn(64, seed=2)
    if case == "no-compiler":                         # the torch path of the same graph
        with options.override(compiler=False):
            differential(mutate_b, x, w)
        return
    fn, args = {"b": (mutate_b, (x, w)), "a": (mutate_a, (x, w)),
                "c": (mutate_c, (x, w, b)), "view": (mutate_through_view, (x, w)),
                "copy": (copy_into_b, (x, w, randn(8, 64, seed=5))),
                "branch": (mutate_in_a_branch, (x, w, randn(3, seed=6).abs()))}[case]
    differential(fn, *args)


def test_product_operand_mutated_stays_right_when_not_taken_in(monkeypatch):
    # the same programs with every product a library call (the reference the fix matches)
    monkeypatch.setattr(gemm_epilogue, "MIN_N", 10 ** 9)
    x, w = randn(4, 8), randn(8, 64, seed=1)
    differential(mutate_b, x, w, absorbed=0)
    differential(mutate_in_a_branch, x, w, randn(3, seed=6).abs(), absorbed=0)


def product_under_no_grad(x, w):
    with torch.no_grad():
        p = x @ w
    return torch.tanh(p) * 2.0


def product_under_no_grad_plus(x, w):
    with torch.no_grad():
        p = x @ w
    return torch.tanh(p) * 2.0 + x.sum()


@pytest.mark.parametrize("fn", [product_under_no_grad, product_under_no_grad_plus])
def test_product_computed_under_no_grad(fn):
    x, w = randn(4, 8).requires_grad_(), randn(8, 64, seed=1).requires_grad_()
    differential(fn, x, w, grads=fn is product_under_no_grad_plus)


def product_read_under_enable_grad(x, w):
    p = x @ w
    with torch.enable_grad():
        y = torch.tanh(p) * 2.0
    return y


def test_product_read_under_enable_grad_in_a_no_grad_call():
    x, w = randn(4, 8), randn(8, 64, seed=1).requires_grad_()
    with torch.no_grad():
        differential(product_read_under_enable_grad, x, w)


def test_grad_mode_regions_are_right_when_not_taken_in(monkeypatch):
    monkeypatch.setattr(gemm_epilogue, "MIN_N", 10 ** 9)
    x, w = randn(4, 8).requires_grad_(), randn(8, 64, seed=1).requires_grad_()
    differential(product_under_no_grad, x, w, absorbed=0)
    differential(product_under_no_grad_plus, x, w, absorbed=0, grads=True)
    with torch.no_grad():
        differential(product_read_under_enable_grad, x.detach(), w, absorbed=0)
