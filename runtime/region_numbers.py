"""Python numbers kept across calls that a tensor branch changes, carried through its cond.

    state = {"best_val_loss": 1e9}          stopper = types.SimpleNamespace(counter=0)
    ...                                      ...
    lossf = loss.item()                      if val_loss < stopper.best:
    if lossf < state["best_val_loss"]:           stopper.best, stopper.counter = val_loss, 0
        state["best_val_loss"] = lossf       else:
                                                 stopper.counter += 1

A branch on a traced number (``loss.item()``) that sets a number held by a closure cell
of the user's enclosing function (``nonlocal best``), a module global (``global best``),
an item of a dict or list, or an
attribute of a plain object (a ``SimpleNamespace``, a library's object keeping its state
in its ``__dict__``) is carried by the cond like a local's change (``region_state``): the
cond outputs the number per path, and the location holds the result after it. Only int,
float and bool values (or graph values standing for them) are carried this way, before
and after: anything else is refused as before, naming the line.

Such a location outlives the call, so what it holds after the cond is the trace's: the
front door keeps the change only where ``runtime.carried_numbers`` carries the slot (the
graph reads it when it runs and writes the new value back, with eager's Python type).
The first trace (slots not yet served) only finds that the slot changed; it is then
traced again with the slot served (``carried_numbers.rebound``). An item's or an
attribute's change is noted in ``region_state.TOUCHED``, so the front door refuses it
where the holder existed before the call and is not carried (``shared_touched``); a
cell's rebinding is seen by the snapshot of the closure (``transpiler.side_effects``).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from .python_state import is_tensor


def number(value) -> bool:
    """An int, float or bool, or a graph value standing for one."""
    if type(value) in (int, float, bool):
        return True
    if not is_tensor(value) or getattr(value, "_node", None) is None:
        return False
    from .introspection import kind_of
    return kind_of(value) in ("int", "float", "bool")


def outer_cell(root) -> bool:
    """A closure cell of the user's own code (not made by the call: ``nonlocal best`` of
    the function being converted) that held a number and holds a number now."""
    return root.cell is not None and number(root.value) and number(root.current())


def global_location(root, now):
    """The location of a module global (``global best``) that held a number and holds a
    number now: its namespace's item (noted for the front door as a dict item is); None
    for any other change of a global."""
    from .loop_items import Item
    if root.namespace is None or not (number(root.value) and number(now)):
        return None
    return Item(root.value, root.describe(), obj=root.namespace, name=root.path[-1][1])


def items(obj, copy) -> Optional[List[Tuple[object, object]]]:
    """(location, new value) of the items of the dict or list ``obj`` (``copy``: its items
    before the branch) that the branch replaced, each a number (or each a tensor) before
    and after, keys and length kept; None otherwise."""
    from .loop_items import replaced
    if type(obj) not in (dict, list):
        return None
    found = replaced(obj, copy)
    if found is None or not all(_kept(loc.before, new) for loc, new in found):
        return None
    return found


def _kept(before, now) -> bool:
    """A number before and after, or a tensor (not standing for a number) of one shape
    and dtype before and after: ``acc[0] = torch.zeros(())`` resetting a running sum
    kept in a closure's list, carried as ``runtime.carried_tensors`` carries it across
    calls (another shape, known or not, is refused as before)."""
    if number(before) or number(now):
        return number(before) and number(now)
    if not (is_tensor(before) and is_tensor(now)):
        return False
    a, b = _meta(before), _meta(now)
    return a.is_static and a == b


def _meta(t):
    """A tensor's TensorMeta: a traced one's node's, a real one's own."""
    from .meta import TensorMeta
    node = getattr(t, "_node", None)
    return node.meta if node is not None else TensorMeta.of(t)


def attribute(obj, before, now) -> bool:
    """Whether a branch's change of a plain object's attribute from ``before`` to ``now``
    is a number the cond may carry (the object keeps its state in its ``__dict__``; an
    ``nn.Module`` keeps its Python numbers there too: ``model.best_loss = lossf``, its
    ints and floats carried as ``runtime.module_numbers`` says; not a bool: ``training``)."""
    from .introspection import kind_of
    from .python_state import _is_module
    from .region_state import _dict_object
    return number(before) and number(now) and (_dict_object(obj) or _is_module(obj) and
                                               "bool" not in (kind_of(before), kind_of(now)))
