"""A differential oracle for calls that change the caller's objects: eager against
``to_graph`` (default and strict) on fresh twin inputs, call after call, comparing the
whole object graph the call can reach afterwards (arguments, the objects that were there
before the call, the result, observed globals): every object's and container's identity
relations (``is``), classes, attributes (``__dict__`` and ``__slots__``), keys and their
order, lengths, and every tensor's class, dtype, shape, values, requires_grad and .grad;
plus printed text and the exception raised."""
import contextlib
import io
import warnings

import torch

from transpiler import ConversionError, FallbackWarning, to_graph

_ATOMS = (int, float, str, bool, type(None), complex, bytes)
_CODE = ("function", "generator", "method", "module", "builtin_function_or_method")


class Values:
    """A tensor's values, equal to another's within 1e-5 (ints and bools exactly)."""

    def __init__(self, t):
        self.t = t.detach().clone()

    def __eq__(self, other):
        a, b = self.t, other.t
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return torch.allclose(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)
        return torch.equal(a, b)

    def __repr__(self):
        return f"Values({self.t.tolist()})"


def _slots(cls):
    for c in cls.__mro__:
        for s in getattr(c, "__slots__", ()):
            if s not in ("__dict__", "__weakref__"):
                yield s


def fingerprint(root):
    """A comparable summary of everything reachable from ``root``; each object is
    numbered at its first visit and named by that number afterwards (aliasing shows)."""
    ids, keep = {}, []

    def visit(o):
        if isinstance(o, _ATOMS):
            return ("v", type(o).__name__, repr(o))
        if id(o) in ids:
            return ("is", ids[id(o)])
        i = ids[id(o)] = len(ids)
        keep.append(o)
        if isinstance(o, torch.Tensor):
            return ("T", i, type(o).__name__, o.dtype, tuple(o.shape), o.requires_grad,
                    Values(o), visit(o.grad) if o.is_leaf else None)
        if isinstance(o, (list, tuple)):
            extra = vars(o).items() if hasattr(o, "__dict__") else ()
            return ("L", i, type(o).__name__, tuple(visit(x) for x in o),
                    tuple((k, visit(v)) for k, v in extra))
        if isinstance(o, dict):
            return ("D", i, type(o).__name__, tuple((repr(k), visit(v)) for k, v in o.items()))
        if isinstance(o, (set, frozenset)):
            return ("S", i, type(o).__name__, tuple(sorted(repr(x) for x in o)))
        if isinstance(o, type) or type(o).__name__ in _CODE:
            return ("C", i, o.__name__ if isinstance(o, type) else type(o).__name__)
        attrs = vars(o) if hasattr(o, "__dict__") else {}
        return ("O", i, type(o).__name__, tuple((k, visit(v)) for k, v in attrs.items()),
                tuple((s, visit(getattr(o, s)) if hasattr(o, s) else "unset")
                      for s in _slots(type(o))))

    return visit(root)


def reachable(o, out=None, seen=None):
    """Every object and tensor reachable from ``o`` (not atoms), in a fixed order."""
    out = [] if out is None else out
    seen = set() if seen is None else seen
    if isinstance(o, _ATOMS) or id(o) in seen:
        return out
    seen.add(id(o))
    out.append(o)
    if isinstance(o, torch.Tensor) or isinstance(o, type) or type(o).__name__ in _CODE:
        return out
    if isinstance(o, (list, tuple, set, frozenset)):
        held = list(o)
    elif isinstance(o, dict):
        held = list(o.values())
    else:
        held = list(vars(o).values()) if hasattr(o, "__dict__") else []
        held += [getattr(o, s) for s in _slots(type(o)) if hasattr(o, s)]
    for x in held:
        reachable(x, out, seen)
    return out


def run_once(fn, args, observe=None, after=None):
    """(fingerprint of arguments, prior objects, result, observed), printed text,
    (exception class, text) or None."""
    before = reachable(args)
    buf = io.StringIO()
    result, raised = None, None
    with contextlib.redirect_stdout(buf):
        try:
            result = fn(*args)
        except ConversionError:
            raise
        except Exception as e:  # noqa: BLE001 (eager's own exception is compared)
            raised = (type(e).__name__, str(e))
    if after is not None and raised is None:
        after(args, result)
    world = observe() if observe is not None else None
    return fingerprint((args, before, result, world)), buf.getvalue(), raised


def differences(fn, make, steps=3, observe=None, after=None):
    """[(mode, step, what)]: each difference from eager, and each fallback ("fallback")
    or strict refusal ("refused"), over ``steps`` calls on ``make(step)``'s inputs."""
    out = []
    graphs = {"default": to_graph(fn), "strict": to_graph(fn, strict=True)}
    for step in range(steps):
        exp = run_once(fn, make(step), observe, after)
        for mode, g in graphs.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    got = run_once(g, make(step), observe, after)
                except ConversionError:
                    out.append((mode, step, "refused"))
                    continue
            if any(issubclass(w.category, FallbackWarning) for w in caught):
                out.append((mode, step, "fallback"))
            for what, a, b in zip(("state", "printed", "raised"), got, exp):
                if a != b:
                    out.append((mode, step, f"{what} differs:\n  graph={a}\n  eager={b}"))
    return out
