"""Threads (issue 14, item 1): converted functions called from many threads at once.

Eight threads make the first calls of a fresh converted function together (a barrier
lines them up), over several shapes, in default and strict mode, for a few rounds of fresh
functions: tensor ``if``, tensor ``while``, tensor ``for``, an ``nn.Module``. Every result
equals eager, nothing falls back, strict mode never raises, and one signature is traced
once however many threads asked for it at once (traces hold ``runtime.threads``'s lock;
the others wait and take the entry). A function that falls back warns once per signature,
not once per thread. One compiled graph with fused C kernels, planned memory and a
recycled large output runs from eight threads at once on different inputs, each result
equal to eager and unchanged by the other threads' calls. While one thread is stopped in
the middle of a trace, another runs eager torch code, a cached graph and a hand-built
graph, and sees none of the trace.
"""
import sys
import threading
import warnings

import pytest
import torch

import runtime
from runtime.kernels import compiler
from runtime.options import options
from runtime.symbolic import current_graph, is_symbolic
from tests.e2e.e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph
from transpiler.api import GraphFunction

THREADS = 8
CALLS = 6               # per thread and round
ROUNDS = 2              # fresh functions per test
TIMEOUT = 60            # a thread still running after this is a deadlock


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(tmp_path_factory):
    with options.override(cache_dir=str(tmp_path_factory.mktemp("kernels"))):
        yield


@pytest.fixture
def no_compiler():
    """Fused groups run as torch ops (tracing is under test, not building kernels: one
    test runs compiled kernels from many threads)."""
    with options.override(compiler=False):
        yield


# ----------------------------------------------------------------------------- programs
def branchy(x, w):
    y = x @ w
    if y.sum() > 0:
        y = torch.relu(y) * 2 + 1
    else:
        y = torch.tanh(y) - 1
    return y


def looping(x):
    s = torch.zeros_like(x)
    steps = 0
    while s.sum() < 10.0:
        s = s + x.abs() + 0.5
        steps += 1
    return s, steps


def counting(x):
    acc = x[0] * 0
    for i in range((x > 0).sum()):
        acc = acc * 0.5 + x[i % x.shape[0]]
    return acc


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.mean() > 0:
            h = h * torch.sigmoid(h)
        else:
            h = -h
        return h


LOG = []


def appends_in_loop(x):
    """Falls back: appends to a global list in a tensor loop (an effect a graph cannot repeat)."""
    n = 0
    while x.sum() > n:
        LOG.append(n)
        n += 1
    return x * 2


def _inputs(kind, shape, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    return (x, torch.randn(shape[-1], 3, generator=gen)) if kind == "branchy" else (x,)


PROGRAMS = {"branchy": branchy, "looping": looping, "counting": counting}
SHAPES = {"branchy": [(2, 4), (3, 4), (5, 4)], "looping": [(3,), (4, 2), (6,)],
          "counting": [(4,), (6,), (9,)], "module": [(2, 4), (3, 4), (5, 4)]}


# ----------------------------------------------------------------------------- helpers
def _run_threads(work, n=THREADS):
    """Run ``work(k)`` on ``n`` threads released together; the exceptions they raised."""
    barrier = threading.Barrier(n)
    errors = []

    def run(k):
        try:
            barrier.wait()
            work(k)
        except BaseException as e:          # noqa: BLE001 -- reported by the test
            errors.append(e)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread never finished (deadlock?)"
    return errors


def _count_traces(g: GraphFunction):
    """Count ``g``'s traces (each call of ``_build_entry``: it traces, optimizes, lowers)."""
    counts = []
    build = g._build_entry

    def counted(*args, **kwargs):
        counts.append(args[0])
        return build(*args, **kwargs)
    g._build_entry = counted
    return counts


def _fresh(kind, strict):
    if kind == "module":
        module = Gate()
        return module, to_graph(module, strict=strict)
    return PROGRAMS[kind], to_graph(PROGRAMS[kind], strict=strict)


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("kind", ["branchy", "looping", "counting", "module"])
def test_cold_function_from_many_threads(kind, strict, no_compiler):
    """Eight threads' first calls of a fresh function over three shapes: every result
    equals eager, nothing falls back or raises, in default and strict mode."""
    for round_ in range(ROUNDS):
        eager, g = _fresh(kind, strict)
        shapes = SHAPES[kind]
        cases = [[_inputs(kind, shapes[(k + j) % len(shapes)], 100 * k + j + round_)
                  for j in range(CALLS)] for k in range(THREADS)]
        with torch.no_grad():
            expected = [[eager(*args) for args in row] for row in cases]
        got = [[None] * CALLS for _ in range(THREADS)]

        def work(k):
            with torch.no_grad():
                for j, args in enumerate(cases[k]):
                    got[k][j] = g(*args)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            errors = _run_threads(work)
        assert not errors, f"round {round_}: {errors[0]!r}"
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        assert not fallbacks, fallbacks[0]
        for k in range(THREADS):
            for j in range(CALLS):
                assert_same(got[k][j], expected[k][j], f"thread {k} call {j}")


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_one_signature_is_traced_once(strict, no_compiler):
    """Eight threads call a fresh function with the same signature at the same moment: one
    trace; the others wait for it and run its graph (no retrace, no second entry)."""
    for round_ in range(3):
        g = to_graph(branchy, strict=strict)
        traces = _count_traces(g)
        x = [torch.randn(3, 4) for _ in range(THREADS)]
        w = torch.randn(4, 3)
        got = [None] * THREADS

        def work(k):
            got[k] = g(x[k], w)
        with warnings.catch_warnings():
            warnings.simplefilter("error")      # no fallback, no retracing warning
            errors = _run_threads(work)
        assert not errors, repr(errors[0])
        assert len(traces) == 1, f"round {round_}: traced {len(traces)} times"
        for k in range(THREADS):
            assert_same(got[k], branchy(x[k], w))


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_gradients_from_many_threads(strict, no_compiler):
    """Eight threads' first calls with inputs that require grad, each thread running
    backward through its own result: every gradient equals eager's."""
    g = to_graph(branchy, strict=strict)
    shapes = SHAPES["branchy"]
    cases = [_inputs("branchy", shapes[k % len(shapes)], 7 * k) for k in range(THREADS)]
    expected = []
    for x, w in cases:
        x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
        (branchy(x, w) ** 2).sum().backward()
        expected.append((x.grad, w.grad))
    got = [None] * THREADS

    def work(k):
        x, w = (t.clone().requires_grad_() for t in cases[k])
        (g(x, w) ** 2).sum().backward()
        got[k] = (x.grad, w.grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        errors = _run_threads(work)
    assert not errors, repr(errors[0])
    for k in range(THREADS):
        assert_same(got[k], expected[k], f"thread {k} gradients")


def test_fallback_from_many_threads_warns_once_per_signature(no_compiler):
    """A function that cannot be converted: each thread's calls run eagerly and equal
    eager; the warning comes once per signature, not once per thread; strict mode raises
    ConversionError (its reason), never another error."""
    shapes = [(3,), (5,)]
    g = to_graph(appends_in_loop)
    cases = [torch.full(shapes[k % 2], 0.25 * (k + 1)) for k in range(THREADS)]
    got = [None] * THREADS

    def work(k):
        got[k] = g(cases[k])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        errors = _run_threads(work)
    assert not errors, repr(errors[0])
    fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert 1 <= len(fallbacks) <= len(shapes), [str(w.message) for w in fallbacks]
    assert all("appends" in str(w.message) or "LOG" in str(w.message) for w in fallbacks)
    for k in range(THREADS):
        assert_same(got[k], cases[k] * 2)

    strict = to_graph(appends_in_loop, strict=True)
    raised = []

    def strict_work(k):
        try:
            strict(cases[k])
        except ConversionError as e:
            raised.append(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # (each thread traces: strict caches no failure)
        assert not _run_threads(strict_work)
    assert len(raised) == THREADS


def fused_and_planned(x, y):
    a = torch.tanh(x * y + 1.0)             # one kernel, a 4 MB output: recycled by calls
    c = x[:64, :64] @ y[:64, :64]
    d = torch.relu(c) + c.exp()             # one kernel, planned into c's dead buffer
    return a, d


def test_one_compiled_graph_from_many_threads():
    """A graph with fused kernels (compiled when a compiler is present), planned memory and
    a recycled large output, run by eight threads at once on different inputs: every
    result equals eager and stays as it was while the other threads keep calling."""
    g = to_graph(fused_and_planned, strict=True)
    shape = (1024, 1024)
    inputs = [(torch.randn(shape), torch.randn(shape)) for _ in range(THREADS)]
    with torch.no_grad():
        g(*inputs[0])                        # traced and compiled before the threads start
    optimized = g.get_concrete(*inputs[0]).optimized
    fused = [n for n in optimized.walk() if n.op == "fused"]
    assert fused, "nothing fused: the test would not exercise the kernels"
    if compiler.compiler_available():
        assert all(n.target.compiled for n in fused)
        assert any("_rec" in getattr(n.target.launcher, "__globals__", {}) for n in fused)
    assert any(n.kwargs.get("out") is not None for n in fused), "no planned buffer"
    expected = [fused_and_planned(*args) for args in inputs]
    kept = [[] for _ in range(THREADS)]

    def work(k):
        with torch.no_grad():
            for j in range(3):
                index = (k + j) % THREADS
                out = g(*inputs[index])
                _close(out, expected[index], f"thread {k} call {j}")
                if j != 1:
                    kept[k].append((index, out))     # held while the others call
    for round_ in range(2):
        errors = _run_threads(work)
        assert not errors, f"round {round_}: {errors[0]!r}"
        for row in kept:
            for index, out in row:
                _close(out, expected[index], "a kept result changed")
            row.clear()


def _close(got, expected, what):
    """Results of the same types and shapes, values as close as C and torch agree."""
    assert type(got) is type(expected) and len(got) == len(expected), what
    for a, b in zip(got, expected):
        assert type(a) is torch.Tensor and a.shape == b.shape and a.dtype == b.dtype, what
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), what


def test_eager_code_on_another_thread_sees_no_trace(no_compiler):
    """Thread A stops in the middle of tracing; meanwhile thread B runs eager torch code
    (a random factory, arithmetic), a cached graph of another function and a hand-built
    graph: B gets real tensors and right values (no symbolic state of A's, no waiting on
    A's lock); then A's trace finishes and converts."""
    inside, resume = threading.Lock(), threading.Lock()
    inside.acquire()
    resume.acquire()

    def pause():
        inside.release()                    # A is inside its trace now
        resume.acquire(timeout=TIMEOUT)
        resume.release()

    def stopping(x):
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        pause()
        return y - 3

    warm = to_graph(branchy, strict=True)
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    warm(x, w)                              # cached before A starts
    g = to_graph(stopping, strict=True)
    a_out, seen = [], {}

    def thread_a():
        a_out.append(g(torch.ones(3)))

    def thread_b():
        seen["graph"] = current_graph()
        r = torch.randn(3)
        seen["random"] = (type(r), is_symbolic(r))
        seen["sum"] = (torch.ones(2) + 1).tolist()
        seen["cached"] = warm(x, w)
        with runtime.Graph().as_default():
            a = runtime.placeholder(torch.float32, shape=(2,), name="a")
            b = a * 3
            with runtime.Session() as sess:
                seen["session"] = sess.run(b, feed_dict={a: [1.0, 2.0]})

    ta = threading.Thread(target=thread_a)
    ta.start()
    assert inside.acquire(timeout=TIMEOUT), "thread A never reached the middle of its trace"
    try:
        tb = threading.Thread(target=thread_b)
        tb.start()
        tb.join(TIMEOUT)
        assert not tb.is_alive(), "thread B waited on thread A's trace"
    finally:
        resume.release()
        ta.join(TIMEOUT)
    assert not ta.is_alive()
    assert seen["graph"] is None
    assert seen["random"] == (torch.Tensor, False)
    assert seen["sum"] == [2.0, 2.0]
    assert_same(seen["cached"], branchy(x, w))
    assert_same(seen["session"], torch.tensor([3.0, 6.0]))
    assert_same(a_out[0], torch.ones(3) * 2 + 1 - 3)
    assert [n.op for n in g.graph(torch.ones(3)).nodes if n.op == "cond"] == ["cond"]


BOX = {}


def test_a_traced_tensor_left_in_a_shared_object_is_refused_to_other_threads():
    """Thread A's traced code puts a graph value into a dict another thread can read, and
    stops there. Thread B's eager arithmetic on it raises GraphError (that value has no
    data), instead of recording into A's graph and handing B a symbolic tensor; A's call,
    which changed the dict, falls back and equals eager."""
    inside, resume = threading.Lock(), threading.Lock()
    inside.acquire()
    resume.acquire()

    def pause():
        if inside.locked():
            inside.release()
            resume.acquire(timeout=TIMEOUT)
            resume.release()

    def leaky(x):
        y = x + 1
        if y.sum() > 0:
            y = y * 2
        BOX["last"] = y
        pause()
        return y

    g = to_graph(leaky)
    out, seen = [], {}
    ta = threading.Thread(target=lambda: out.append(g(torch.ones(2))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ta.start()
        assert inside.acquire(timeout=TIMEOUT)
        try:
            leaked = BOX["last"]
            try:
                seen["result"] = leaked * 3
            except runtime.GraphError as e:
                seen["error"] = str(e)
        finally:
            resume.release()
            ta.join(TIMEOUT)
    assert "another thread is tracing" in seen.get("error", ""), seen
    assert_same(out[0], torch.full((2,), 4.0))
    assert any(issubclass(w.category, FallbackWarning) for w in caught)


def test_many_sizes_from_many_threads_with_a_small_cache(no_compiler):
    """Eight threads call with many batch sizes (dynamic shapes planned per new size, a
    cache limit of 2 evicting, fast keys linked and dropped) at once: every result equals
    eager and no call raises, in default and strict mode."""
    for strict in (False, True):
        g = to_graph(branchy, strict=strict, cache_limit=2)
        w = torch.randn(4, 3)
        sizes = [[1 + (5 * k + 3 * j) % 23 for j in range(12)] for k in range(THREADS)]
        cases = [[torch.randn(n, 4) for n in row] for row in sizes]
        got = [[None] * 12 for _ in range(THREADS)]

        def work(k):
            for j, x in enumerate(cases[k]):
                got[k][j] = g(x, w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # (retracing, the cache limit)
            errors = _run_threads(work)
        assert not errors, repr(errors[0])
        for k in range(THREADS):
            for j, x in enumerate(cases[k]):
                assert_same(got[k][j], branchy(x, w), f"thread {k} size {x.shape[0]}")


def test_signature_cache_changes_from_many_threads():
    """Fast keys linked by eight threads at once into a cache at its bound (each link
    drops the oldest): no KeyError or 'dictionary changed size' from a race, and the
    bound holds. (Threads switch every microsecond here, to make races likely.)"""
    from transpiler.signature_cache import FAST_PER_ENTRY, SignatureCache

    class Entry:
        pass
    cache = SignatureCache(limit=2)
    entries = [Entry(), Entry()]
    cache["a"], cache["b"] = entries

    def work(k):
        for j in range(5000):
            cache.link_fast((k, j), entries[j % 2])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        errors = _run_threads(work)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, repr(errors[0])
    assert len(cache.fast) == FAST_PER_ENTRY * cache.limit
