"""Automatic dynamic shapes and ``to_graph(fn, dynamic=...)`` (issue 14, item 2).

Each program runs eagerly and converted (default and strict mode) over a sweep of sizes;
results must equal eager's at every size, and the sweep must reuse one dynamic graph
(``_traces`` counts the graphs traced). Sizes 0 and 1 get their own (static) graphs.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

from transpiler import ConversionError, FallbackWarning, to_graph
from transpiler.dynamic_shapes import DynamicShapes

from tests.e2e.e2e_helpers import assert_same

SWEEP = [3, 5, 7, 1, 0, 2, 9, 6, 12, 4]


def _traces(g) -> int:
    """Graphs traced by ``g`` (static and dynamic entries; fallbacks not counted)."""
    g = getattr(g, "graph_function", g)
    return sum(1 for e in g._entries.values() if hasattr(e, "optimized"))


def _dynamic_entries(g) -> int:
    g = getattr(g, "graph_function", g)
    return sum(1 for k in g._entries if isinstance(k, tuple) and k and
               isinstance(k[-1], tuple) and k[-1][:1] == ("dynamic",))


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.detach().clone().requires_grad_(v.requires_grad)
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v


def sweep(fn, make, sizes=SWEEP, strict=False, g=None, **options):
    """Call ``fn`` eagerly and converted on ``make(n)`` for each size; return the
    converted function. No fallback allowed; retracing warnings are the point here."""
    g = g if g is not None else to_graph(fn, strict=strict, **options)
    for n in sizes:
        args = make(n)
        exp = fn(*_clone(args))
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            warnings.filterwarnings("ignore", message=".*traced")
            got = g(*_clone(args))
        assert_same(got, exp, f"size {n}")
    return g


# ------------------------------------------------------------------ control flow, sizes
def branchy(x, y):
    z = x * 2 + y
    if z.sum() > 0:
        z = z.relu() * 3
    n = x.shape[0]
    w = z.view(-1, 4) * n
    return w.mean(0), z.sum(1) / n, x.reshape(n, 2, 2)


def looping(x):
    total = torch.zeros(x.shape[1])
    i = 0
    while total.sum() < 10 and i < x.shape[0]:
        total = total + x[i].abs()
        i += 1
    for row in x:
        total = total + row * 0.5
    return total, i


def size_arithmetic(x):
    n = x.shape[0]
    half = (n + 1) // 2
    y = torch.arange(n, dtype=x.dtype) * 2 + x.sum(1)
    return y[:half] * n, x.size(0) * x.size(1), x.numel(), n / 2


def python_size_branch(x):
    if x.shape[0] > 4:          # a size: a graph value, this if a cond
        return x.sum(0)
    return x.mean(0) + x.shape[0]


def reductions_views(x):
    a = x.flatten(0, 1).softmax(-1)
    b = x.reshape(-1, x.shape[-1]).logsumexp(0)
    c = x.transpose(0, 1).contiguous().view(x.shape[1], -1)
    return a.sum(0), b, c.cumsum(1), x.unsqueeze(0).expand(2, -1, -1, -1).sum()


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn, make", [
    (branchy, lambda n: (torch.randn(n, 4), torch.randn(n, 4))),
    (looping, lambda n: (torch.randn(n, 3),)),
    (size_arithmetic, lambda n: (torch.randn(n, 3),)),
    (python_size_branch, lambda n: (torch.randn(n, 3),)),
    (reductions_views, lambda n: (torch.randn(n, 2, 3),)),
], ids=["branchy", "looping", "size_arithmetic", "python_size_branch", "reductions_views"])
def test_sweep_equals_eager_and_reuses_one_graph(fn, make, strict):
    # (size 0: x[i] in a tensor loop's body has no shape at size 0, a static limit)
    sizes = [n for n in SWEEP if n or fn is not looping]
    g = sweep(fn, make, sizes, strict=strict)
    # sizes 3 (static), then 5: dynamic from then on; 0, 1 static each; 2..12 reuse
    assert _dynamic_entries(g) == 1
    assert _traces(g) == 4 - (fn is looping), _traces(g)


# ------------------------------------------------------------------ sizes 0 and 1
def broadcast_rows(x, y):
    return x * y + y.sum(0), (x - y).abs().max(0).values


def test_size_one_broadcasting_gets_its_own_graph():
    """y's dim 0 is 1 in some calls: a graph traced for n >= 2 rows must not serve them
    (broadcasting makes the result n rows there), nor the reverse."""
    calls = [(3, 3), (5, 5), (1, 6), (6, 1), (7, 7), (1, 1), (4, 1), (2, 2)]
    for strict in (False, True):
        g = to_graph(broadcast_rows, strict=strict)
        for a, b in calls:
            sweep(broadcast_rows, lambda n: (torch.randn(a, 4), torch.randn(b, 4)), [0], g=g)
        # one dynamic graph serves (5, 5), (7, 7), (2, 2); sizes with a 1 specialize
        assert _dynamic_entries(g) >= 1


def test_size_zero_and_one_first():
    """A function first seen at sizes 0 and 1 (both specialized) then at others."""
    def f(x):
        return x.sum(0) * 2, x.shape[0] + 1, x.view(-1).cumsum(0)
    for strict in (False, True):
        g = sweep(f, lambda n: (torch.randn(n, 3),), [0, 1, 0, 1, 4, 6, 9], strict=strict)
        assert _traces(g) == 3          # 0 and 1 static; 1 was a second size: dynamic from 4


# ------------------------------------------------------------------ related dims
def pair(x, y):
    return x @ y.T, torch.cat([x, y]).mean(0), x.shape[0] * y.shape[0]


def test_two_inputs_related_dims():
    """The graph traced with x and y of equal rows serves only calls where they are
    equal (x + y needs it); unequal rows are another pattern with its own graph."""
    def add(x, y):
        return x + y * 2
    for strict in (False, True):
        g = sweep(pair, lambda n: (torch.randn(n, 3), torch.randn(n + 1, 3)), [2, 3, 5, 8],
                  strict=strict)
        assert _dynamic_entries(g) == 1
        g = to_graph(add, strict=strict)
        sweep(add, lambda n: (torch.randn(n, 3), torch.randn(n, 3)), [2, 4, 6, 9], g=g)
        assert _dynamic_entries(g) == 1
        with pytest.raises(RuntimeError):            # eager's error, as eager raises it
            g(torch.randn(5, 3), torch.randn(6, 3))
        with pytest.raises(RuntimeError):
            add(torch.randn(5, 3), torch.randn(6, 3))
        sweep(add, lambda n: (torch.randn(n, 3), torch.randn(n, 3)), [7, 11], g=g)


def test_equal_rows_traced_together_are_a_relation():
    """x rows equal y columns when traced: that equality is part of the dynamic graph's
    pattern; a call where they differ gets another graph, with eager's answer."""
    def f(x, y):
        if x.shape[0] == y.shape[1]:
            return x @ y
        return x.sum() + y.sum()
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        for n, m in [(3, 3), (4, 4), (5, 5), (5, 6), (7, 8), (9, 9)]:
            sweep(f, lambda _: (torch.randn(n, n), torch.randn(n, m)), [0], g=g)


# ------------------------------------------------------------------ what cannot be dynamic
def test_size_needed_as_python_number_keeps_specializing():
    """A number of results that follows a dynamic size (unbind, split along it) cannot
    be one graph's (it was silently the traced size's count): the dynamic trace fails,
    the function keeps one static graph per size (no fallback), and the failed pattern
    is not retried on every call."""
    def unbound(x):
        return sum(t * i for i, t in enumerate(x.unbind(0)))

    def chunks(x):
        return [t.sum(0) for t in torch.split(x, 2)]
    for fn in (unbound, chunks):
        for strict in (False, True):
            g = sweep(fn, lambda n: (torch.randn(n, 2),), [3, 5, 7, 9], strict=strict)
            attempts = len(g._history)
            sweep(fn, lambda n: (torch.randn(n, 2),), [11, 13], g=g)
            assert len(g._history) - attempts == 2        # one static trace each, no retry
            assert _dynamic_entries(g) == 0


def test_len_and_range_of_a_dynamic_dim_are_graph_values():
    def f(x):
        out = x * 0
        for i in range(len(x) // 2):
            out[i] = x[i] * 2
        return out, len(x)
    for strict in (False, True):
        g = sweep(f, lambda n: (torch.randn(n, 2),), [3, 5, 7, 9, 4], strict=strict)
        assert _dynamic_entries(g) == 1 and _traces(g) == 2


def test_view_with_numbers_from_sizes():
    def f(x):
        n, c = x.shape
        y = x.reshape(n // 2, 2 * c) if n % 2 == 0 else x.reshape(n, c)
        return y.sum(1), x.view(n, -1, 1).squeeze(-1), x[: n - 1]
    for strict in (False, True):
        sweep(f, lambda n: (torch.randn(n, 4),), [4, 6, 5, 8, 9, 10, 2], strict=strict)


def test_strided_conv_on_dynamic_spatial_dims():
    """Output sizes that are the same at two input sizes but not at others ((n-1)//2+1
    is 2 at 3 and 4) must stay dynamic, not be baked in."""
    conv = torch.nn.Conv2d(2, 3, 3, stride=2, padding=1)

    def f(x):
        y = conv(x)
        return y.flatten(1).sum(1), y.shape[-1] * 1.0
    with torch.no_grad():
        g = sweep(f, lambda n: (torch.randn(2, 2, n, n),), [3, 4, 6, 9, 12, 5],
                  dynamic={"x": [2, 3]})
    assert _traces(g) == 1 and _dynamic_entries(g) == 1


# ------------------------------------------------------------------ the dynamic= option
def mlp(x, w):
    h = torch.tanh(x @ w)
    if h.mean() > 0:
        h = h * 2
    return h.sum(-1)


def _xw(n):
    return torch.randn(n, 5), torch.randn(5, 3)


def test_option_forms():
    sizes = [3, 5, 7, 2, 8]
    # False: every size its own trace (today's behaviour)
    g = sweep(mlp, _xw, sizes, dynamic=False)
    assert _traces(g) == len(sizes) and _dynamic_entries(g) == 0
    # True: every dim dynamic from the first call (x's 5 and w's 5 equal: one class;
    # a size of n equal to another dim, 3 or 5, would be another pattern: avoided here)
    g = sweep(mlp, _xw, [4, 6, 7, 2, 8], strict=True, dynamic=True)
    assert _traces(g) == 1 and _dynamic_entries(g) == 1
    # by name, by position, one dim or a list
    for spec in ({"x": 0}, {"x": [0]}, {0: [0]}, {0: 0}):
        g = sweep(mlp, _xw, sizes, dynamic=spec)
        assert _traces(g) == 1, spec
    # the decorator form
    deco = to_graph(dynamic=True, strict=True)(mlp)
    sweep(mlp, _xw, [4, 6, 7, 2, 8], g=deco)
    assert _traces(deco) == 1
    # to_graph of a to_graph function with other options is a new function
    assert to_graph(deco, strict=True, dynamic=True) is deco
    assert to_graph(deco, strict=True) is not deco


def test_option_errors_name_the_arguments():
    with pytest.raises(ValueError, match="'y' is not a tensor argument"):
        to_graph(mlp, dynamic={"y": 0})(*_xw(3))
    with pytest.raises(ValueError, match="no dimension 2"):
        to_graph(mlp, dynamic={"x": 2})(*_xw(3))
    with pytest.raises(TypeError, match="dynamic="):
        to_graph(mlp, dynamic="batch")(*_xw(3))


def test_module_and_method():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    wrapped = to_graph(net, strict=True)
    sweep(net, lambda n: (torch.randn(n, 4),), [3, 5, 7, 9], g=wrapped)
    assert _traces(wrapped) == 2 and _dynamic_entries(wrapped) == 1
    # True: the width (4) cannot be dynamic (Linear needs it): the batch alone is
    wrapped = to_graph(net, dynamic=True)
    sweep(net, lambda n: (torch.randn(n, 4),), [3, 5, 6], g=wrapped)
    assert _traces(wrapped) == 1
    import copy
    assert copy.deepcopy(wrapped).graph_function._dynamic.option is True

    class Scale:
        def __init__(self):
            self.k = 3.0

        @to_graph(dynamic=True)
        def run(self, x):
            return x * self.k if x.sum() > 0 else x - self.k
    obj = Scale()
    for n in (3, 6, 4):
        x = torch.randn(n, 2)
        assert_same(obj.run(x), Scale.run.python_function(obj, x))
    assert _traces(Scale.run.__get__(obj)) == 1


def test_gradients_through_the_dynamic_graph():
    def f(x, w):
        h = (x @ w).relu()
        if h.sum() > 0:
            h = h * x.shape[0]
        return h.pow(2).mean()
    g = to_graph(f, strict=True)
    for n in (3, 5, 7, 4):
        x = torch.randn(n, 4, requires_grad=True)
        w = torch.randn(4, 3, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        f(x, w).backward()
        g(x2, w2).backward()
        assert_same(x2.grad, x.grad)
        assert_same(w2.grad, w.grad)
    assert _dynamic_entries(g) == 1 and _traces(g) == 2


def test_static_graph_and_dynamic_graph_agree_on_layout_questions():
    """A non-contiguous argument is never dynamic (a trace answers stride() for the
    default layout): transposed inputs keep specializing, with eager's answers."""
    def f(x):
        return x.is_contiguous(), x.stride(), x * 2
    for strict in (False, True):
        g = sweep(f, lambda n: (torch.randn(3, n).T,), [3, 5, 7], strict=strict)
        assert _dynamic_entries(g) == 0
        g = sweep(f, lambda n: (torch.randn(n, 3),), [3, 5, 7], strict=strict)


def test_thirty_new_sizes_cost_one_more_trace():
    """Issue 14's measure: after the first two sizes, 30 new batch sizes reuse the
    dynamic graph (cache_info counts the traces and names the dynamic dims)."""
    def f(x, w):
        h = torch.tanh(x @ w)
        if h.mean() > 0:
            h = h * 2 + 1
        return h.sum(-1), x.shape[0]
    w = torch.randn(6, 4)
    g = sweep(f, lambda n: (torch.randn(n, 6), w), [4, 5] + list(range(6, 36)), strict=True)
    info = g.cache_info()
    assert info.traces == 2 and info.dynamic_dims == {"x": (0,)}, info
    assert info.fallbacks == 0
    g = sweep(f, lambda n: (torch.randn(n, 6), w), [4, 5, 6, 7], dynamic=False)
    assert g.cache_info().traces == 4 and g.cache_info().dynamic_dims == {}


def test_a_bound_on_a_dynamic_dim_follows_sizes_below_it():
    """x[:4] has 4 rows at 5 rows and at 10 (the sizes a dynamic trace tries), but 3 at
    3: the dim stays dynamic (was baked in as 4: y.shape[0] said 4 for 3 rows)."""
    def f(x):
        y = x[:4]
        return y.sum(0), y.shape[0] * 1.0, x.diagonal().shape[0] * 1.0, x[-2:].mean(0)
    g = sweep(f, lambda n: (torch.randn(n, 5),), [6, 8, 3, 2, 5, 9], strict=True)
    assert _dynamic_entries(g) == 1


# ------------------------------------------------------------------ a battery of size uses
def _pieces(x):
    return torch.split(x, [1, x.shape[0] - 1]), x.split(x.shape[0] // 2 + 1), x.chunk(2)


def _square(x):
    n = x.shape[0]
    m = torch.tril(torch.ones(n, n))
    return m @ x, (x[:, None, :] - x[None, :, :]).sum(-1), torch.eye(n)[: n // 2]


def _pools(x):
    return (F.avg_pool1d(x.T[None], 2).squeeze(0), F.max_pool1d(x.T[None], 3, ceil_mode=True),
            x.unfold(0, 2, 1).sum(-1), F.pad(x, (0, 0, 0, 8 - x.shape[0] % 8)))


def _sorts(x):
    return (x.max(0), x.topk(2, 0).values, torch.sort(x, 0).values, x.roll(1, 0).cumsum(0),
            x.narrow(0, 1, 2), x[x.shape[0] // 2:], torch.full((x.shape[0],), x.shape[0]))


def _loops(x):
    acc = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        acc = acc + x[i] * i
    i, s = 0, x[0] * 0
    while i < x.shape[0] and s.sum() < 3:
        s = s + x[i].abs()
        i += 1
    return acc, s, i


@pytest.mark.parametrize("fn, sizes", [
    (_pieces, [3, 5, 2, 8, 7, 1]), (_square, [3, 5, 2, 8, 7, 1]), (_pools, [3, 5, 2, 8, 7]),
    (_sorts, [3, 5, 8, 7, 4]), (_loops, [3, 5, 2, 8, 7, 1])], ids=lambda v: getattr(v, "__name__", ""))
def test_battery_of_size_uses(fn, sizes):
    """Each of these equals eager at every size (where eager runs) in strict mode, from
    one dynamic graph or (``_pieces``: how many pieces split makes changes at size 2)
    static ones."""
    sweep(fn, lambda n: (torch.randn(n, 4),), sizes, strict=True)


def test_numbers_from_sizes_promote_as_python_numbers():
    """A size (or float() of one) beside a 0-d tensor acts as the Python number it stands
    for: x.sum() / float(x.numel()) is float32 as eagerly (was float64: the stand-in is a
    0-d double, and torch promotes 0-d tensors by dtype)."""
    def f(x):
        return (x.sum() / float(x.numel()), x.sum() < x.shape[0] * 0.1,
                x.long().sum() // x.shape[0], x.int().sum() + x.shape[0], x / x.shape[0])
    for strict in (False, True):
        g = sweep(f, lambda n: (torch.randn(n, 3),), [2, 3, 5, 7, 4], strict=strict)
        assert _dynamic_entries(g) == 1


def test_a_size_as_a_dict_key_is_the_number():
    """{x.shape[0]: ...}.get(5) finds the key at 5 rows eagerly; a run-time size hashed
    by identity would miss it silently: hashing a size refuses the dynamic trace."""
    def f(x):
        return {x.shape[0]: x}.get(5, x * 0), x.shape[0] in {3, 5}
    for strict in (False, True):
        g = sweep(f, lambda n: (torch.randn(n, 2),), [3, 5, 4, 5, 7], strict=strict)
        assert _dynamic_entries(g) == 0
