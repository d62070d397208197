"""numpy called on traced tensors in converted code (``tg.call`` routes here).

Eagerly, a numpy ufunc applied to a float tensor converts it to an array, computes in
numpy and wraps the result back into a ``torch.Tensor`` of numpy's dtype. For the ufuncs
whose torch twin computes the same values with the same dtype (``np.exp``, ``np.log``,
``np.sqrt``, ``np.abs``, ``np.tanh``, ``np.maximum``, ``np.add``, ...) on float16/32/64
tensors that do not require grad (eagerly numpy refuses those) and Python numbers, the
call becomes that torch op, i.e. a graph node. Any other numpy use of a traced tensor --
``x.numpy()``, ``np.asarray(x)``, a result that must be an ndarray -- needs values known
only when the graph runs: a ``GraphError`` naming the user's line, so the call falls back.
"""
from __future__ import annotations

import sys

import torch

from ..errors import GraphError
from ..source_info import format_location, user_location
from ..symbolic import contains_symbolic, is_symbolic

NOT_NUMPY = object()      # numpy_call's answer when numpy is not involved
_FLOATS = (torch.float16, torch.float32, torch.float64)
# numpy ufunc name -> the torch function computing the same values and dtype on floats
_UNARY = {name: getattr(torch, name) for name in (
    "exp", "log", "sqrt", "abs", "tanh", "sin", "cos", "tan", "square", "floor", "ceil",
    "exp2", "log1p", "expm1", "sign", "log2", "log10", "arctan", "arcsin", "arccos",
    "sinh", "cosh", "arctanh", "arcsinh", "arccosh", "trunc")}
_UNARY.update(absolute=torch.abs, negative=torch.neg, fabs=torch.abs, rint=torch.round)
_BINARY = {"add": torch.add, "subtract": torch.sub, "multiply": torch.mul,
           "divide": torch.div, "true_divide": torch.div, "power": torch.pow,
           "maximum": torch.maximum, "minimum": torch.minimum, "arctan2": torch.atan2,
           "hypot": torch.hypot, "fmax": torch.fmax, "fmin": torch.fmin}


def _numpy():
    return sys.modules.get("numpy")


def _is_numpy(f, np) -> bool:
    if isinstance(f, np.ufunc):
        return True
    module = getattr(f, "__module__", None) or ""
    return module == "numpy" or module.startswith("numpy.")


def _refuse(what: str) -> GraphError:
    location = user_location()
    error = GraphError(
        f"{format_location(location)}: {what} of a traced tensor: numpy needs concrete "
        f"values, known only when the graph runs (numpy ufuncs with an exact torch "
        f"equivalent -- np.exp, np.log, np.sqrt, np.abs, np.tanh, np.maximum, ... -- on float "
        f"tensors convert; a result that must be an ndarray cannot)")
    error.location = location
    return error


def _torch_twin(f, np, args, kwargs):
    """The torch function for ufunc ``f`` on these arguments, or None."""
    if kwargs or not isinstance(f, np.ufunc) or f.nin != len(args):
        return None
    twin = (_UNARY if f.nin == 1 else _BINARY).get(f.__name__)
    if twin is None:
        return None
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(not is_symbolic(a) or a.dtype not in _FLOATS or a.requires_grad for a in tensors):
        return None
    if any(not isinstance(a, torch.Tensor) and type(a) not in (int, float) for a in args):
        return None
    if twin in (torch.maximum, torch.minimum, torch.fmax, torch.fmin, torch.atan2,
                torch.hypot):       # tensors only: a Python number becomes one of the dtype
        dtype = tensors[0].dtype if len(tensors) == 1 else \
            torch.promote_types(tensors[0].dtype, tensors[1].dtype)
        args = [a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=dtype)
                for a in args]
    elif not isinstance(args[0], torch.Tensor):
        return None                 # e.g. 2.0 ** x: keep it simple, refuse
    return lambda: twin(*args)


def numpy_call(f, args, kwargs):
    """``f(*args, **kwargs)`` while tracing if numpy meets a traced tensor (a graph op or a
    GraphError); ``NOT_NUMPY`` otherwise."""
    np = _numpy()
    if np is None:
        return NOT_NUMPY
    if getattr(f, "__name__", None) == "numpy" and is_symbolic(getattr(f, "__self__", None)):
        raise _refuse(".numpy()")
    if not _is_numpy(f, np) or not (contains_symbolic(args) or contains_symbolic(kwargs)):
        return NOT_NUMPY
    run = _torch_twin(f, np, args, kwargs)
    if run is None:
        raise _refuse(f"numpy.{getattr(f, '__name__', 'function')}()")
    return run()
