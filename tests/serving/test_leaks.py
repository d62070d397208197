"""Leaks (issue 14, item 3): converted functions made, traced and dropped free everything.

Closures of one factory and functions of distinct source (each its own code object, as
generated modules or notebook cells make them) are converted, traced, called, and
dropped; after ``gc.collect()`` the GraphFunctions, the user functions, their graphs and
a wrapped module are gone (weak references dead), and the tables kept for generated code
(``linecache``'s ``<tograph...>`` files, source maps, the executor's line tables, the
conversion caches) are back to their size before. RSS: a second batch of functions must
not grow the process like the first (it grew ~33 KB per function, linearly, before).
While a function lives, its generated code stays readable: an error raised in the graph
names the generated line's text.
"""
import gc
import linecache
import os
import weakref
import warnings

import pytest
import torch

from runtime import executor, source_info
from runtime.options import options
from tests.e2e.e2e_helpers import assert_same
from transpiler import api, conversion, to_graph

X = torch.tensor([1.0, -2.0, 3.0, 4.0])


@pytest.fixture(scope="module", autouse=True)
def no_kernels():
    with options.override(compiler=False):     # (kernels are content-addressed and shared)
        yield


def made(k):
    def f(x, n):
        if x.sum() > 0:
            return x * n + 1
        return x - n
    return f


def distinct(k):
    """A function with its own source file and code object (registered in linecache the
    way an interactive session does)."""
    source = (f"def gen_{k}(x, n):\n    if x.sum() > {k % 3}:\n        return x * n + {k}\n"
              f"    return x - n\n")
    filename = f"<tograph-test-leaks-{k}>.py"      # (not a '<tograph' generated file)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[f"gen_{k}"], filename


def tables():
    return {"linecache": sum(1 for name in list(linecache.cache)
                             if name.startswith("<tograph") and "test-leaks" not in name),
            "source maps": len(source_info._SOURCE_MAPS),
            "line tables": len(executor._LINE_NODES),
            "converted": len(api._CONVERTED),
            "compiled": len(conversion._cache)}


def collect():
    gc.collect()        # (the generated code's finalizers free line tables, whose graphs
    gc.collect()        # are cycles: collected by the next pass)




def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def run_batch(make, count, start=0, refs=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(start, start + count):
            fn = make(k)
            fn = fn[0] if isinstance(fn, tuple) else fn
            g = to_graph(fn)
            assert_same(g(X, 2.0), fn(X, 2.0))
            assert_same(g(X, 2.0), fn(X, 2.0))
            if refs is not None:
                entry = next(iter(g._entries.values()))
                refs += [weakref.ref(g), weakref.ref(fn), weakref.ref(entry.graph),
                         weakref.ref(entry.optimized), weakref.ref(entry.fn)]
    if count:
        del g, fn


@pytest.mark.parametrize("make", [made, distinct], ids=["closures", "distinct-code"])
def test_dropped_functions_are_freed(make):
    run_batch(make, 3)                          # warm: first-use caches of the process
    collect()
    before = tables()
    refs = []
    run_batch(make, 12, start=100, refs=refs)
    collect()
    alive = [r() for r in refs if r() is not None]
    assert not alive, f"{len(alive)} of {len(refs)} objects alive: {alive[:5]}"
    assert tables() == before


def test_dropped_module_wrapper_frees_the_module():
    refs = []
    for _ in range(5):
        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        m = to_graph(net)
        assert_same(m(X), net(X))
        m.eval()
        assert_same(m(X), net(X))
        refs += [weakref.ref(net), weakref.ref(m), weakref.ref(m.graph_function)]
    del net, m
    collect()
    assert not [r for r in refs if r() is not None]


def test_memory_does_not_grow_with_each_function():
    run_batch(made, 20)
    collect()
    start = rss_mb()
    run_batch(made, 60)
    collect()
    first = rss_mb()
    run_batch(made, 60, start=60)
    collect()
    second = rss_mb()
    # before: about 33 KB a function, kept forever (+2 MB for each batch of 60); now the
    # second batch reuses the first's memory (+0.1-0.3 MB measured)
    assert second - first < 1.0, (f"RSS grew {first - start:.1f} MB over the first 60 "
                                  f"functions and {second - first:.1f} MB over the next 60")




def test_generated_code_stays_readable_while_alive():
    def f(x, y):
        if x.sum() > 0:
            return x @ y                      # shapes do not fit: fails when the graph runs
        return x

    g = to_graph(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g.graph(torch.ones(2, 3), torch.ones(3, 2))         # traced for fitting shapes
        entry = next(iter(g._entries.values()))
    collect()
    source = entry.optimized and linecache.getlines(entry.executable.filename)
    assert source and "def " in "".join(source)
    with pytest.raises(RuntimeError) as info:
        entry.executable.fn(torch.ones(2, 3), torch.ones(4, 2))
    error = executor.located(info.value)
    assert "generated code: <tograph-exec-" in str(error)
    assert str(error).rstrip().split(": ")[-1], str(error)  # the line's text, not empty
    filename = entry.executable.filename
    del g, entry, info, error
    collect()
    assert filename not in linecache.cache and filename not in executor._LINE_NODES
