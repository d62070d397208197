"""Calls with keyword arguments take the cached fast path (the key holds the keywords, in
order, and each value as a positional argument's would be): same results as eager, a new
trace where a value, name or order differs, guards still checked."""
import pytest
import torch

from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph

pytestmark = pytest.mark.filterwarnings("ignore:.*was traced")
SCALE = [2.0]


def f(x, y=None, scale=1.0, mask=None):
    out = x * scale if y is None else x * y + scale
    if mask is not None:
        out = out.masked_fill(mask, 0.0)
    if out.sum() > 0:
        out = out * SCALE[0]
    return out


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, ids, attention_mask=None, decoder_ids=None):
        h = self.lin(ids)
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        if decoder_ids is not None:
            h = h + decoder_ids.sum()
        return {"out": h}


CALLS = [
    lambda t: ((t[0],), {"y": t[1]}),
    lambda t: ((t[0],), {"scale": 3.0}),
    lambda t: ((t[0],), {"scale": -0.0}),
    lambda t: ((t[0],), {"scale": 0.0}),
    lambda t: ((t[0],), {"y": t[1], "scale": 2}),
    lambda t: ((t[0],), {"scale": 2, "y": t[1]}),
    lambda t: ((), {"x": t[0], "y": t[1]}),
    lambda t: ((), {"y": t[1], "x": t[0]}),
    lambda t: ((t[0],), {"mask": t[0] > 0}),
    lambda t: ((t[0].double(),), {"y": t[1].double()}),
]


@pytest.mark.parametrize("strict", [False, True])
def test_keyword_calls_equal_eager(strict):
    g = to_graph(f, strict=strict)
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        t = (torch.randn(5, generator=gen), torch.randn(5, generator=gen))
        for make in CALLS:
            args, kwargs = make(t)
            assert_same(g(*args, **kwargs), f(*args, **kwargs))


def test_guard_is_checked_on_the_keyword_fast_path():
    g = to_graph(f)
    x = torch.ones(3)
    for value in (2.0, 5.0):
        SCALE[0] = value
        try:
            for _ in range(2):
                assert_same(g(x, y=x), f(x, y=x))
        finally:
            SCALE[0] = 2.0


@pytest.mark.parametrize("strict", [False, True])
def test_module_with_keyword_inputs(strict):
    m = Net().eval()
    g = to_graph(m, strict=strict)
    with torch.no_grad():
        for seed in (0, 1, 2):
            gen = torch.Generator().manual_seed(seed)
            ids = torch.randn(2, 3, 4, generator=gen)
            mask = (torch.rand(2, 3, generator=gen) > 0.5).float()
            dec = torch.randn(2, 2, generator=gen)
            for kwargs in ({"attention_mask": mask}, {"decoder_ids": dec},
                           {"attention_mask": mask, "decoder_ids": dec}, {}):
                assert_same(g(ids, **kwargs), m(ids, **kwargs))
        m.train()                                   # train/eval is part of the key
        assert_same(g(ids, attention_mask=mask), m(ids, attention_mask=mask))
