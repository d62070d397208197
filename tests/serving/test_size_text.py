"""Text made from a dynamic size (issue 14, item 2): ``f"got {x.shape}"`` as the message of
``torch._assert`` / ``assert`` keeps the trace dynamic; any other use of such text (a
returned str, ``len``, a message bound first, a failing assert) traces the sizes static and
equals eager. Native code (a module run by ``nn.Sequential``, not converted) and converted
code both. Sizes 2, 3, 5, 8, 10: the text's length changes at 10.
"""
import warnings

import pytest
import torch
from torch import nn

from transpiler import FallbackWarning, to_graph

from tests.e2e.e2e_helpers import assert_same

SIZES = (2, 3, 5, 8, 10)
# the static-per-size cases retrace on purpose
pytestmark = pytest.mark.filterwarnings("ignore::transpiler.RetracingWarning")


def _traces(g) -> int:
    return g.cache_info().traces


def _sweep(eager, g, sizes=SIZES):
    for n in sizes:
        x = torch.randn(n, 3)
        assert_same(g(x.clone()), eager(x.clone()))


# ------------------------------------------------------------------ converted code
def conv_torch_assert(x):
    torch._assert(x.dim() == 2, f"Expected (batch, width) got {x.shape}")
    return x * 2 + 1


def conv_torch_assert_kw(x):
    torch._assert(x.dim() == 2, message="got {}".format(x.shape))
    return x.sum(0)


def conv_assert_stmt(x):
    assert x.dim() == 2, f"Expected 2-d, got {x.shape} ({x.shape[0]} rows)"
    return x.relu()


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn", [conv_torch_assert, conv_torch_assert_kw, conv_assert_stmt])
def test_converted_assert_message_stays_dynamic(fn, strict):
    g = to_graph(fn, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        _sweep(fn, g)
    assert _traces(g) <= 2 and g.cache_info().dynamic_dims == {"x": (0,)}


def conv_returns_text(x):
    return x * 2, f"{x.shape}"


def conv_len_of_text(x):
    return x * len(f"{x.shape}")


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn", [conv_returns_text, conv_len_of_text])
def test_converted_text_used_as_str_equals_eager(fn, strict):
    g = to_graph(fn, strict=strict)
    _sweep(fn, g)


def conv_print_shape(x):
    print("shape", x.shape, f"[{x.shape}]")
    return x + 1


def test_converted_print_of_shape_at_every_size(capsys):
    g = to_graph(conv_print_shape, strict=True)
    for n in SIZES:
        x = torch.randn(n, 3)
        capsys.readouterr()
        exp = conv_print_shape(x)
        want = capsys.readouterr().out
        got = g(x)
        assert capsys.readouterr().out == want and "torch.Size" in want
        assert_same(got, exp)


def conv_failing_assert(x):
    torch._assert(x.dim() == 3, f"Expected 3-d got {x.shape}")
    return x


def test_converted_failing_assert_raises_eagers_message():
    g = to_graph(conv_failing_assert)
    for n in (2, 3, 5):
        with pytest.raises(AssertionError, match=rf"Expected 3-d got torch\.Size\(\[{n}, 3\]\)"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            g(torch.randn(n, 3))


# ------------------------------------------------------------------ native code
def _native(block):
    """``block`` run by torch's own ``nn.Sequential.forward`` (not converted), as ViT's
    encoder blocks are: the outer Sequential is the converted top level."""
    return nn.Sequential(nn.Sequential(block))


class _Asserts(nn.Module):
    def forward(self, x):
        torch._assert(x.dim() == 2, f"Expected (batch_size, width) got {x.shape}")
        return x * 3


class _AssertsBound(nn.Module):
    def forward(self, x):
        message = f"got {x.shape}"             # bound first: the text could go anywhere
        torch._assert(x.dim() == 2, message)
        return x * 3


class _Returns(nn.Module):
    def forward(self, x):
        return x - 1, f"{x.shape}"


class _Len(nn.Module):
    def forward(self, x):
        return x * len(f"{x.shape}")            # a call, but not torch._assert


class _Wrapper(nn.Module):
    """A function named like an assert that keeps the message: not torch._assert."""
    def __init__(self):
        super().__init__()
        self.seen = []

    def _assert(self, cond, message):
        self.seen.append(message)
        return cond

    def forward(self, x):
        self._assert(x.dim() == 2, f"{x.shape}")
        return x * len(self.seen[-1])


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("block, dynamic", [(_Asserts, True), (_AssertsBound, False),
                                            (_Returns, False), (_Len, False)])
def test_native_text_of_size(block, dynamic, strict):
    eager = _native(block())
    g = to_graph(_native(block()), strict=strict)
    _sweep(eager, g)
    if dynamic:
        assert _traces(g) <= 2 and g.cache_info().dynamic_dims == {"input": (0,)}


def test_native_wrapper_named_assert_sees_eagers_text():
    eager, conv = _native(_Wrapper()), _native(_Wrapper())
    g = to_graph(conv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        _sweep(eager, g)
    assert conv[0][0].seen and all("tograph" not in m for m in conv[0][0].seen)


class _FailingAssert(nn.Module):
    def forward(self, x):
        torch._assert(x.dim() == 3, f"Expected 3-d got {x.shape}")
        return x


def test_native_failing_assert_raises_eagers_message():
    g = to_graph(_native(_FailingAssert()))
    for n in (2, 3, 5):
        with pytest.raises(AssertionError, match=rf"Expected 3-d got torch\.Size\(\[{n}, 3\]\)"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            g(torch.randn(n, 3))


def _shape_arithmetic(x):
    a, b = x.shape[1:], x.shape[:1] + (3,)
    c, d = (1,) + x.shape, x.shape * 2
    print(a, b, c, d, type(a).__name__, type(c).__name__)
    return x.new_zeros(b) + x.sum(), len(d), a == torch.Size([3]), str(a)


def test_slices_sums_and_repeats_of_a_run_time_shape_stay_sizes(capsys):
    """``x.shape[1:]`` of a shape with a run-time dimension was a plain tuple in the
    dynamic graph (printed ``(3,)``, eager ``torch.Size([3])``); so were ``+`` and ``*``."""
    g = to_graph(_shape_arithmetic)
    for n in (2, 4, 1, 6, 3):
        x = torch.ones(n, 3)
        want = _shape_arithmetic(x)
        eager_text = capsys.readouterr().out
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x)
        assert capsys.readouterr().out == eager_text
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
