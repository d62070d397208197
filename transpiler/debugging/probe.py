"""``f.probe(*args, names=[...])``: fetch intermediates of a converted run by the user's
variable names — the static graph's "fetch more nodes in ``sess.run``", by name.

The function is converted once more with ``tg.probe`` after every statement binding a
probed name (``converters/probes.py``); inside a graph that is a ``probe_value`` op which
hands the run-time value to the open probe log, so loop bodies record every iteration.
The probing copy has its own traces; the function's result is unchanged (``.result``).
When the function cannot be traced, the probed code runs eagerly (with a FallbackWarning):
converted code on Python values behaves as Python, so the probes still see every value.
"""
from __future__ import annotations

import keyword
import re
import warnings
from typing import Any, Dict, Iterable

import torch

from runtime.probe_log import collecting

from ..errors import ConversionError


class Probes(dict):
    """name -> value. A name bound inside a loop maps to the value it had at the end of
    each iteration that bound it, stacked into one tensor (a list when they cannot be
    stacked, ``[]`` when the loop never ran); any other name maps to its value at the end
    of the call; a name never bound maps to None. ``last[name]`` is the value at the end of
    the call either way, ``counts[name]`` how many values were recorded, and ``result`` the
    function's result."""

    def __init__(self, values: Dict[str, Any], last: Dict[str, Any], counts: Dict[str, int],
                 result: Any):
        super().__init__(values)
        self.last, self.counts, self.result = last, counts, result


def _stacked(values):
    if values and all(isinstance(v, torch.Tensor) for v in values) and \
            len({(v.shape, v.dtype) for v in values}) == 1:
        return torch.stack(values)
    if values and all(isinstance(v, (int, float, bool)) and not isinstance(v, torch.Tensor)
                      for v in values):
        return torch.tensor(values)
    return list(values)


def probe(fn, args, kwargs, names: Iterable[str]) -> Probes:
    """Run ``fn`` (a GraphFunction) converted with probes on ``names``."""
    from ..api import FallbackWarning, GraphFunction, _python_function, convert_function
    if isinstance(names, str):
        names = [names]
    names = list(dict.fromkeys(names))
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier() or
           keyword.iskeyword(n)]
    if bad:
        raise ValueError(f"probe names must be variable names, got {bad!r}")
    key = tuple(sorted(names))
    probing = fn._probing.get(key)
    if probing is None:
        probing = fn._probing[key] = GraphFunction(fn.python_function, fn._strict, probed=key)
        probing._trace_records = {}      # signature -> values seen only while tracing
    kwargs = kwargs or {}
    signature = probing._signature(args, kwargs)[0]
    try:
        if signature not in probing._entries:
            with collecting() as traced:         # values a graph cannot carry (a Size,
                probing.graph(*args, **kwargs)   # a string, an object) are seen here only
            probing._trace_records[signature] = traced
        run = probing._call
    except ConversionError as e:                 # fell back: run the probed code eagerly
        warnings.warn(FallbackWarning(f"{e} -- probing {fn.__name__} eagerly"), stacklevel=3)
        converted = convert_function(_python_function(fn.python_function), key)
        run = lambda a, k: converted(*a, **k)    # noqa: E731  (Python values record at once)
    with collecting() as log:
        result = run(args, kwargs)
    values, last, counts = {}, {}, {}
    seen_in_trace = probing._trace_records.get(signature)
    for name in names:
        source = log if name in log.records or seen_in_trace is None else seen_in_trace
        records = source.records.get(name, [])
        counts[name] = len(records)
        last[name] = records[-1][2] if records else None
        looped = source.last_per_iteration(name)
        values[name] = _stacked(looped) if looped or _loop_bound(probing, name) else last[name]
    return Probes(values, last, counts, result)


def _loop_bound(probing, name: str) -> bool:
    """Whether the converted code probes ``name`` inside a loop (then no record means the
    loop never ran, and the value is ``[]``)."""
    from ..api import _python_function, convert_function
    source = convert_function(_python_function(probing.python_function),
                              probing._probed).__tograph_source__
    return re.search(rf"tg\.probe\({re.escape(repr(name))}, {name}, \d+\)", source) is not None
