"""Class-private names in converted methods are mangled as Python compiles them
(transpiler/converters/private_names.py): ``self.__scale`` in ``Net.forward`` reads
``self._Net__scale``. Before, the generated code (compiled outside the class) read
``self.__scale``: an AttributeError fallback, or silently the ``except AttributeError``
path."""
import pytest
import torch
from torch import nn

from transpiler import to_code, to_graph

pytestmark = pytest.mark.filterwarnings("error::transpiler.FallbackWarning")


class Net(nn.Module):
    def __init__(self, scale=3.0):
        super().__init__()
        self.__scale = scale
        self.lin = nn.Linear(3, 3)

    def __double(self, t):
        return t * 2

    def forward(self, x, __bias=0.5):
        try:
            s = self.__scale
        except AttributeError:
            s = 1.0
        h = self.__double(self.lin(x)) + __bias
        if h.sum() > 0:
            h = h * s
        else:
            h = h - s

        def __inner(t):
            return t + self.__scale
        return __inner(h)


class _Leading(nn.Module):
    """A class name with a leading underscore: the prefix is ``_Leading``."""

    def __init__(self):
        super().__init__()
        self.__k = torch.tensor(2.0)

    def forward(self, x):
        return x * self.__k if x.sum() > 0 else x - self.__k


class Outer(nn.Module):
    class __Block(nn.Module):            # a nested class: its methods mangle with its name
        def __init__(self):
            super().__init__()
            self.__w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.__w

    def __init__(self):
        super().__init__()
        self.block = Outer.__Block()
        self.__gain = 1.5

    def forward(self, x):
        return self.block(x) * self.__gain, getattr(self, "_Outer__gain"), hasattr(self, "__gain")


def _check(m, *calls):
    g = to_graph(m)
    s = to_graph(m, strict=True)
    for args in calls:
        want = m(*args)
        for got in (g(*args), s(*args)):
            if isinstance(want, tuple):
                for a, b in zip(want, got):
                    if isinstance(a, torch.Tensor):
                        torch.testing.assert_close(b, a, rtol=0, atol=0)
                    else:
                        assert a == b
            else:
                torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("make", [Net, lambda: Net(-2.0), _Leading, Outer],
                         ids=["net", "net_negative", "leading_underscore", "nested_class"])
def test_private_names_match_eager(make):
    torch.manual_seed(0)
    m = make()
    _check(m, (torch.randn(2, 3),), (torch.randn(4, 3) + 3,), (-torch.ones(1, 3) * 5,))


def test_generated_code_reads_the_mangled_names():
    code = to_code(Net().forward)
    assert "self._Net__scale" in code and "self._Net__double" in code
    assert "self.__scale" not in code


def test_gradients_through_private_parameters():
    torch.manual_seed(1)
    m = Outer()
    x = torch.randn(2, 3)
    (a, *_), (b, *_) = m(x), to_graph(m)(x)
    a.sum().backward()
    want = m.block._Block__w.grad.clone()
    m.zero_grad()
    b.sum().backward()
    torch.testing.assert_close(m.block._Block__w.grad, want)


class Optional(nn.Module):
    def __init__(self, scale=None):
        super().__init__()
        if scale is not None:
            self.__scale = scale

    def forward(self, x):
        try:
            s = self.__scale
        except AttributeError:
            s = 1.0
        return x * s


@pytest.mark.parametrize("scale", [None, 3.0])
def test_an_optional_private_attribute_takes_eagers_path(scale):
    m = Optional(scale)
    _check(m, (torch.randn(2, 3),), (torch.randn(3),))
    assert to_graph(m)(torch.ones(1)).item() == (scale or 1.0)


def plain_function(x, __n=2):
    """Outside a class nothing is mangled."""
    __local = x * __n
    return __local


def test_functions_outside_classes_are_not_mangled():
    x = torch.randn(3)
    torch.testing.assert_close(to_graph(plain_function)(x), plain_function(x))
