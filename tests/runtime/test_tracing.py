"""Tracing torch code on symbolic tensors: every result run in a Session equals eager torch."""
import os

import pytest
import torch
import torch.nn.functional as F

import runtime
from runtime import TracingError

F32 = torch.float32
THIS_FILE = os.path.basename(__file__)


def trace_and_run(graph, run, same, meta_matches, fn, *values, dynamic=False):
    """fn on placeholders for ``values`` -> run -> compare with fn(*values) eagerly."""
    phs = [runtime.placeholder(v.dtype, shape=tuple(None if dynamic else d for d in v.shape),
                               name=f"in{i}") for i, v in enumerate(values)]
    sym = fn(*phs)
    expected = fn(*[v.clone() for v in values])
    for s, e in zip(_leaves(sym), _leaves(expected)):
        assert isinstance(s, runtime.SymbolicTensor), type(s)
        meta_matches(s, e)
    got = run(sym, dict(zip(phs, values)))
    same(got, expected)
    return sym


def _leaves(v):
    if isinstance(v, (tuple, list)):
        return [x for item in v for x in _leaves(item)]
    return [v]


X = torch.tensor([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]])
Y = torch.tensor([[2.0, 1.0, -3.0], [1.0, 0.25, 2.0]])
I = torch.tensor([[3, -7, 2], [5, 1, -4]])


# ------------------------------------------------------------------------ the seed program
def test_seed_program(graph, run, same):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    c = torch.matmul(a, b)
    assert [n.op for n in graph.nodes] == ["placeholder", "constant", "matmul"]
    feed = {a: [[2.0, 0.0], [0.0, 2.0]]}
    same(run(c, feed), torch.tensor([[2.0, 4.0], [6.0, 8.0]]))
    same(run([c, b], feed), [torch.tensor([[2.0, 4.0], [6.0, 8.0]]),
                             torch.tensor([[1.0, 2.0], [3.0, 4.0]])])


def test_symbolic_tensor_prints_node_not_values(graph):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    c = torch.matmul(a, b)
    for text in (str(c), repr(c), f"{c}"):
        assert c.name in text
        assert "(2, 2)" in text and "float32" in text
        assert "tensor(" not in text and "1." not in text and "[[" not in text
    assert c.name == "matmul_1"
    assert tuple(c.shape) == (2, 2) and c.dtype == F32
    assert "const_b" in str(b) and "1." not in str(b)


def test_nested_fetches_and_names(graph, run, same):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    c = torch.matmul(a, b)
    d = c + 1
    va = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    vc = va @ torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    got = run({"c": c, "pair": (d, [b, c])}, {a: va})
    same(got, {"c": vc, "pair": (vc + 1, [torch.tensor([[1.0, 2.0], [3.0, 4.0]]), vc])})
    same(run((c,), {a: va}), (vc,))
    same(run(c.name, {"input_a": va}), vc)
    same(run([c.name, "const_b"], {"input_a:0": va}), [vc, torch.tensor([[1.0, 2.0], [3.0, 4.0]])])


# ------------------------------------------------------------------------ operators and methods
@pytest.mark.parametrize("fn", [
    lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y,
    lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x ** 2, lambda x, y: 2 ** y,
    lambda x, y: -x, lambda x, y: abs(x), lambda x, y: x @ y.T, lambda x, y: 1 - x,
    lambda x, y: 3 / y, lambda x, y: x < y, lambda x, y: x >= 0.5, lambda x, y: x == y,
    lambda x, y: x != y, lambda x, y: (x > 0) & (y > 0), lambda x, y: (x > 0) | (y > 0),
    lambda x, y: (x > 0) ^ (y > 0), lambda x, y: ~(x > 0),
], ids=lambda f: f.__code__.co_firstlineno and "op")
def test_operators(graph, run, same, meta_matches, fn):
    trace_and_run(graph, run, same, meta_matches, fn, X, Y)


@pytest.mark.parametrize("fn", [
    lambda i: i + 1, lambda i: i * 2.5, lambda i: i // 2, lambda i: i % 3, lambda i: i & 5,
    lambda i: i << 1, lambda i: i.float(), lambda i: i.sum(), lambda i: i / 2,
])
def test_integer_operators_and_promotion(graph, run, same, meta_matches, fn):
    trace_and_run(graph, run, same, meta_matches, fn, I)


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(), lambda x: x.sum(1), lambda x: x.mean(0, keepdim=True),
    lambda x: x.reshape(3, 2), lambda x: x.view(-1), lambda x: x.transpose(0, 1), lambda x: x.T,
    lambda x: x.permute(1, 0), lambda x: x.softmax(-1), lambda x: x.clamp(min=0.0),
    lambda x: x.exp().log1p(), lambda x: x.to(torch.float64), lambda x: x.int(),
    lambda x: x.unsqueeze(0).expand(4, 2, 3), lambda x: x.max(), lambda x: x.argmax(1),
    lambda x: x.flatten(), lambda x: x.cumsum(1), lambda x: x.sort(1).values,
    lambda x: torch.where(x > 0, x, torch.zeros_like(x)), lambda x: x.new_ones(2),
    lambda x: x.masked_fill(x < 0, 0.0), lambda x: x.abs().sqrt(), lambda x: x.type_as(I),
])
def test_methods_and_functions(graph, run, same, meta_matches, fn):
    trace_and_run(graph, run, same, meta_matches, fn, X)


@pytest.mark.parametrize("fn", [
    lambda x: x[0], lambda x: x[:, 1], lambda x: x[1:, ::2], lambda x: x[..., None],
    lambda x: x[None], lambda x: x[..., -1], lambda x: x[:, None, 1:], lambda x: x[-1, ...],
    lambda x: x[x > 0], lambda x: x[torch.tensor([1, 0, 1])], lambda x: x[:, [2, 0]],
    lambda x: x[torch.tensor([True, False])], lambda x: x[0, 0],
])
def test_indexing(graph, run, same, meta_matches, fn):
    trace_and_run(graph, run, same, meta_matches, fn, X)


def test_index_with_symbolic_tensor(graph, run, same, meta_matches):
    trace_and_run(graph, run, same, meta_matches, lambda x, i: x[i], X, torch.tensor([1, 1, 0]))


def test_index_with_0d_symbolic_tensor(graph, run, same, meta_matches):
    trace_and_run(graph, run, same, meta_matches, lambda x, i: x[i], X, torch.tensor(1))


def test_stack_and_cat_of_lists(graph, run, same, meta_matches):
    trace_and_run(graph, run, same, meta_matches,
                  lambda x, y: (torch.stack([x, y, x]), torch.cat([x, y], 1),
                                torch.cat((x, torch.ones(1, 3))), torch.stack([x[0], y[1]], 1)),
                  X, Y)


def test_multi_output_ops(graph, run, same, meta_matches):
    sym = trace_and_run(graph, run, same, meta_matches,
                        lambda x: (tuple(torch.max(x, 0)), x.split(1, 0), x.chunk(3, 1),
                                   torch.split(x, [1, 2], 1), x.unbind(1)), X)
    values, indices = torch.max(runtime.placeholder(F32, shape=(2, 3)), 1)
    assert values.dtype == F32 and indices.dtype == torch.int64
    assert len(sym[2]) == 3


def test_max_with_dim_keeps_named_fields(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    result = torch.max(x, 0)
    got = run([result.values, result.indices], {x: X})
    expected = torch.max(X, 0)
    same(got, [expected.values, expected.indices])


def test_linear_functional_and_module(graph, run, same, meta_matches):
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 4)
    w, b = torch.randn(5, 3), torch.randn(5)
    with torch.no_grad():
        sym = trace_and_run(graph, run, same, meta_matches,
                            lambda x: (F.linear(x, w, b), layer(x), F.relu(layer(x))), X)
    assert any(n.op == "linear" for n in graph.nodes)
    assert tuple(sym[1].shape) == (2, 4)


def test_conv2d(graph, run, same, meta_matches):
    torch.manual_seed(0)
    img, weight = torch.randn(1, 2, 6, 5), torch.randn(4, 2, 3, 3)
    sym = trace_and_run(graph, run, same, meta_matches,
                        lambda x: F.conv2d(x, weight, padding=1, stride=(2, 1)), img)
    assert tuple(sym.shape) == (1, 4, 3, 5)
    assert any(n.op == "conv2d" for n in graph.nodes)


def test_conv2d_module_with_dynamic_batch(graph, run, same):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(2, 3, 3)
    x = runtime.placeholder(F32, shape=(None, 2, 5, 5), name="x")
    with torch.no_grad():
        y = conv(x)
        assert y.node.meta.shape == (None, 3, 3, 3)
        for n in (1, 3):
            v = torch.randn(n, 2, 5, 5)
            same(run(y, {x: v}), conv(v))


# ------------------------------------------------------------------------ in-place ops
def test_inplace_result_matches_eager(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    y = x.clone()
    z = y.add_(1)
    got = run(z, {x: X})
    same(got, X.clone().add_(1))


def test_inplace_chain_and_setitem_on_result(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    y = x * 1
    y = y.mul_(2)
    z = y.add_(1)
    e = X * 1
    e.mul_(2)
    e.add_(1)
    same(run(z, {x: X}), e)


def test_inplace_mutation_seen_through_original_tensor(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    y = x.clone()
    y.add_(1)
    y[0] = 5.0
    expected = X.clone()
    expected.add_(1)
    expected[0] = 5.0
    same(run(y, {x: X}), expected)


def test_setitem_with_symbolic_value(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    v = runtime.placeholder(F32, shape=(3,), name="v")
    y = torch.zeros(2, 3) + x
    y[0] = v
    expected = torch.zeros(2, 3) + X
    expected[0] = Y[1]
    same(run(y, {x: X, v: Y[1]}), expected)


def test_inplace_on_placeholder_does_not_mutate_feed(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    y = x.add_(1)
    feed = X.clone()
    first = run(y, {"x": feed})
    same(first, X + 1)
    same(feed, X)                               # the caller's tensor is untouched
    same(run(y, {"x": feed}), first)            # and a second run gives the same values


# ------------------------------------------------------------------------ dynamic sizes
@pytest.mark.parametrize("fn, shape", [
    (lambda x: torch.nonzero(x), (None, 2)),
    (lambda x: torch.masked_select(x, x > 0), (None,)),
    (lambda x: x[x > 0], (None,)),
    (lambda x: x[x.sum(1) > 0], (None, 3)),
    (lambda x: torch.unique(x), (None,)),
])
def test_data_dependent_sizes_are_dynamic(graph, run, same, fn, shape):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    y = fn(x)
    assert y.node.meta.shape == shape
    for v in (X, -X, torch.zeros(2, 3), torch.ones(2, 3)):
        same(run(y, {x: v}), fn(v))


def test_nonzero_of_dynamic_input_keeps_rank_column(graph):
    x = runtime.placeholder(F32, shape=(None, 3), name="x")
    assert torch.nonzero(x).node.meta.shape == (None, 2)


def test_dynamic_result_flows_into_later_ops(graph, run, same):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    pos = x[x > 0]
    out = (pos * 2).sum() + pos.numel()
    for v in (X, -X, torch.ones(2, 3)):
        same(run(out, {x: v}), (v[v > 0] * 2).sum() + v[v > 0].numel())


def test_none_dims_propagate(graph, run, same):
    x = runtime.placeholder(F32, shape=(None, 3), name="x")
    w = torch.randn(3, 4)
    y = x @ w
    s = (x * 2).sum(1)
    t = torch.cat([x, x], 0)
    r = x.reshape(-1)
    assert y.node.meta.shape == (None, 4)
    assert s.node.meta.shape == (None,)
    assert t.node.meta.shape == (None, 3)
    assert r.node.meta.shape == (None,)
    assert x.shape[1] == 3
    for n in (1, 2, 5):
        v = torch.randn(n, 3)
        same(run([y, s, t, r], {x: v}), [v @ w, (v * 2).sum(1), torch.cat([v, v]), v.reshape(-1)])


def test_placeholder_with_unknown_shape(graph, run, same):
    x = runtime.placeholder(F32, shape=None, name="x")
    y = torch.relu(x) + 1
    assert y.node.meta.shape is None
    for v in (torch.randn(3), torch.randn(2, 4)):
        same(run(y, {x: v}), torch.relu(v) + 1)


def test_len_of_static_dim_is_python_int(graph):
    x = runtime.placeholder(F32, shape=(4, None), name="x")
    assert len(x) == 4 and isinstance(len(x), int)
    assert x.dim() == 2


# ------------------------------------------------------------------------ concrete values refused
def _check_tracing_error(excinfo, line):
    msg = str(excinfo.value)
    assert f"{THIS_FILE}:{line}" in msg, msg
    assert "control flow" in msg and "conversion" in msg, msg


@pytest.mark.parametrize("what", ["bool", "int", "float", "len", "tolist", "index"])
def test_concrete_values_raise_tracing_error(graph, what):
    x = runtime.placeholder(F32, shape=(None, 3), name="x")
    s = x.sum()
    fn = {
        "bool": lambda: bool(s),
        "int": lambda: int(s),
        "float": lambda: float(s),
        "len": lambda: len(x),
        "tolist": lambda: s.tolist(),
        "index": lambda: [1, 2, 3][s.long()],
    }[what]
    with pytest.raises(TracingError) as excinfo:
        fn()
    _check_tracing_error(excinfo, fn.__code__.co_firstlineno)


def test_item_is_a_graph_value_standing_for_the_number(graph):
    """``s.item()`` (``loss.item()`` for logging) is the detached 0-d value as a float64
    graph value (runtime/item_values.py); Python control flow on it still needs conversion."""
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    v = x.sum().item()
    assert isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype == torch.float64
    assert not v.requires_grad

    def f():
        return 1 if v > 0 else 0
    with pytest.raises(TracingError) as excinfo:
        f()
    _check_tracing_error(excinfo, f.__code__.co_firstlineno + 1)


def test_if_on_symbolic_tensor_raises(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")

    def f():
        if x.sum() > 0:
            return 1
        return 0
    with pytest.raises(TracingError) as excinfo:
        f()
    _check_tracing_error(excinfo, f.__code__.co_firstlineno + 1)


def test_while_on_symbolic_tensor_raises(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")

    def f(v):
        while v.sum() < 10:
            v = v + 1
        return v
    with pytest.raises(TracingError) as excinfo:
        f(x)
    _check_tracing_error(excinfo, f.__code__.co_firstlineno + 1)


def test_for_over_symbolic_tensor_raises(graph):
    x = runtime.placeholder(F32, shape=(None, 3), name="x")

    def f():
        total = 0
        for row in x:
            total = total + row
        return total
    with pytest.raises(TracingError) as excinfo:
        f()
    _check_tracing_error(excinfo, f.__code__.co_firstlineno + 2)


def test_for_over_symbolic_tensor_of_static_rows_unbinds(graph):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")     # eager: x.unbind(0)
    rows = list(x)
    assert len(rows) == 2 and all(tuple(r.shape) == (3,) for r in rows)


def test_data_dependent_python_value_raises(graph):
    x = runtime.placeholder(F32, shape=(2, 3), name="x")
    with pytest.raises(TracingError):
        x.sum().tolist()
    with pytest.raises(TracingError):
        x.numpy()
