"""kernels.background: a cold first call runs fused groups as torch ops while a worker
thread compiles them; the kernels swap into the lowered code when built.

The worker's compiler run is held on an event, so that "not built yet" is a state the test
controls, not a race it hopes to win. Differential against eager throughout."""
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch

import runtime.kernels
from runtime.kernels import background, compiler
from runtime.kernels.launch import FusedKernel
from runtime.kernels.notices import KernelWarning
from runtime.options import options
from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(not compiler.compiler_available(), reason="no C compiler")


@pytest.fixture
def held(monkeypatch, tmp_path):
    """Background builds into an empty cache, each compiler run held until ``release()``."""
    gate = threading.Event()
    real = compiler.build_job

    def build_job(job, cached_only=False):
        if not cached_only:
            assert gate.wait(60), "the test never released the build"
        return real(job, cached_only)

    monkeypatch.setattr(compiler, "build_job", build_job)
    with options.override(kernel_build="background", cache_dir=str(tmp_path)):
        yield gate
        gate.set()
        assert runtime.kernels.wait(120)


def kernels(g, *args):
    entry = g.get_concrete(*args)
    return [n.target for n in entry.optimized.walk() if isinstance(n.target, FusedKernel)]


def globals_of(g, *args):
    return g.get_concrete(*args).executable.fn.__globals__


def act(x, b):
    return torch.tanh(x * 0.5 + b) * torch.sigmoid(x - b)


def act_loop(x, w):
    # a general while: its body has a matmul, so its test (a fused bool) is a predicate
    y = x
    while (y * y).sum() > 1.0:
        y = torch.tanh(y @ w) * 0.5
    return y


def inputs(seed, *shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


@pytest.mark.parametrize("strict", [False, True])
def test_first_calls_run_torch_ops_until_built_then_the_kernel(held, strict):
    g = to_graph(act, strict=strict)
    a, b = inputs(1, (8, 33), (33,)), inputs(2, (8, 33), (33,))
    assert_same(g(*a), act(*a))
    assert_same(g(*b), act(*b))                       # values not baked at trace time
    (k,) = kernels(g, *a)
    assert k.building and not k.compiled
    assert k in globals_of(g, *a).values()             # the lowered code calls the kernel
    # (>= 1: the guard's C helpers may be queued too on a cold cache)
    assert background.pending() >= 1 and not runtime.kernels.wait(0)
    held.set()
    assert runtime.kernels.wait(120) and background.pending() == 0
    assert k.compiled and not k.building
    names = globals_of(g, *a)
    assert k not in names.values() and k.launcher in names.values()   # swapped in
    assert_same(g(*a), act(*a))
    assert_same(g(*b), act(*b))


def test_python_numbers_and_second_shape(held):
    def f(x, s):
        return torch.relu(x * s + 1.0) - s
    g = to_graph(f)
    x1, x2 = inputs(3, (4, 5)) + inputs(4, (6, 5))
    assert_same(g(x1, 2.0), f(x1, 2.0))
    assert_same(g(x1, 3.0), f(x1, 3.0))
    held.set()
    assert runtime.kernels.wait(120)
    assert_same(g(x2, 2.0), f(x2, 2.0))               # a new trace: its kernels cached
    assert_same(g(x1, 3.0), f(x1, 3.0))


def test_loop_test_becomes_a_predicate_when_built(held):
    g = to_graph(act_loop)
    args = [torch.full((4, 4), 0.9), torch.eye(4) * 1.5]
    other = [torch.full((4, 4), 2.0), torch.eye(4) * 1.2]
    assert_same(g(*args), act_loop(*args))
    tests = [k for k in kernels(g, *args) if k._out_dtypes[0] == torch.bool]
    assert tests and all(k.building for k in tests)
    held.set()
    assert runtime.kernels.wait(120)
    names = globals_of(g, *args)
    assert all(k.predicate is not None and k.predicate in names.values() for k in tests)
    assert_same(g(*args), act_loop(*args))
    assert_same(g(*other), act_loop(*other))


def test_gradients_while_building_and_after(held):
    def loss(x, b):
        return act(x, b).sum()
    g = to_graph(loss)
    x, b = inputs(5, (6, 7), (7,))
    grads = []
    for _ in range(2):
        xs = [x.clone().requires_grad_(), b.clone().requires_grad_()]
        g(*xs).backward()
        grads.append([t.grad for t in xs])
        held.set()
        assert runtime.kernels.wait(120)
    xs = [x.clone().requires_grad_(), b.clone().requires_grad_()]
    loss(*xs).backward()
    for got in grads:
        for a, e in zip(got, [t.grad for t in xs]):
            assert torch.allclose(a, e, atol=1e-6)


def test_threads_calling_through_the_swap(held):
    g = to_graph(act)
    args = inputs(6, (16, 64), (64,))
    expected = act(*args)
    g(*args)
    errors, start = [], threading.Barrier(4)

    def caller():
        start.wait()
        for _ in range(200):
            try:
                torch.testing.assert_close(g(*args), expected, atol=1e-6, rtol=0)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                return

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    start.wait()
    held.set()                              # the swap lands while they call
    for t in threads:
        t.join()
    assert runtime.kernels.wait(120) and not errors
    assert all(k.compiled for k in kernels(g, *args))


def test_cached_library_binds_at_once(tmp_path):
    with options.override(kernel_build="sync", cache_dir=str(tmp_path)):
        to_graph(act)(*inputs(7, (3, 9), (9,)))             # builds it into the cache
    with options.override(kernel_build="background", cache_dir=str(tmp_path)):
        g = to_graph(act)
        args = inputs(8, (3, 9), (9,))
        assert_same(g(*args), act(*args))
        (k,) = kernels(g, *args)
        assert k.compiled and not k.building and background.pending() == 0


def test_sync_mode_binds_before_the_first_call_returns(tmp_path):
    with options.override(kernel_build="sync", cache_dir=str(tmp_path)):
        g = to_graph(act)
        args = inputs(9, (5, 11), (11,))
        assert_same(g(*args), act(*args))
        assert all(k.compiled and not k.building for k in kernels(g, *args))


def test_failed_background_build_warns_and_stays_on_torch(monkeypatch, tmp_path):
    def fail(job, cached_only=False):
        if cached_only:
            return None
        raise compiler.KernelBuildError("simulated background failure")

    monkeypatch.setattr(compiler, "build_job", fail)
    with options.override(kernel_build="background", cache_dir=str(tmp_path)):
        g = to_graph(act)
        args = inputs(10, (4, 6), (6,))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert_same(g(*args), act(*args))
            assert runtime.kernels.wait(120)
        assert any(issubclass(w.category, KernelWarning) and
                   "simulated background failure" in str(w.message) for w in caught)
        (k,) = kernels(g, *args)
        assert not k.compiled and not k.building
        assert_same(g(*args), act(*args))


def test_process_exit_finishes_the_running_build(tmp_path):
    script = tmp_path / "first_call.py"
    script.write_text("import torch\nfrom transpiler import to_graph\n\n\n"
                      "def f(x):\n    return torch.tanh(x * 0.25 + 1.0) * x\n\n\n"
                      "print(float(to_graph(f, strict=True)(torch.ones(3)).sum()))\n")
    env = dict(os.environ, TOGRAPH_KERNEL_BUILD="background", TOGRAPH_CACHE_DIR=str(tmp_path),
               PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(float(torch.tanh(torch.ones(3) * 0.25 + 1.0)
                                                     .sum()))
    built = [f for f in os.listdir(tmp_path / "kernels") if f.endswith(".so")]
    assert len(built) == 1                   # cached for the next process; no temp files
    assert not [f for f in os.listdir(tmp_path / "kernels") if f.endswith(".tmp")]
