"""Session.run feeds: accepted forms, dtype/shape checks, FeedError before anything runs."""
import numpy as np
import pytest
import torch

import runtime
from runtime import FeedError

F32 = torch.float32


@pytest.fixture
def seed(graph):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    return a, b, torch.matmul(a, b)


EXPECTED = torch.tensor([[2.0, 4.0], [6.0, 8.0]])


@pytest.mark.parametrize("feed", [
    torch.tensor([[2.0, 0.0], [0.0, 2.0]]),
    np.array([[2.0, 0.0], [0.0, 2.0]], dtype=np.float32),
    np.array([[2.0, 0.0], [0.0, 2.0]]),                       # float64 into float32, like TF
    [[2.0, 0.0], [0.0, 2.0]],
    [[2, 0], [0, 2]],                                         # ints into a float placeholder
    torch.tensor([[2.0, 0.0], [0.0, 2.0]], dtype=torch.float64),
    ((2.0, 0.0), (0.0, 2.0)),
], ids=["tensor", "np32", "np64", "list", "intlist", "t64", "tuples"])
def test_feed_forms(seed, run, same, feed):
    a, b, c = seed
    same(run(c, {a: feed}), EXPECTED)


def test_result_dtype_follows_placeholder(graph, run):
    x = runtime.placeholder(torch.float64, shape=(2,), name="x")
    i = runtime.placeholder(torch.int32, shape=(2,), name="i")
    got = run([x * 2, i + 1], {x: np.array([1.0, 2.0], dtype=np.float32), i: [1, 2]})
    assert got[0].dtype == torch.float64 and got[1].dtype == torch.int32
    assert got[1].tolist() == [2, 3]


def test_bool_and_int_placeholders(graph, run, same):
    m = runtime.placeholder(torch.bool, shape=(3,), name="m")
    n = runtime.placeholder(torch.int64, shape=(3,), name="n")
    y = torch.where(m, n, -n)
    same(run(y, {m: [True, False, True], n: np.array([1, 2, 3])}), torch.tensor([1, -2, 3]))


def test_scalar_placeholder(graph, run, same):
    s = runtime.placeholder(F32, shape=(), name="s")
    same(run(s * 3, {s: 2.0}), torch.tensor(6.0))
    same(run(s * 3, {s: np.float64(2.0)}), torch.tensor(6.0))


def test_none_dims_accept_several_sizes(graph, run, same):
    x = runtime.placeholder(F32, shape=(None, 2), name="x")
    y = runtime.placeholder(F32, shape=(None, None), name="y")
    for n, m in [(1, 1), (3, 4), (7, 2), (0, 5)]:
        vx, vy = torch.randn(n, 2), torch.randn(2, m)
        same(run(x @ vy.new_ones(2, 1), {x: vx}), vx @ torch.ones(2, 1))
        same(run(x @ y, {x: vx, y: vy}), vx @ vy)


def test_fetch_needs_only_its_placeholders(graph, run, same):
    a = runtime.placeholder(F32, shape=(2,), name="a")
    b = runtime.placeholder(F32, shape=(2,), name="b")
    same(run(a + 1, {a: [1.0, 2.0]}), torch.tensor([2.0, 3.0]))
    same(run(runtime.constant([1.0, 2.0]) * 2), torch.tensor([2.0, 4.0]))   # no feeds needed
    same(run([a * 2, b], {a: [1.0, 1.0], b: [0.5, 0.5]}),
         [torch.tensor([2.0, 2.0]), torch.tensor([0.5, 0.5])])


def test_feeding_an_unneeded_placeholder_is_fine(graph, run, same):
    a = runtime.placeholder(F32, shape=(2,), name="a")
    b = runtime.placeholder(F32, shape=(2,), name="b")
    same(run(a + 1, {a: [1.0, 2.0], b: [0.0, 0.0]}), torch.tensor([2.0, 3.0]))


def test_session_runs_again_with_new_feeds(seed, graph, same):
    a, b, c = seed
    with runtime.Session() as sess:
        for k in range(3):
            v = torch.eye(2) * k
            same(sess.run(c, {a: v}), v @ torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert sess.graph is graph


def test_session_for_another_graph(seed, same):
    other = runtime.Graph()
    with other.as_default():
        x = runtime.placeholder(F32, shape=(1,), name="x")
        y = x + 10
    a, b, c = seed
    with runtime.Session(other) as sess:
        same(sess.run(y, {x: [1.0]}), torch.tensor([11.0]))
        with pytest.raises(runtime.GraphError):
            sess.run(c, {a: torch.eye(2)})
    runtime.verify(other)


def test_closed_session_refuses(seed):
    a, b, c = seed
    sess = runtime.Session()
    sess.close()
    with pytest.raises(runtime.GraphError, match="closed"):
        sess.run(c, {a: torch.eye(2)})


# ------------------------------------------------------------------------ feed errors
class Spy:
    """Counts how often a graph op runs: a FeedError must come before anything runs."""
    calls = 0

    @staticmethod
    def fn(x):
        Spy.calls += 1
        return x


@pytest.fixture
def spied(graph):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    n = runtime.placeholder(torch.int64, shape=(3,), name="counts")
    node = graph.add_node("spy", Spy.fn, (a.node,), meta=a.node.meta)
    from runtime.symbolic import wrap_node
    Spy.calls = 0
    return a, n, wrap_node(node) + n.sum()


def _fails(run, fetch, feed, *words):
    with pytest.raises(FeedError) as excinfo:
        run(fetch, feed)
    msg = str(excinfo.value)
    for w in words:
        assert w in msg, msg
    assert Spy.calls == 0, "the graph ran before the feed was checked"
    return msg


def test_missing_feed_names_placeholder(spied, run):
    a, n, out = spied
    _fails(run, out, {a: torch.eye(2)}, "counts")
    _fails(run, out, {}, "counts", "input_a")
    _fails(run, out, None, "input_a")


def test_feed_for_non_placeholder(spied, run):
    a, n, out = spied
    s = n.sum()
    _fails(run, out, {a: torch.eye(2), n: [1, 2, 3], s: 5}, s.name, "placeholder")


def test_feed_for_non_placeholder_by_name(spied, run, graph):
    a, n, out = spied
    b = runtime.constant([1.0], name="const_b")
    assert b.name == "const_b"
    _fails(run, out, {a: torch.eye(2), n: [1, 2, 3], "const_b": [2.0]}, "const_b")


def test_wrong_shape_names_placeholder_and_shapes(spied, run):
    a, n, out = spied
    msg = _fails(run, out, {a: torch.ones(2, 3), n: [1, 2, 3]}, "input_a", "(2, 3)", "(2, 2)")
    assert "shape" in msg
    _fails(run, out, {a: torch.ones(4), n: [1, 2, 3]}, "input_a", "(4,)")
    _fails(run, out, {a: torch.eye(2), n: [1, 2]}, "counts", "(2,)", "(3,)")
    _fails(run, out, {a: torch.eye(2), n: 3}, "counts")


def test_wrong_rank_for_none_dims(graph, run):
    x = runtime.placeholder(F32, shape=(None, 2), name="x")
    Spy.calls = 0
    with pytest.raises(FeedError, match="'x'"):
        run(x * 2, {x: torch.ones(2)})
    with pytest.raises(FeedError, match="'x'"):
        run(x * 2, {x: torch.ones(3, 3)})


@pytest.mark.parametrize("value, ph_dtype", [
    (torch.ones(3), torch.int64),                          # float into int64
    ([1.5, 2.0, 3.0], torch.int64),
    (np.ones(3, dtype=np.float32), torch.int32),
    ([True, False, True], torch.float32),                  # bool into float
    (torch.tensor([True, False, True]), torch.int64),      # bool into int
    ([1, 0, 1], torch.bool),                               # int into bool
    (torch.ones(3, dtype=torch.complex64), torch.float32),
])
def test_wrong_dtype_kind(graph, run, value, ph_dtype):
    p = runtime.placeholder(ph_dtype, shape=(3,), name="p")
    Spy.calls = 0
    node = graph.add_node("spy", Spy.fn, (p.node,), meta=p.node.meta)
    from runtime.symbolic import wrap_node
    with pytest.raises(FeedError) as excinfo:
        run(wrap_node(node), {p: value})
    msg = str(excinfo.value)
    assert "'p'" in msg and str(ph_dtype) in msg and "dtype" in msg, msg
    assert Spy.calls == 0


def test_unconvertible_feed(graph, run):
    p = runtime.placeholder(F32, shape=(2,), name="p")
    with pytest.raises(FeedError, match="'p'"):
        run(p + 1, {p: "hello"})
    with pytest.raises(FeedError, match="'p'"):
        run(p + 1, {p: [[1.0], 2.0]})


def test_unknown_name_as_feed_key_or_fetch(graph, run):
    p = runtime.placeholder(F32, shape=(2,), name="p")
    with pytest.raises(runtime.GraphError, match="nope"):
        run(p + 1, {"nope": [1.0, 2.0]})
    with pytest.raises(runtime.GraphError, match="nope"):
        run("nope", {p: [1.0, 2.0]})
