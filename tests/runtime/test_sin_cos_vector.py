"""A kernel computing sin(x) and cos(x) of one x (the backward of a sin chain recomputes
sin's forward next to its derivative) keeps both as calls of their vector versions: gcc
would merge them into one scalar ``sincosf`` per element, which stops the loop vectorizing
(``compiler.FLAGS``: ``-fno-builtin-sin``...). Checked by the built library's undefined
symbols and by the gradients, against eager, of the chain that showed it (``loop_100``).
"""
import shutil
import subprocess

import pytest
import torch

from runtime.kernels import compiler, library
from runtime.kernels.codegen import KernelSpec, Operand, Step
from transpiler import to_graph

HAS_CC = compiler.compiler_available()

pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def chain(x):
    for _ in range(20):
        x = x * 0.99 + 0.01 * torch.sin(x)
    return x


@pytest.mark.parametrize("n", [1, 1000, 65537])
def test_sin_chain_gradients_match_eager(n):
    f = to_graph(chain, strict=True)
    for seed in (0, 1):
        x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3
        got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = f(got_x), chain(want_x)
        (g,), (w,) = (torch.autograd.grad(v.pow(2).sum(), [a])
                      for v, a in ((got, got_x), (want, want_x)))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HAS_CC or shutil.which("nm") is None, reason="needs a compiler, nm")
def test_sin_and_cos_of_one_value_stay_vector_calls():
    x = Operand("in", 0)
    spec = KernelSpec(dtype="float32", inputs=(("float32", "full"),),
                      steps=(Step("m_sin({0})", (x,)), Step("m_cos({0})", (x,)),
                             Step("({0} * {1})", (Operand("v", 0), Operand("v", 1)))),
                      outputs=((2, "float32"),))
    lib = compiler.build(library.source_for([(spec, "tg_sin_cos")]), name="sin_cos")
    symbols = subprocess.run(["nm", "-D", "--undefined-only", lib._name],
                             capture_output=True, text=True, check=True).stdout
    assert "sincos" not in symbols, symbols
    if "sinf" in library.vector_math():
        assert "_ZGV" in symbols, symbols           # the vector versions are called
