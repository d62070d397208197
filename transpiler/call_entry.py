"""A signature's whole cached call as one generated Python function (issue 13's "compile
guards to one function, as torch.compile does").

    enter = call_entry.build(entry, args, kwargs, cache, flags)    # None: not for this call
    out = enter(args, kwargs)       # the graph's result, or MISS: take the ordinary path

A cached call on the ordinary path builds a key for the signature cache (each tensor's
shape, dtype, strides...; the call's modes), hashes it, looks it up and then checks the
entry's guard: ~2 us per call before the graph runs, as long as ``x + 1`` itself. The
function built here checks the same things against the values of one signature, in place:

    def enter(args, kwargs):                    # f(x, 3, {"s": 2.0})
        if len(args) != 3 or kwargs:
            return MISS
        a0, a1, a2 = args
        if not (a1.__class__ is int and a1 == 3):
            return MISS
        if not (a2.__class__ is dict and len(a2) == 1 and tuple(a2) == k2):
            return MISS
        a2_0, = a2.values()
        if not (a2_0.__class__ is float and a2_0 == 2.0):
            return MISS
        if not (tensors(a0) and not a0.__dict__):
            return MISS
        if not (grad_enabled() is True and default_dtype() is dtype and
                forward_ad._current_level == -1 and not autocasting()):
            return MISS
        if not holds():             # the entry's guard (the Python state its trace read)
            return MISS
        entry.used = cache.hits = cache.hits + 1
        try:
            return entry.fn(a0, a1, a2_0)
        except Exception as e:
            raise located(e, exact=True) from e

``tensors`` is torch's own C tensor check (``TensorGuards``, as dynamo's guards use: class,
dtype, device, dispatch keys, requires_grad, sizes and strides of each tensor in one C
call); the attribute dict is the part of the cache key it does not see (a storage offset
is in the key only for a function whose trace read one, which gets no entry functions:
``argument_offsets``). A tensor passed twice (``f(x, x)``) is checked as one object
(``a1 is a0``), and
tensors traced as distinct objects that could be one (same class, shape, dtype, device and
strides) as distinct (``a0 is not a1``; ``len({id(a0), ...}) == n`` for more): the
pattern is part of the signature (``argument_aliases``); TensorGuards, which refuses a
tensor given twice, gets each object once. A graph that writes a tensor argument in place
also checks that no two of them share storage (``shared((a0, a1)) is None``). Every check
is at least as strict as the key it stands for (a check that fails only sends the call to
the ordinary path, which finds the same entry or traces); a module's call also compares
its tree's ``training`` flags (``runtime.module_flags``). A number the function never
reads, which its key holds by type (``transpiler.unread_numbers``), is checked by class
only (``a1.__class__ is int``): the entry serves any value.

Only plain calls are built: exact ``torch.Tensor``/``nn.Parameter`` tensors with no Python
attributes, ``int``/``float``/``bool``/``str``/``None``, and exact tuples, lists and dicts
(string or int keys) of these; the result and writes are those of an entry with no argument
objects, argument writes or returned arguments. The built leaves are checked against the
ordinary path's own flattening (``held_arguments.flatten``) once, by identity: any
difference and nothing is built. Without torch's ``TensorGuards`` nothing is built either
(the ordinary path serves every call).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List

import torch
import torch.autograd.forward_ad as forward_ad

from runtime import autocast_ops
from runtime.executor import located

from . import argument_aliases, held_arguments

try:                                    # torch's C tensor check (dynamo's guards)
    from torch._C._dynamo.guards import TensorGuards
except ImportError:                     # pragma: no cover - another torch
    TensorGuards = None


class _Miss:
    """What an entry function returns for a call it does not serve."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS = _Miss()
#: builds tried per cache entry, at most (made or refused): a call the ordinary path serves
#: but its function refuses (a mode the key does not hold, such as a dispatch key), or one
#: it cannot serve (a namedtuple argument), tries no more
PER_ENTRY = 8
_TENSORS = (torch.Tensor, torch.nn.Parameter)
_SCALARS = (int, bool, str, type(None))
_KEYS = (int, str)


class _Source:
    """The lines of an entry function and the values they name."""

    def __init__(self):
        self.lines: List[str] = []
        self.env: Dict[str, Any] = {"MISS": MISS}
        self.leaves: List[str] = []         # the variables holding the flat leaves, in order
        self.tensors: List[Any] = []        # (the variable, the call's tensor)
        self.unpacking: List[str] = []      # the lines that unpack (``_same_leaves``)
        self.unread = frozenset()           # leaves keyed by type only (unread_numbers)

    def value(self, name: str, value) -> str:
        self.env[name] = value
        return name

    def check(self, test: str) -> None:
        self.lines += [f"    if not ({test}):", "        return MISS"]

    def unpack(self, names: List[str], value: str) -> None:
        if names:
            self.unpacking.append(f"{', '.join(names)}, = {value}")
            self.lines.append("    " + self.unpacking[-1])


def _walk(src: _Source, name: str, value) -> bool:
    """Checks and unpacking of ``value`` (held in variable ``name``); False: not built."""
    kind = type(value)
    if kind in _TENSORS:
        if value.__dict__ or value.layout is not torch.strided or value.is_nested:
            return False
        src.leaves.append(name)
        src.tensors.append((name, value))
        return True
    if kind in _SCALARS or kind is float:
        src.check(f"{name}.__class__ is {kind.__name__}" if len(src.leaves) in src.unread
                  else _scalar_test(src, name, value))
        src.leaves.append(name)
        return True
    if kind is tuple or kind is list:
        names = [f"{name}_{i}" for i in range(len(value))]
        src.check(f"{name}.__class__ is {kind.__name__} and len({name}) == {len(value)}")
        src.unpack(names, name)
        return all(_walk(src, n, v) for n, v in zip(names, value))
    if kind is dict:
        if not all(type(k) in _KEYS for k in value):
            return False
        names = [f"{name}_{i}" for i in range(len(value))]
        keys = src.value(f"k_{name}", tuple(value))
        src.check(f"{name}.__class__ is dict and len({name}) == {len(value)} and "
                  f"tuple({name}) == {keys}")
        src.unpack(names, f"{name}.values()")
        return all(_walk(src, n, v) for n, v in zip(names, value.values()))
    return False


def _scalar_test(src: _Source, name: str, value) -> str:
    """``name`` holds a value of ``value``'s class equal to it (as the key compares it)."""
    if value is None:
        return f"{name} is None"
    if type(value) is bool:
        return f"{name} is {value}"
    const = src.value(f"v_{name}", value)
    test = f"{name}.__class__ is {type(value).__name__} and {name} == {const}"
    if type(value) is float and value == 0.0:       # -0.0 and 0.0 are two signatures
        src.env["copysign"] = math.copysign
        test += f" and copysign(1.0, {name}) == {math.copysign(1.0, value)}"
    return test


def _modes(src: _Source, grad: bool) -> str:
    """The call's modes as the key holds them (``tensor_state.call_modes`` and grad mode)."""
    autocast = autocast_ops.active_dtype()
    src.env.update(grad_enabled=torch.is_grad_enabled, forward_ad=forward_ad,
                   default_dtype=torch._C.get_default_dtype, dtype=torch.get_default_dtype(),
                   autocasting=torch._C._is_any_autocast_enabled,
                   active_dtype=autocast_ops.active_dtype, autocast=autocast,
                   cast_cache=torch.is_autocast_cache_enabled)
    test = (f"grad_enabled() is {grad} and default_dtype() is dtype and "
            f"forward_ad._current_level == {forward_ad._current_level} and "
            f"cast_cache() is {torch.is_autocast_cache_enabled()} and ")
    return test + ("(not autocasting() or active_dtype() is None)" if autocast is None else
                   "active_dtype() is autocast")


def build(entry, args: tuple, kwargs: dict, cache, training=None, held=frozenset()):
    """The entry function serving calls like ``(args, kwargs)`` with ``entry`` (an
    ``api._Traced`` found for this call now, its guard holding), counting its hits in
    ``cache`` (``SignatureCache``); ``training``: a module's ``TrainingFlags``. None when
    this call is not one it serves (see the module docstring)."""
    tries = getattr(entry, "inline_tries", 0)
    if TensorGuards is None or entry.writes or entry.argument_refs or \
            entry.arguments_hold is not None or tries >= PER_ENTRY:
        return None
    entry.inline_tries = tries + 1
    src = _Source()
    src.unread = getattr(entry, "unread", frozenset())     # (a number the function never
    names = [f"a{i}" for i in range(len(args))]            # reads: any value of its type)
    keywords = [f"k{i}" for i in range(len(kwargs))]
    src.check(f"len(args) == {len(args)} and " +
              (f"tuple(kwargs) == {src.value('names', tuple(kwargs))}" if kwargs else
               "not kwargs"))
    src.unpack(names, "args")
    src.unpack(keywords, "kwargs.values()")
    if not all(_walk(src, n, v) for n, v in zip(names + keywords,
                                                list(args) + list(kwargs.values()))):
        return None
    if not _same_leaves(src, args, kwargs, held):
        return None
    if src.tensors:
        same = _identities(src.tensors)     # (a repeat is its first: checked once, after)
        if same:
            src.check(same)
        firsts: Dict[int, tuple] = {}
        for n, t in src.tensors:
            firsts.setdefault(id(t), (n, t))
        values = [t for _, t in firsts.values()]
        try:
            src.env["tensors"] = TensorGuards(
                *values, dynamic_dims_sizes=[list(t.shape) for t in values],
                dynamic_dims_strides=[list(t.stride()) for t in values]).check
        except (RuntimeError, TypeError):       # a tensor it does not take: not built
            return None
        src.check(" and ".join([f"tensors({', '.join(n for n, _ in firsts.values())})"] + [
            f"not {n}.__dict__" for n, _ in firsts.values()]))
        if entry.writes_inputs and len(firsts) > 1:     # (its trace's: none share storage)
            src.env["shared"] = argument_aliases.shared
            src.check(f"shared(({', '.join(n for n, _ in firsts.values())},)) is None")
    src.check(_modes(src, torch.is_grad_enabled()))
    if training is not None:
        src.env.update(training=training, flags=training())
        src.check("training() == flags")
    src.env.update(holds=entry.holds, entry=entry, cache=cache, located=located)
    src.check("holds()")
    src.lines += ["    entry.used = cache.hits = cache.hits + 1", "    try:",
                  f"        return entry.fn({', '.join(src.leaves)})",
                  "    except Exception as e:",
                  "        raise located(e, exact=True) from e"]
    text = "\n".join(["def enter(args, kwargs):"] + src.lines) + "\n"
    code = compile(text, f"<tograph entry {getattr(entry.fn, '__name__', 'graph')}>", "exec")
    exec(code, src.env)                 # noqa: S102 -- our own text, from the call's values
    enter = src.env["enter"]
    enter.entry, enter.source = entry, text
    return enter


def _identities(tensors) -> str:
    """A test that the call's tensors are one object where the traced call's were, and
    distinct objects where they were (``argument_aliases``: ``f(x, x)`` has a graph of
    its own), over the tensors that could be one object once the guards hold (same class,
    shape, dtype, device and strides): '' when none could."""
    groups: Dict[tuple, List[tuple]] = {}
    for name, t in tensors:
        groups.setdefault((type(t), t.shape, t.dtype, t.device, t.stride()), []).append(
            (name, t))
    tests = []
    for group in groups.values():
        first: Dict[int, str] = {}
        for name, t in group:
            if id(t) in first:
                tests.append(f"{name} is {first[id(t)]}")
            else:
                first[id(t)] = name
        if len(first) == 2:
            tests.append(" is not ".join(first.values()))
        elif len(first) > 2:
            tests.append(f"len({{{', '.join(f'id({n})' for n in first.values())}}}) == "
                         f"{len(first)}")
    return " and ".join(tests)


def _same_leaves(src: _Source, args, kwargs, held) -> bool:
    """Whether the leaves ``src`` unpacks are the ordinary path's flat leaves, in order."""
    flat, _ = held_arguments.flatten(args, kwargs, held)
    got = {"args": args, "kwargs": kwargs}
    try:
        exec("\n".join(src.unpacking), {}, got)     # noqa: S102 -- our own lines
    except Exception:       # noqa: BLE001 - a structure the lines do not unpack
        return False
    return len(flat) == len(src.leaves) and all(got[n] is v for n, v in zip(src.leaves, flat))
