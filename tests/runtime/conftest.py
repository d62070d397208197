"""Fixtures for the runtime tests: a fresh default graph per test, verified afterwards.

Every test that builds a graph gets it from ``graph`` (or ``fresh_graph()`` inside a
hypothesis test): the graph is the default one while the test runs and ``runtime.verify``
checks it when the test body finishes without an error.
"""
import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402
import torch  # noqa: E402

import runtime  # noqa: E402


@contextlib.contextmanager
def _fresh_graph():
    graph = runtime.Graph()
    with graph.as_default():
        yield graph
    runtime.verify(graph)


@pytest.fixture(scope="session")
def fresh_graph():
    """A factory: ``with fresh_graph() as g:`` builds in a new default graph, then verifies it.

    Session-scoped so that hypothesis tests can use it (one graph per example)."""
    return _fresh_graph


@pytest.fixture
def graph():
    """A new default graph for this test; verified when the test body returns."""
    with _fresh_graph() as g:
        yield g


@pytest.fixture
def run(graph):
    """``run(fetches, feed_dict)``: Session.run on this test's graph."""
    def _run(fetches, feed_dict=None):
        runtime.verify(graph)
        with runtime.Session(graph) as sess:
            return sess.run(fetches, feed_dict)
    return _run


def assert_same(got, expected):
    """Same structure, dtypes, shapes and values (float within 1e-5, ints exact)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert tuple(got.shape) == tuple(expected.shape), (tuple(got.shape), tuple(expected.shape))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) or (isinstance(got, tuple) and isinstance(expected, tuple)), \
            (type(got), type(expected))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys()
        for k in expected:
            assert_same(got[k], expected[k])
    else:
        assert got == expected and type(got) is type(expected), (got, expected)


def assert_meta_matches(symbolic, eager):
    """The symbolic tensor's static shape/dtype describe the eager result (None = any)."""
    meta = symbolic.node.meta
    assert meta.dtype == eager.dtype, (meta.dtype, eager.dtype)
    assert meta.shape is not None and len(meta.shape) == eager.dim(), (meta.shape, eager.shape)
    for d, e in zip(meta.shape, eager.shape):
        assert d is None or d == e, (meta.shape, tuple(eager.shape))


@pytest.fixture(scope="session")
def same():
    return assert_same


@pytest.fixture(scope="session")
def meta_matches():
    return assert_meta_matches


@pytest.fixture(scope="module")
def module_kernel_cache(suite_kernel_cache):
    """Kernels built in this module go to the suite's kernel cache (``tests/conftest.py``:
    compiled once, not in every run; use it with
    ``pytestmark = pytest.mark.usefixtures("module_kernel_cache")``)."""
    from runtime.options import options
    with options.override(cache_dir=suite_kernel_cache):
        yield
