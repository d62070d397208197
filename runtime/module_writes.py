"""Tensors a module's ``forward`` stores on a module of its tree: set when the graph runs.

    if self.mask is None or self.mask.size(0) != T:    # a mask cache
        self.mask = torch.triu(...)
    setattr(module, "weight", weight_orig / sigma)      # spectral_norm's, prune's pre-hook
    self.center = self.center * m + c.mean(0) * (1 - m)  # an EMA buffer rebound

Eager leaves the new tensor on the module after each call; a graph must too. While a call
is traced, ``Watch`` records what every module of the trees involved holds (its
``__dict__`` and its buffers). After the forward, a name rebound to a tensor made in the
graph's top level (not inside a tensor ``if``/loop: what such a region changes on an object
that existed before the call still falls back) or to a real tensor is a *write*: the module
gets its old value back (the side-effect check then sees nothing), and the graph gets a
``set_attribute`` effect node that stores the run's value there (``setattr``, as eager's
assignment: a buffer stays a buffer), after the graph's other work.

A write whose old value is a tensor the graph holds as a constant (``self.center * m``
read the buffer before rebinding it) would read the first call's tensor on every run: the
call is traced again with that name *served*: the trace reads it through a
``read_attribute`` node, the module's tensor at that point of each run (the old value's
shape, dtype and device; ``guard_meta`` is part of the module guard instead of its
identity). Names written or served are compared by that meta, not identity, by the guard
(``runtime.module_state``), so a write on every call keeps the graph.

A tuple of such tensors (an LSTM's ``(h, c)`` kept as ``self.hidden``) is stored and
guarded item by item, and served by one ``read_attribute_item`` node per item. A served
tensor with autograd history (a non-leaf: state kept without ``detach()``) is read back
with it, as eager's attribute holds it; a leaf that requires grad is refused. The stores
run at the end of the graph: a step that raises after its forward (a backward through a
freed graph) leaves the old value where eager's assignment already happened.

The hooks of the tree (``register_forward_hook``, also on submodules) storing activations
in a dict they reach through a closure cell or a global (``activation[name] =
output.detach()``, the feature-extraction recipe) are handled alike (``DictWatch``): each
item set to a tensor is a ``set_item`` node, and the guard compares those keys' tensors by
meta (``alike``). A dict item whose old tensor the graph reads (an accumulation) falls
back.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch

from .autograd_effects import Held
from .graph_ops import effect
from .introspection import NUMBER_KINDS, kind_of

_MISSING = object()


@effect
def set_attribute(owner: Held, name: str, value) -> None:
    """``setattr(module, name, value)`` when the graph runs (eager's assignment)."""
    setattr(owner.obj, name, value)


set_attribute._tograph_stores = True    # (passes: the value outlives the run, as an output)


def read_attribute(owner: Held, name: str, like: torch.Tensor) -> torch.Tensor:
    """The tensor ``module.name`` holds when the graph runs (``like``: the one it held
    while tracing; its meta stand-in during shape inference)."""
    if like.is_meta:
        return torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device="meta")
    return _same_kind(getattr(owner.obj, name), like, f"{type(owner.obj).__name__}.{name}")


read_attribute._tograph_impure = True   # (ops.is_impure: never merged, dropped or moved)
read_attribute._tograph_external = True     # (passes: the module's own tensor)


def read_attribute_item(owner: Held, name: str, index: int, like: torch.Tensor) -> torch.Tensor:
    """Item ``index`` of the tuple ``module.name`` holds when the graph runs (an LSTM's
    ``(h, c)`` kept on the module), as ``read_attribute`` reads a tensor."""
    if like.is_meta:
        return torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device="meta")
    value = getattr(owner.obj, name)
    if type(value) is not tuple or index >= len(value):
        raise RuntimeError(f"{type(owner.obj).__name__}.{name} holds another kind of value "
                           f"when the graph runs than when it was traced")
    return _same_kind(value[index], like, f"{type(owner.obj).__name__}.{name}[{index}]")


def _same_kind(value, like, label: str) -> torch.Tensor:
    """``value``, checked to be a tensor of ``like``'s kind (else a RuntimeError)."""
    if type(value) is not type(like) or value.shape != like.shape or \
            value.dtype != like.dtype or value.device != like.device:
        raise RuntimeError(f"{label} holds another tensor kind when the graph runs than "
                           f"when it was traced")
    return value


read_attribute_item._tograph_impure = True
read_attribute_item._tograph_external = True


@effect
def set_item(owner: Held, key, value) -> None:
    """``d[key] = value`` when the graph runs (a hook's dict of activations)."""
    owner.obj[key] = value


set_item._tograph_stores = True


@effect
def set_number_item(owner: Held, key, value, kind: str) -> None:
    """``d[key] = number`` when the graph runs: the number a graph value stands for, as the
    Python number eager's dict holds (a hook's ``stats[name] = o.mean().item()``: a float,
    never a 0-d tensor; a Python number: itself)."""
    owner.obj[key] = NUMBER_KINDS[kind](value.item()) if isinstance(value, torch.Tensor) \
        else value


def guard_meta(value, shaped: bool = True) -> Optional[tuple]:
    """What the guard compares of a written or served name's value: None for a non-tensor
    (compared by identity). ``shaped``: its shape and strides too (the trace asked them
    of the old tensor, or the graph reads it): else a stored activation whose batch size
    changes would mean a trace per call."""
    if type(value) is tuple:        # (an LSTM's (h, c)): item by item
        metas = tuple(guard_meta(v, shaped) for v in value)
        return None if not value or None in metas else ("tuple",) + metas
    if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
        return None
    kind = (type(value), value.dtype, value.device, value.requires_grad, value.layout)
    return kind + (value.shape, value.stride()) if shaped else kind


def alike(mapping, names: Dict[Any, bool]):
    """A check that ``mapping`` holds the same keys and objects as now, but ``names``
    ({key: shaped}), whose tensors need only the same meta (``guard_meta``; a non-tensor:
    the same object)."""
    keys, values = tuple(mapping), tuple(mapping.values())
    metas = {k: (_meta(v, names[k]), names[k]) for k, v in mapping.items() if k in names}

    def check() -> bool:
        if tuple(mapping) != keys:
            return False
        for k, v, w in zip(keys, mapping.values(), values):
            if v is not w:
                meta, shaped = metas.get(k, (None, True))
                if meta is None or _meta(v, shaped) != meta:
                    return False
        return True
    return check


def _meta(value, shaped):
    """``guard_meta``, or a carried number's Python type (``module_numbers.KIND``)."""
    from .module_numbers import KIND
    return ("kind", type(value)) if shaped == KIND else guard_meta(value, shaped)


def shaped(writes, reads, served=()) -> List[Tuple[Any, Any, bool]]:
    """(owner, name, whether the guard compares its shape) of ``writes``: where the
    trace asked something of the old tensor (``reads``: ``trace_reads.Reads``: its size
    for a cache test), or the graph reads it when it runs (``served``)."""
    asked = set()
    if reads is not None:
        asked = {id(a) for _, args, _, _ in reads.asked.values() for a in args} | \
            set(reads.data)
    return [(owner, name, id(old) in asked) for owner, name, old, _ in writes] + \
        [(owner, name, True) for owner, name in served]


def _stored(value, graph) -> bool:
    """``_top_level_tensor``, or a tuple of them (an LSTM's ``(h, c)`` kept on a module)."""
    if type(value) is tuple:
        return 0 < len(value) <= _TUPLE_ITEMS and all(_top_level_tensor(v, graph)
                                                        for v in value)
    return _top_level_tensor(value, graph)


_TUPLE_ITEMS = 16


def _servable(value) -> bool:
    """A tensor (or tuple of them) a trace may read through ``read_attribute`` nodes:
    not a leaf that requires grad (a read's stand-in would answer as an op's result); a
    tensor with history is read back with it (the previous call's, as eager's)."""
    values = value if type(value) is tuple else (value,)
    return bool(values) and guard_meta(value) is not None and \
        not any(v.requires_grad and v.grad_fn is None for v in values)


def _read_stand_in(record, m, name, value):
    """The stand-in of ``module.name`` read when the graph runs: one node, or one per item
    of a tuple; a tensor with history is given as its detached self (the graph holds no
    autograd history of a past call), its stand-in requiring grad as the value read."""
    if type(value) is tuple:
        return tuple(_read_one(record, read_attribute_item, (Held(m), name, i), v)
                     for i, v in enumerate(value))
    return _read_one(record, read_attribute, (Held(m), name), value)


def _read_one(record, target, args, like):
    if not like.requires_grad:
        return record(target, args + (like,))
    from . import grad_flags
    out = record(target, args + (like.detach(),))
    out._node.attrs[grad_flags.KEY] = True
    return out


def _top_level_tensor(value, graph) -> bool:
    """A tensor a node of ``graph``'s top level makes, or a real one (not a parameter)."""
    from .symbolic import SymbolicTensor
    return isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) \
        and (not isinstance(value, SymbolicTensor) or value._node.graph is graph)


def _slots(module) -> Dict[Tuple[str, str], Any]:
    attrs = vars(module)
    found = {("attr", k): v for k, v in attrs.items() if not k.startswith("_")}
    buffers = attrs.get("_buffers")
    if isinstance(buffers, dict):
        found.update({("buffer", k): v for k, v in buffers.items()})
    return found


def _put(module, slot, value) -> None:
    kind, name = slot
    target = vars(module) if kind == "attr" else vars(module)["_buffers"]
    if value is _MISSING:
        target.pop(name, None)
    else:
        target[name] = value


def tree_modules(roots) -> List[Any]:
    """The modules of the trees of ``roots``, each once, in ``modules()`` order."""
    found: List[Any] = []
    seen = set()
    for root in roots:
        for m in root.modules():
            if id(m) not in seen:
                seen.add(id(m))
                found.append(m)
    return found


class Watch:
    """What the modules of ``roots`` hold, to tell the tensors a trace stores there."""

    def __init__(self, roots, served=frozenset()):
        self.modules: List[Any] = tree_modules(roots)
        self.before = [_slots(m) for m in self.modules]
        self.served: List[Tuple[Any, str]] = []     # (module, name) read when it runs
        self._wanted = served
        self._installed: Dict[Tuple[int, str], Any] = {}

    def serve(self, record) -> None:
        """Install the stand-ins of the served names (``record(fn, args)``: a node)."""
        for m, before in zip(self.modules, self.before):
            for (kind, name), value in before.items():
                if (id(m), name) in self._wanted and _servable(value):
                    stand_in = _read_stand_in(record, m, name, value)
                    _put(m, (kind, name), stand_in)
                    self._installed[(id(m), name)] = stand_in
                    self.served.append((m, name))

    def writes(self, graph) -> List[Tuple[Any, str, Any, Any]]:
        """(module, name, old value, new value) of each tensor the trace stored; the old
        values are put back (for all names, served ones too)."""
        from .introspection import NUMBER_KINDS, kind_of
        from .module_numbers import carried, number
        found, counters = [], carried(graph)    # (those: carried_numbers's to set)
        for m, before in zip(self.modules, self.before):
            now = _slots(m)
            for slot in set(before) | set(now):
                old, new = before.get(slot, _MISSING), now.get(slot, _MISSING)
                if slot[0] == "attr" and ((id(m), slot[1]) in counters or
                                          number(old) and kind_of(new) in NUMBER_KINDS):
                    continue        # (``model.total += loss.item()``: a number to carry)
                stand_in = self._installed.get((id(m), slot[1]), _MISSING)
                if new is old or new is stand_in:
                    if new is stand_in:
                        _put(m, slot, old)
                    continue
                served = stand_in is not _MISSING
                ok = _stored(new, graph)
                if ok:
                    found.append((m, slot[1], old, new))
                if ok or served:
                    _put(m, slot, old)
        return found

    def restore(self) -> None:
        """Put back every name the trace changed (a refused trace)."""
        for m, before in zip(self.modules, self.before):
            now = _slots(m)
            for slot in set(before) | set(now):
                if now.get(slot, _MISSING) is not before.get(slot, _MISSING):
                    _put(m, slot, before.get(slot, _MISSING))


class DictWatch:
    """The dicts the ``hooks`` of a module tree reach through their closure cells and the
    globals their code names, to tell the tensors a trace stores there."""

    def __init__(self, hooks):
        self.dicts: List[Tuple[dict, dict]] = []        # (the dict, a copy from before)
        seen = set()
        for hook in hooks:
            fn = getattr(hook, "__func__", hook)
            code = getattr(fn, "__code__", None)
            if code is None:
                continue
            values = [fn.__globals__.get(n) for n in code.co_names]
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    values.append(cell.cell_contents)
                except ValueError:
                    pass
            for v in values:
                if type(v) is dict and id(v) not in seen:
                    seen.add(id(v))
                    self.dicts.append((v, dict(v)))

    def writes(self, graph) -> List[Tuple[dict, Any, Any, Any]]:
        """(dict, key, old value, new value) of each tensor the trace set in a dict whose
        changes are all such (else it is left as it is: the side-effect check carries the
        numbers or refuses); those items get their old values back. A number's stand-in
        (``loss.item()``: a float in eager's dict, never a 0-d tensor) is not such a tensor,
        and an item served as a carried number (``stats["n"] += 1`` traced again with it
        served) is ``carried_numbers``' to write, not this watch's (it used to put the old
        number back after the served one was set, and the graph wrote that old number).
        A number's stand-in set at a new key is such a write too (``set_number_item``): the
        next call finds the key (the guard's ``alike``) and traces it served."""
        from .carried_numbers import SERVED
        served = {(id(e[0].holder), e[0].key) for e in (SERVED[-1] if SERVED else ())
                  if e[0].kind == "item"}
        found = []
        for d, before in self.dicts:
            changed = [(d, k, before.get(k, _MISSING), v) for k, v in d.items()
                       if v is not before.get(k, _MISSING) and (id(d), k) not in served]
            if not changed:
                continue
            if set(before) <= set(d) and all(_dict_write(old, new, graph)
                                             for _, _, old, new in changed):
                found += changed
                for _, key, old, _ in changed:
                    d.pop(key) if old is _MISSING else d.__setitem__(key, old)
        return found

    def restore(self) -> None:
        """Put back every dict's items (a refused trace)."""
        for d, before in self.dicts:
            if d.keys() != before.keys() or any(d[k] is not before[k] for k in d):
                d.clear()
                d.update(before)


def _dict_write(old, new, graph) -> bool:
    """Whether ``d[key] = new`` (``old``: what it held) is a write the graph makes: a
    tensor, or a number at a key the dict did not have (a stand-in, or a Python number:
    ``calls[k] = calls.get(k, 0) + 1`` sets 1 on the call that adds the key; the next one
    finds the key and carries the count)."""
    if kind_of(new) is not None:
        return old is _MISSING and (not isinstance(new, torch.Tensor) or
                                    _top_level_tensor(new, graph))
    return _top_level_tensor(new, graph)


def refuse_read_items(graph, writes) -> None:
    """GraphError where a dict item's old tensor is held by the graph (read, then set
    again: an accumulation would add to the first call's tensor on every run)."""
    from .errors import GraphError
    held = {id(n.attrs.get("value")) for n in graph.walk() if n.op == "constant"}
    for _, key, old, _ in writes:
        if isinstance(old, torch.Tensor) and id(old) in held:
            raise GraphError(f"a hook reads the tensor at key {key!r} of a dict and sets it "
                             f"again: the graph would read the first call's tensor on every "
                             f"run")


def read_first(graph, writes, watch: Watch) -> List[Tuple[Any, str]]:
    """The written (module, name) whose old tensor the graph holds as a constant: read
    before being rebound, so to be served by a retrace. GraphError where it could not be
    served (a tensor that requires grad: a parameter's stand-in)."""
    from .errors import GraphError
    held = {id(n.attrs.get("value")) for n in graph.walk() if n.op == "constant"}
    served = {(id(m), name) for m, name in watch.served}
    found = [(m, name) for m, name, old, _ in writes if _held_in(old, held) and
             (id(m), name) not in served]
    for m, name in found:
        if (id(m), name) in watch._wanted:
            raise GraphError(f"the function reads {type(m).__name__}.{name} (a tensor that "
                             f"requires grad) and then rebinds it: the graph would read "
                             f"the first call's tensor on every run")
    return found


def _held_in(old, held) -> bool:
    """Whether the tensor ``old`` (or an item of the tuple ``old``) is a graph constant."""
    values = old if type(old) is tuple else (old,)
    return any(isinstance(v, torch.Tensor) and id(v) in held for v in values)


def record_writes(writes, record) -> None:
    """One ``set_attribute`` (a module's) or ``set_item`` (a dict's) node per write, in
    the order found."""
    for owner, name, _, new in writes:
        if type(owner) is dict and kind_of(new) is not None:
            record(set_number_item, (Held(owner), name, new, kind_of(new)))
        else:
            record(set_item if type(owner) is dict else set_attribute, (Held(owner), name, new))
