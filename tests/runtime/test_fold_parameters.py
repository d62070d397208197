"""passes.fold_parameters: what only parameters, buffers and constants decide is computed
once and kept while the sources hold the same bytes; differential against eager."""
import warnings

import pytest
import torch

from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph


def _folded(g, *args, **kwargs):
    entry = g.graph_function.get_concrete(*args, **kwargs)
    return [n for n in entry.optimized.walk() if n.op == "folded"]


class Rotary(torch.nn.Module):
    """LLaMA's rotary embedding: cos/sin of positions times a buffer of frequencies."""

    def __init__(self, dim=8):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)),
                             persistent=False)

    def forward(self, x):
        pos = torch.arange(x.shape[-2], dtype=torch.float32)[None, :, None]
        freqs = pos * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        rotated = torch.cat((-x2, x1), dim=-1)
        return x * cos + rotated * sin


class Positions(torch.nn.Module):
    """GPT-2's position embeddings added to the input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wpe = torch.nn.Embedding(32, 8)

    def forward(self, x):
        pos = torch.arange(x.shape[1])[None]
        return x + self.wpe(pos)


class Buckets(torch.nn.Module):
    """T5's relative position bias: integer buckets updated in place, then an embedding."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.bias = torch.nn.Embedding(8, 2)

    def forward(self, x):
        n = x.shape[-1]
        rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        buckets = (rel > 0).to(torch.long) * 4
        buckets += torch.where(rel.abs() < 2, rel.abs(), torch.full_like(rel, 3))
        bias = self.bias(buckets).permute(2, 0, 1)[None]
        return torch.softmax(x + bias, dim=-1)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("make,shape", [(Rotary, (2, 2, 6, 8)), (Positions, (2, 5, 8)),
                                        (Buckets, (1, 2, 5, 5))])
@torch.no_grad()
def test_folded_equals_eager_and_follows_changes(make, shape, strict):
    m = make().eval()
    g = to_graph(m, strict=strict)
    x1, x2 = torch.randn(shape), torch.randn(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (x1, x2, x1):
            assert_same(g(x), m(x))
    folded = _folded(g, x1)
    assert len(folded) == 1
    kept = folded[0].target
    assert kept.computed == 1                 # computed once for three calls
    source = next(iter(list(m.buffers()) + list(m.parameters())))
    source.mul_(1.5)                          # in place: the version counter moves
    assert_same(g(x2), m(x2))
    source.data.mul_(0.5)                     # through .data: the counter does not move
    assert_same(g(x2), m(x2))
    source.data = torch.randn(source.shape)   # another tensor
    assert_same(g(x1), m(x1))
    m.load_state_dict({k: torch.randn(v.shape) for k, v in m.state_dict().items()})
    assert_same(g(x1), m(x1))
    computed = kept.computed
    assert computed >= 4                      # (a non-persistent buffer: not in the state dict)
    assert_same(g(x2), m(x2))
    assert kept.computed == computed


def test_sign_of_zero_is_a_change():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(4), requires_grad=False)

        def forward(self, x):
            return x + 1.0 / (self.p * 2)      # 1/(+0) = inf, 1/(-0) = -inf

    m = M()
    g = to_graph(m)
    x = torch.randn(4)
    assert_same(g(x), m(x))
    m.p.data[1] = -0.0                        # equal by ==, not by bits
    assert_same(g(x), m(x))
    assert g(x)[1] == float("-inf")


def test_gradients_flow_through_folded_values():
    m = Positions()
    g = to_graph(m)
    x = torch.randn(2, 5, 8, requires_grad=True)
    with torch.no_grad():
        assert_same(g(x), m(x))               # kept without autograd history
    out = g(x)
    out.pow(2).sum().backward()
    got = m.wpe.weight.grad.clone()
    m.wpe.weight.grad = None
    m(x).pow(2).sum().backward()
    assert_same(got, m.wpe.weight.grad)


def test_values_made_in_inference_mode_are_not_saved_for_backward():
    m = Positions()
    g = to_graph(m)
    x = torch.randn(2, 5, 8, requires_grad=True)
    with torch.inference_mode():
        assert_same(g(x), m(x))
    m.wpe.weight.requires_grad_(False)
    out = g(x)                                # would save an inference tensor for backward
    out.pow(2).sum().backward()
    expected = torch.autograd.grad(m(x).pow(2).sum(), x)[0]
    assert_same(x.grad, expected)


def test_returned_value_is_not_kept():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            table = (self.w * 2).exp()
            return x * table, table

    m = M()
    g = to_graph(m)
    x = torch.randn(3)
    with torch.no_grad():
        _, t1 = g(x)
        t1.zero_()                             # the caller changes what it got
        assert_same(g(x), m(x))


def test_buffer_the_graph_updates_is_not_folded():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(3))

        def forward(self, x):
            self.count.add_(1)
            return x * (self.count * 2).exp()

    m, ref = M(), M()
    g = to_graph(m)
    for _ in range(3):
        x = torch.randn(3)
        assert_same(g(x), ref(x))
    assert_same(m.count, ref.count)


class SharedOutput(torch.nn.Module):
    """A folded value read both by another folded op (``cat``) and by the rest of the
    graph: folding points the graph's readers at the folded node, which must not rewrite
    the folded members' own inputs (they crashed at the first call)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.5, 0.25, 0.125]))

    def forward(self, x):
        freqs = torch.arange(x.shape[-2], dtype=torch.float32)[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), -1)
        return x[..., :4] * freqs + (x * emb.cos()).sum(-1, keepdim=True)


def test_a_folded_value_also_read_by_a_folded_op():
    m = SharedOutput()
    g = to_graph(m, strict=True)
    for shape in ((2, 3, 8), (1, 5, 8)):
        x = torch.randn(*shape)
        assert_same(g(x), m(x))
        assert _folded(g, x)
