"""``torch.compiler.is_compiling()`` asked by an installed library while tracing is True.

Libraries branch on it to take the path written to be a graph (transformers' attention
masks skip a data-dependent ``return None``); the two paths compute the same values. The
user's own code gets eager's answer (False), so its result stays eager's; outside a trace,
and when a call falls back to eager, it is False as usual. The "library" here is a module
written under a ``site-packages`` directory, as pip installs one.
"""
import importlib.util
import textwrap
import warnings

import pytest
import torch

from transpiler import FallbackWarning, to_graph

LIBRARY = '''
import torch

def mask_or_none(m):
    # transformers' masking_utils: a data-dependent None, skipped when compiling
    if not torch.compiler.is_compiling() and bool((m == 1).all()):
        return None
    return m.bool()

def compiling():
    return torch.compiler.is_compiling()
'''


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv") / "lib" / "site-packages"
    root.mkdir(parents=True)
    (root / "maskinglib.py").write_text(textwrap.dedent(LIBRARY))
    spec = importlib.util.spec_from_file_location("maskinglib", root / "maskinglib.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("strict", [False, True])
def test_library_compile_path_converts_and_matches(lib, strict):
    def with_mask(x, m):
        mask = lib.mask_or_none(m)
        if mask is None:
            return x * 2
        return torch.where(mask, x * 2, torch.zeros_like(x))

    g = to_graph(with_mask, strict=strict)
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for m in (torch.ones(3, 4, dtype=torch.long), torch.randint(0, 2, (3, 4))):
            torch.testing.assert_close(g(x, m), with_mask(x, m))


def test_library_sees_true_only_while_tracing(lib):
    def f(x):
        return x + 1 if lib.compiling() else x - 1

    g = to_graph(f, strict=True)
    torch.testing.assert_close(g(torch.ones(2)), torch.full((2,), 2.0))   # traced: True
    assert not torch.compiler.is_compiling()    # the flag torch keeps was never touched
    torch.testing.assert_close(g(torch.zeros(2)), torch.ones(2))          # the cached graph
    torch.testing.assert_close(f(torch.ones(2)), torch.zeros(2))          # eager: False


@pytest.mark.parametrize("strict", [False, True])
def test_user_code_gets_eagers_answer(strict):
    def f(x):
        if torch.jit.is_scripting() or torch.compiler.is_compiling():
            return x
        if x.sum() > 0:
            return x * 2
        return x * 3

    g = to_graph(f, strict=strict)
    for x in (torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 2.0])):
        torch.testing.assert_close(g(x), f(x))


def test_eager_fallback_sees_false(lib):
    def f(x):
        seen = lib.compiling()
        return x.tolist(), seen            # not a graph: falls back on the trace

    g = to_graph(f)
    with pytest.warns(FallbackWarning):
        assert g(torch.ones(2))[1] is False
