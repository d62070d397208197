"""In-place writes to argument tensors convert: the graph writes the caller's tensors exactly
as eager does (they are not a Python side effect), in straight-line code, tensor branches and
loops; a Python object argument that the function mutates still falls back."""
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from fidelity_checks import converts, falls_back
from transpiler import ConversionError, FallbackWarning, to_graph


def setitem_straight(a, b, M):
    M[1] = a
    return a + b


def inplace_in_branch(a, b, M):
    t = a + b
    if t.sum() > 0:
        M.mul_(0.9)
        a.add_(0.25)
    else:
        M[0] = b
    return t


def setitem_in_loop_with_break(a, b, M):
    t = a + b
    for j in range(3):
        M[j % 2] = t * j
        if (t + a).sum() >= 0.5:
            break
        t = t - 1.0
    return t, M.sum()


def inplace_in_while(a, b, M):
    i = 0
    while i < 3 and a.sum() < 4.0:
        a.add_(1.0)
        M[1] += a
        i += 1
    return a * b


def _inputs():
    return [(torch.ones(3) * s, torch.linspace(-1, 1, 3), torch.arange(6.).view(2, 3))
            for s in (1.0, -1.0, 0.2)]


@pytest.mark.parametrize("fn", [setitem_straight, inplace_in_branch,
                                setitem_in_loop_with_break, inplace_in_while])
def test_inplace_writes_to_argument_tensors_convert(fn):
    converts(fn, *_inputs())


class Box:
    pass


def mutates_object_argument(a, box):
    box.v = a * 2
    return a + 1


def test_a_mutated_object_argument_converts_and_is_written_back():
    """A tensor the call stores in an argument object is a graph output written back to
    the caller's object (runtime.argument_objects), call after call."""
    g = to_graph(mutates_object_argument, strict=True)
    box_e, box_g = Box(), Box()
    for a in (torch.ones(3), torch.zeros(3), torch.arange(3.)):
        assert_same(g(a, box_g), mutates_object_argument(a, box_e))
        assert type(box_g.v) is torch.Tensor
        assert_same(box_g.v, box_e.v)


# ----------------------------------------------------------------- containers returned as themselves
# The trace receives rebuilt copies of the caller's lists and dicts (pytree); a result that
# returns one must hand back the caller's own object, as eager does (``out is lst``).
def _ret_list(x, lst):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 1
    return y, lst


def _ret_dict_kw(x, *, opts):
    return x + opts["shift"], opts


def _ret_nested(x, pair):
    lst = pair[1]
    if x.sum() > 0:
        return x * 2, lst
    return x - 1, lst


def _ret_twice_in_dict(x, lst):
    return {"a": lst, "b": (x + 1, lst)}


def _ret_odict(x, od):
    return x * od["k"], od


def _calls(fn, make, strict):
    g = to_graph(fn, strict=strict)
    for x in (torch.ones(3), -torch.ones(3)):
        arg = make()
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x, **arg) if isinstance(arg, dict) and fn is _ret_dict_kw else g(x, arg)
        exp_arg = make()
        exp = fn(x, **exp_arg) if fn is _ret_dict_kw else fn(x, exp_arg)
        yield got, exp, arg, exp_arg


@pytest.mark.parametrize("strict", [True, False])
def test_returned_argument_list_is_the_callers(strict):
    for got, exp, arg, _ in _calls(_ret_list, lambda: [1, torch.zeros(2)], strict):
        assert got[1] is arg
        assert torch.equal(got[0], exp[0])


@pytest.mark.parametrize("strict", [True, False])
def test_returned_keyword_dict_is_the_callers(strict):
    g = to_graph(_ret_dict_kw, strict=strict)
    for shift in (1.0, 2.0):
        opts = {"shift": shift}
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            y, back = g(torch.ones(2), opts=opts)
        assert back is opts and torch.equal(y, torch.ones(2) + shift)


@pytest.mark.parametrize("strict", [True, False])
def test_returned_nested_argument_list(strict):
    for got, exp, arg, _ in _calls(_ret_nested, lambda: (torch.ones(1), [3, 4]), strict):
        assert got[1] is arg[1]
        assert torch.equal(got[0], exp[0])


@pytest.mark.parametrize("strict", [True, False])
def test_argument_list_returned_twice_stays_one(strict):
    for got, exp, arg, _ in _calls(_ret_twice_in_dict, lambda: [1, 2], strict):
        assert got["a"] is arg and got["b"][1] is arg
        got["a"].append(0)
        assert got["b"][1][-1] == 0


@pytest.mark.parametrize("strict", [True, False])
def test_returned_argument_ordered_dict(strict):
    import collections
    for got, exp, arg, _ in _calls(_ret_odict,
                                   lambda: collections.OrderedDict(k=torch.tensor(2.0)), strict):
        assert got[1] is arg and type(got[1]) is collections.OrderedDict
        assert torch.equal(got[0], exp[0])


class _Box:
    def __init__(self, items):
        self.items = items


def _object_holding_argument(x, lst):
    return x + 1, _Box(lst)


def test_object_made_by_the_call_holding_an_argument_list_falls_back():
    """The object is rebuilt per call and would hold a copy: eager's holds the caller's."""
    lst = [1, 2]
    with pytest.warns(FallbackWarning, match="holds a list the caller passed in"):
        out = to_graph(_object_holding_argument)(torch.ones(2), lst)
    assert out[1].items is lst
    with pytest.raises(ConversionError):
        to_graph(_object_holding_argument, strict=True)(torch.ones(2), lst)
