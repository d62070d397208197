"""State the converted function writes part of: the parts it only reads stay guarded.

A dict (list, object) the function writes one entry of -- a carried number, a ``+=``
counter, a kept tensor, an appended list -- must still be guarded on its other entries: the
caller changing one of them between calls (an epoch loop's ``state["epoch"]``) must be seen,
by a retrace, never kept at its trace-time value (``runtime.guard_tags``: a masked print's
view is a new dict each time, so the holder's own tag is what says it moved). The written
entry itself must not retrace every call. Numbers carried through may be nan, inf or -0.0
(``runtime.carried_numbers.same_number``: nan is nan, -0.0 is not 0.0).

Each case is built twice, run eagerly and through ``to_graph`` (default and strict), and
compared after every call: the result, and what the holder keeps.
"""
from __future__ import annotations

import math
import types
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

WRITES = ("number", "+=", "tensor", "append")
GDICT: dict = {}
GOBJ = types.SimpleNamespace()


def _initial(write):
    return {"number": 0.0, "+=": 0, "tensor": torch.zeros(2), "append": []}[write]


class _Trainer:
    def __init__(self, write):
        self.write, self.n, self.w = write, 0, _initial(write)

    def step(self, x):
        if self.write == "number":
            self.w = x.sum().item()
        elif self.write == "+=":
            self.w += 1
        elif self.write == "tensor":
            self.w = x.detach() * 2
        else:
            self.w.append(x.sum().item())
        return x * self.n


def _build(holder, write):
    """(the function, set the entry it reads, what the holder keeps): the function writes
    one entry of ``holder`` (as ``write`` says) and returns ``x`` times another one."""
    if holder == "closure dict":
        st = {"n": 0, "w": _initial(write)}

        def f(x):
            if write == "number":
                st["w"] = x.sum().item()
            elif write == "+=":
                st["w"] += 1
            elif write == "tensor":
                st["w"] = x.detach() * 2
            else:
                st["w"].append(x.sum().item())
            return x * st["n"]
        return f, lambda n: st.__setitem__("n", n), lambda: dict(st)
    if holder == "global dict":
        GDICT.clear()
        GDICT.update(n=0, w=_initial(write))

        def f(x):
            if write == "number":
                GDICT["w"] = x.sum().item()
            elif write == "+=":
                GDICT["w"] += 1
            elif write == "tensor":
                GDICT["w"] = x.detach() * 2
            else:
                GDICT["w"].append(x.sum().item())
            return x * GDICT["n"]
        return f, lambda n: GDICT.__setitem__("n", n), lambda: dict(GDICT)
    if holder == "nested dict":
        st = {"cfg": {"n": 0, "w": _initial(write)}, "other": 1}

        def f(x):
            if write == "number":
                st["cfg"]["w"] = x.sum().item()
            elif write == "+=":
                st["cfg"]["w"] += 1
            elif write == "tensor":
                st["cfg"]["w"] = x.detach() * 2
            else:
                st["cfg"]["w"].append(x.sum().item())
            return x * st["cfg"]["n"]
        return f, lambda n: st["cfg"].__setitem__("n", n), lambda: dict(st["cfg"])
    if holder == "dict read beside nested written":     # the written entry one level down
        st = {"n": 0, "sub": {"w": _initial(write)}}

        def f(x):
            if write == "number":
                st["sub"]["w"] = x.sum().item()
            elif write == "+=":
                st["sub"]["w"] += 1
            elif write == "tensor":
                st["sub"]["w"] = x.detach() * 2
            else:
                st["sub"]["w"].append(x.sum().item())
            return x * st["n"]
        return f, lambda n: st.__setitem__("n", n), lambda: dict(st["sub"])
    if holder == "closure list":
        st = [0, _initial(write)]

        def f(x):
            if write == "number":
                st[1] = x.sum().item()
            elif write == "+=":
                st[1] += 1
            elif write == "tensor":
                st[1] = x.detach() * 2
            else:
                st[1].append(x.sum().item())
            return x * st[0]
        return f, lambda n: st.__setitem__(0, n), lambda: list(st)
    if holder == "object":
        run = types.SimpleNamespace(n=0, w=_initial(write))

        def f(x):
            if write == "number":
                run.w = x.sum().item()
            elif write == "+=":
                run.w += 1
            elif write == "tensor":
                run.w = x.detach() * 2
            else:
                run.w.append(x.sum().item())
            return x * run.n
        return f, lambda n: setattr(run, "n", n), lambda: dict(vars(run))
    if holder == "global object":
        GOBJ.__dict__.clear()
        GOBJ.n, GOBJ.w = 0, _initial(write)

        def f(x):
            if write == "number":
                GOBJ.w = x.sum().item()
            elif write == "+=":
                GOBJ.w += 1
            elif write == "tensor":
                GOBJ.w = x.detach() * 2
            else:
                GOBJ.w.append(x.sum().item())
            return x * GOBJ.n
        return f, lambda n: setattr(GOBJ, "n", n), lambda: dict(vars(GOBJ))
    if holder == "object in dict":
        st = {"run": types.SimpleNamespace(n=0, w=_initial(write))}

        def f(x):
            if write == "number":
                st["run"].w = x.sum().item()
            elif write == "+=":
                st["run"].w += 1
            elif write == "tensor":
                st["run"].w = x.detach() * 2
            else:
                st["run"].w.append(x.sum().item())
            return x * st["run"].n
        return f, lambda n: setattr(st["run"], "n", n), lambda: dict(vars(st["run"]))
    if holder == "dict in object":
        run = types.SimpleNamespace(state={"n": 0, "w": _initial(write)})

        def f(x):
            if write == "number":
                run.state["w"] = x.sum().item()
            elif write == "+=":
                run.state["w"] += 1
            elif write == "tensor":
                run.state["w"] = x.detach() * 2
            else:
                run.state["w"].append(x.sum().item())
            return x * run.state["n"]
        return f, lambda n: run.state.__setitem__("n", n), lambda: dict(run.state)
    assert holder == "method's object"
    t = _Trainer(write)
    return t.step, lambda n: setattr(t, "n", n), \
        lambda: {k: v for k, v in vars(t).items() if k != "write"}


HOLDERS = ("closure dict", "global dict", "nested dict", "dict read beside nested written",
           "closure list", "object", "global object", "object in dict", "dict in object",
           "method's object")


def _same(got, exp, where):
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == exp.dtype, (where, got, exp)
        assert torch.equal(got.signbit(), exp.signbit()) if exp.is_floating_point() else True, \
            (where, got, exp)
        torch.testing.assert_close(got, exp, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{where}: {m}")
        return
    assert type(got) is type(exp), (where, got, exp)
    if isinstance(exp, dict):
        assert list(got) == list(exp), (where, got, exp)
        for k in exp:
            _same(got[k], exp[k], f"{where}[{k!r}]")
    elif isinstance(exp, list):
        assert len(got) == len(exp), (where, got, exp)
        for i, (a, b) in enumerate(zip(got, exp)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(exp, float) and math.isnan(exp):
        assert math.isnan(got), (where, got, exp)
    elif isinstance(exp, float):
        assert got == exp and math.copysign(1, got) == math.copysign(1, exp), (where, got, exp)
    else:
        assert got == exp, (where, got, exp)


def _differential(build, reads, xs, strict, falls_back=False):
    """Run ``build()``'s function eagerly and converted on ``xs``, the caller setting the
    entry it reads to ``reads[i]`` before call i; compare after each call. The converted
    function (for ``cache_info``). ``falls_back``: the conversion is refused, loudly (a
    FallbackWarning naming this file; strict: ConversionError), eager's results."""
    f, set_read, kept = build()
    g, set_g, kept_g = build()
    converted = to_graph(g, strict=strict)
    for i, (n, x) in enumerate(zip(reads, xs)):
        set_read(n)
        set_g(n)
        exp = f(x.clone())
        if falls_back and strict:
            with pytest.raises(ConversionError, match=__file__):
                converted(x.clone())
            return converted
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = converted(x.clone())
        fallbacks = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        if falls_back and i == 0:
            assert fallbacks and fallbacks[0].startswith(__file__), fallbacks
        elif not falls_back:
            assert not fallbacks, fallbacks[0]
        _same(got, exp, f"call {i} result")
        _same(kept_g(), kept(), f"call {i} state")
    return converted


def _refused(holder, write) -> bool:
    """A list appended to two levels down (``st["cfg"]["w"].append``, ``st[1].append``) is
    not carried (``runtime.appended_lists``: one level, and a dict an object's attribute
    holds: ``run.state["w"].append`` converts): the call falls back, loudly."""
    return write == "append" and holder in ("nested dict", "dict read beside nested written",
                                            "closure list", "object in dict")


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("holder", HOLDERS)
def test_caller_changes_the_entry_only_read(holder, write, strict):
    """The caller sets the read entry to 1, 2, 3, 3, 4: each call sees it (a trace per
    value at most, one more for a first kind), never the trace's."""
    reads = [1, 2, 3, 3, 4, 4]
    xs = [torch.tensor([1.0, 2.0]) * (i + 1) for i in range(len(reads))]
    g = _differential(lambda: _build(holder, write), reads, xs, strict,
                      _refused(holder, write))
    assert _refused(holder, write) or g.cache_info().traces <= len(set(reads)) + 1, \
        g.cache_info()


@pytest.mark.parametrize("holder, write", [(h, w) for h in HOLDERS for w in WRITES
                                           if not _refused(h, w)])
def test_written_entry_alone_does_not_retrace(holder, write):
    """The read entry fixed: what the graph writes itself (a new number, a new tensor, a
    longer list on every call) is no reason to trace again."""
    reads = [2] * 6
    xs = [torch.tensor([1.0, -2.0]) * (i + 1) for i in range(len(reads))]
    g = _differential(lambda: _build(holder, write), reads, xs, strict=False)
    assert g.cache_info().traces <= 2, g.cache_info()


@pytest.mark.parametrize("holder", ["closure dict", "closure list", "object", "nested dict"])
def test_read_float_special_values(holder):
    """The read entry a float the caller sets to -0.0, 0.0, nan, inf, -inf: eager's results
    (x * -0.0 is -0.0), nan seen as the same value again (no retrace for it)."""
    reads = [0.5, -0.0, 0.0, 0.0, float("nan"), float("nan"), float("inf"), float("-inf")]
    xs = [torch.tensor([1.0, -2.0])] * len(reads)
    g = _differential(lambda: _build(holder, "number"), reads, xs, strict=True)
    assert g.cache_info().traces <= 6, g.cache_info()      # 0.5, -0.0, 0.0, nan, inf, -inf


@pytest.mark.parametrize("write", ["number", "tensor", "append"])
def test_written_special_values(write):
    """The written entry receives nan, inf, -inf and -0.0 (a diverging loss): kept as
    eager keeps them, the read entry still seen."""
    values = [float("nan"), float("inf"), -0.0, float("-inf"), float("nan"), 1.5]
    xs = [torch.tensor([v, 1.0]) for v in values]
    reads = [1, 1, 2, 2, 3, 3]
    _differential(lambda: _build("closure dict", write), reads, xs, strict=False)


def _training(first):
    """A step with a tensor ``if`` returning early and staged optimizer calls, keeping
    ``s["last"]`` (``first`` when the call starts) and reading ``s["scale"]``."""
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 1)
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    s = {"last": first, "bad": 0, "scale": 1.0}

    def step(x):
        loss = m(x).sum() * s["scale"]
        if loss > 100:
            s["bad"] += 1
            return 0
        o.zero_grad()
        loss.backward()
        o.step()
        s["last"] = loss.item()
        return 1

    def kept():
        return dict(s, weight=m.weight.detach().clone(), bias=m.bias.detach().clone())
    return step, lambda v: s.__setitem__("scale", v), kept


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("first", [float("nan"), float("inf"), -0.0, 0.0],
                         ids=["nan", "inf", "-0.0", "0.0"])
def test_special_float_at_start_of_a_training_step(first, strict):
    """A kept loss that is nan (inf, -0.0) when the call starts: no 'eager would see nan,
    not nan' error, eager's parameters and state; the caller's scale (another key) seen,
    including the early return it causes."""
    scales = [1.0, 1.0, 0.5, 1000.0, 0.5]
    xs = [torch.ones(1, 2) * (i + 1) for i in range(len(scales))]
    g = _differential(lambda: _training(first), scales, xs, strict)
    assert g.cache_info().traces <= 4, g.cache_info()


def test_same_number():
    from runtime.carried_numbers import same_number
    nan = float("nan")
    assert same_number(nan, float("nan")) and same_number(1.5, 1.5) and same_number(3, 3)
    assert same_number(float("inf"), float("inf")) and same_number(-0.0, -0.0)
    assert not same_number(0.0, -0.0) and not same_number(nan, 1.0)
    assert not same_number(1.0, nan) and not same_number(2, 3)


def _three_levels():
    st = {"a": {"b": {"n": 0, "w": 0.0}}}

    def f(x):
        st["a"]["b"]["w"] = x.sum().item()
        return x * st["a"]["b"]["n"]
    return f, lambda n: st["a"]["b"].__setitem__("n", n), lambda: dict(st["a"]["b"])


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_three_levels_down_falls_back(strict):
    """A number written three levels down is not carried: loud, eager's values."""
    _differential(_three_levels, [1, 2, 3], [torch.ones(2)] * 3, strict, falls_back=True)
