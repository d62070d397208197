"""Two inputs whose sizes differ by a constant (a mask one longer than a cache): one graph
serves every step (``runtime/size_probes.py``, ``transpiler/dynamic_shapes.py``).

A dynamic trace proves each op by probing it with the run-time sizes doubled. A size
computed as ``cache + 1`` doubles to ``2S + 1`` while the mask, an input of ``S + 1``,
doubles to ``2S + 2``: the probe cannot relate them and the dynamic graph was refused,
so every step traced again. A trace refused so (a shift of every size would have held)
is tried *shifted*: probed with all sizes grown by the same amount (and doubled; a dim is
static only when no probe changed it), its graph serving only calls whose dynamic sizes
keep the traced offsets from one another (part of its key). A call with other offsets
gets its own graph (or the static one), never this one.
"""
import pytest
import torch
import torch.nn.functional as F

from runtime import size_probes
from transpiler import to_graph
from transpiler.dynamic_shapes import DynamicShapes
from transpiler.retracing import serves

from tests.e2e.e2e_helpers import assert_same

pytestmark = pytest.mark.filterwarnings("ignore::transpiler.RetracingWarning")


def mask_over_cache(cache, mask):
    """transformers' ``masking_utils``: the mask expanded to the cache's length + 1."""
    kv = cache.shape[0] + 1
    pos = torch.arange(kv)
    m = mask[None, :].expand(2, kv)
    return (m * pos).sum(0), cache.sum() + mask.sum()


def mask_over_new(cache, new, mask):
    """kv = cache + new tokens; the mask as long (a loop adding ``new`` tokens a step)."""
    kv = cache.shape[0] + new.shape[0]
    return mask[None, :].expand(3, kv).float() * torch.arange(kv), new * 2


def sliced_by_intermediate(cache, mask):
    """The mask cut to the cache's length + 1 and expanded to it (an intermediate's size
    against a computed one); what is left after it depends on the offset (``mask[kv:]``
    has ``offset - 1`` items)."""
    kv = cache.shape[0] + 1
    head = mask[:kv]
    return head[None].expand(2, kv) * torch.arange(kv), mask[kv:].cumsum(0), \
        F.pad(cache, (1, 0))


def _run(fn, g, calls):
    for i, args in enumerate(calls):
        assert_same(g(*args), fn(*args), f"call {i}")


def _steps(n0, steps, offset=1, new=None):
    out = []
    for s in range(n0, n0 + steps):
        cache = torch.randn(s)
        mask = torch.randint(0, 3, (s + offset,))
        out.append((cache, mask) if new is None else (cache, torch.randn(new), mask))
    return out


@pytest.mark.parametrize("strict", [False, True])
def test_mask_one_longer_than_cache_is_one_graph(strict):
    g = to_graph(mask_over_cache, strict=strict)
    _run(mask_over_cache, g, _steps(4, 12))
    info = g.cache_info()
    assert info.traces == 2, info           # the first size, then one dynamic graph
    assert info.dynamic_dims == {"cache": (0,), "mask": (0,)}, info


def test_two_new_tokens_per_step():
    g = to_graph(mask_over_new)
    _run(mask_over_new, g, _steps(5, 10, offset=2, new=2))
    assert g.cache_info().traces <= 3, g.cache_info()


def test_size_of_an_intermediate():
    g = to_graph(sliced_by_intermediate)
    _run(sliced_by_intermediate, g, _steps(4, 10, offset=3))
    assert g.cache_info().traces <= 3, g.cache_info()


def test_other_offsets_get_other_graphs():
    """Calls whose sizes break the traced offset (3 instead of 2 items after the cache)
    are never served by that graph: ``mask[len(pos):]`` differs, and equals eager's."""
    g = to_graph(sliced_by_intermediate)
    _run(sliced_by_intermediate, g, _steps(4, 4, offset=2))
    before = g.cache_info().traces
    _run(sliced_by_intermediate, g, _steps(8, 3, offset=3) + _steps(12, 2, offset=2))
    assert g.cache_info().traces == before + 1, g.cache_info()   # one graph for offset 3
    _run(sliced_by_intermediate, g, _steps(20, 3, offset=3))
    assert g.cache_info().traces == before + 1, g.cache_info()


def test_broken_relation_fails_as_eager():
    """A mask two longer than the cache where the code needs one: eager's error, not a
    result from the graph traced for offset 1."""
    g = to_graph(mask_over_cache)
    _run(mask_over_cache, g, _steps(4, 5))
    cache, mask = torch.randn(12), torch.ones(14, dtype=torch.long)
    with pytest.raises(RuntimeError) as eager:
        mask_over_cache(cache, mask)
    with pytest.raises(RuntimeError) as got:
        g(cache, mask)
    assert type(got.value) is type(eager.value)


def test_unrelated_sizes_stop_trying_shifted_graphs():
    """Sizes whose offsets change every call: at most ``MAX_SHIFTED`` shifted graphs, then
    static traces; every result equals eager's."""
    g = to_graph(sliced_by_intermediate)
    calls = [(torch.randn(s), torch.randint(0, 3, (s + 1 + i,))) for i, s in enumerate(range(4, 14))]
    _run(sliced_by_intermediate, g, calls)
    info = g.cache_info()
    assert info.traces == len(calls) and info.misses == len(calls) + 1, info


def test_plan_keys_hold_offsets():
    """The shifted plan's key holds the offsets: other offsets, another key; the same
    offsets at other sizes, the same key."""
    d = DynamicShapes()

    def plan(s, offset):
        flat = [torch.zeros(s), torch.zeros(s + offset)]
        key = ("sig",) + tuple(("T", tuple(t.shape), torch.float32, False, torch.strided,
                                tuple(t.stride())) for t in flat)   # (api._leaf_key)
        return d.plan(key, flat, lambda: [("cache", [0]), ("mask", [1])]), key, flat
    plan(4, 1)
    p, key, flat = plan(5, 1)
    assert p is not None and not p.shifted
    size_probes.note_failure(True)
    shifted = d.refuse(p, key, flat)
    size_probes.clear_failure()
    assert shifted is not None and shifted.shifted
    again, _, _ = plan(9, 1)
    other, _, _ = plan(9, 2)
    assert again.key == shifted.key and again.shifted
    assert other.key != shifted.key and other.shifted
    # what the retrace messages and ``explain`` take the graph to serve: the same offsets
    assert serves(shifted.key, plan(20, 1)[1]) and not serves(shifted.key, plan(20, 3)[1])
    assert size_probes.take_pending()       # the trace that follows is probed shifted
    assert not size_probes.take_pending()


def test_plain_refusal_without_offset_is_unchanged():
    """A trace refused where no shift helps (a Linear's width) narrows to the batch dims as
    before: no shifted plan."""
    d = DynamicShapes(True)
    flat = [torch.zeros(3, 5)]
    key = ("sig", ("T", (3, 5), torch.float32, False, torch.strided, (5, 1)))
    p = d.plan(key, flat, lambda: [("x", [0])])
    size_probes.note_failure(False)
    narrower = d.refuse(p, key, flat)
    assert narrower is not None and not narrower.shifted and narrower.dims == {0: (0,)}
