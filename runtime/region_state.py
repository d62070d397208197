"""Python state a staged region changes, carried through its ``cond``/``while``.

    cm = CM()                        cnt = 0
    if x.sum() > 0:                  def bump(z):
        with cm:                         nonlocal cnt
            t = t * 2                    cnt += 1
    return t, cm.enters              ...
                                     for r in x: t = bump(t)     # a tensor loop

A tensor branch or loop body runs its Python code once per trace. A change it makes to
state the call itself made -- a closure cell of a converted frame that is running (the
``nonlocal cnt``), an attribute of an object of a user class that the call created
(``cm.enters``) -- is a *location* the region can carry: the cond outputs each location's
value per path (a Python number that differs becomes a 0-d output marked as the number,
other plain values a ``PathValue``), the while loop carries numbers and tensors as loop
variables, and the location is set to the result after the region. A list of plain
values held by one such object's attribute (``cm.log``) is carried too: per path by a
cond (``choose_contents``), and by a loop whose body appends the same items each
iteration as ``before + items * iterations`` (``Grown``). Other changes to lists,
dicts or sets, to anything reached through a global, to objects that existed before the
call (checked by the front door with ``TOUCHED``), or to values of other kinds are not
carried: ``region_effects`` refuses them -- but for numbers kept across calls that a
branch changes (``region_numbers``: a dict's item, a ``nonlocal``, a global, a plain
object's attribute).
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import List, Optional, Tuple

from . import region_numbers
from .constant_keys import same_constant
from .errors import GraphError
from .python_state import _EMPTY, _FixedCell, _library, is_tensor
from .threads import PerThreadList

_GENERATED = "<tograph generated"
_RUNTIME = os.path.dirname(os.path.abspath(__file__)) + os.sep
_NUMBERS = (bool, int, float)
TOUCHED = PerThreadList()   # (per thread) (object, attribute, value before)


class Location:
    """A closure cell or an object's attribute that a region changed; or the contents
    of a list (``holder``: the (object, attribute) holding it), as a tuple."""
    __slots__ = ("cell", "obj", "name", "before", "label", "holder")

    def __init__(self, before, label: str, cell=None, obj=None, name=None, holder=None):
        self.cell, self.obj, self.name, self.before, self.label = cell, obj, name, before, label
        self.holder = holder

    @property
    def key(self):
        return (id(self.cell), None) if self.cell is not None else (id(self.obj), self.name)

    def get(self):
        if self.cell is not None:
            return self.cell.cell_contents
        return tuple(self.obj) if self.holder else self.obj.__dict__[self.name]

    def set(self, value) -> None:
        if self.cell is not None:
            self.cell.cell_contents = value
        elif self.holder:       # contents; or a list value (``changes``) in the list's place
            owner, name = self.holder
            contents = isinstance(value, (tuple, list))
            self.obj[:] = value if contents else self.before
            owner.__dict__[name] = self.obj if contents else value
        else:
            self.obj.__dict__[self.name] = value

    def reset(self) -> None:
        """Put the location back as before the region."""
        self.set(self.before)

    def assign(self, value) -> None:
        """Set the location after the region (objects noted for the front door's check)."""
        if self.holder:
            TOUCHED.extend([(self.obj, None, None), (*self.holder, self.obj)])
        elif self.obj is not None:
            TOUCHED.append((self.obj, self.name, self.before))
        self.set(value)


class Grown(Location):
    """A list a tensor loop's body appends the same plain items (``pattern``) to: carried
    as a loop variable counting the iterations (``before`` 0; set to the placeholder while
    the body is traced), the list put back to its contents before the loop (``contents``)
    after each trace; after the loop the holder's attribute is a ``RepeatValue``."""
    __slots__ = ("contents", "pattern", "count")

    @classmethod
    def of(cls, lst, copy, holder) -> Optional["Grown"]:
        if len(lst) <= len(copy) or any(a is not b for a, b in zip(lst, copy)):
            return None
        grown = cls(0, f"{type(holder[0]).__name__}.{holder[1]}", obj=lst, name="[+]",
                    holder=holder)
        grown.contents, grown.pattern, grown.count = tuple(copy), tuple(lst[len(copy):]), 0
        return grown

    def get(self):
        """After one body trace: the count plus one, the list checked to have grown by
        the same items."""
        owner, name = self.holder
        probe = owner.__dict__.get(name)
        items = probe.appended() if type(probe) is _AppendOnly else None
        if items is None or len(items) != len(self.pattern) or \
                any(not same_constant(a, b) for a, b in zip(items, self.pattern)):
            raise GraphError(
                f"{self.label} (a list) grows differently on the paths of the body of a "
                f"tensor-dependent loop: its contents are known only when the graph runs")
        return self.count + 1

    def set(self, value) -> None:
        """Before a trace of the body or test (``value``: the count) the holder's
        attribute is an append-only stand-in (see ``reset``)."""
        self.obj[:] = self.contents
        self.holder[0].__dict__[self.holder[1]] = _AppendOnly(self.contents, self.label)
        self.count = value

    def reset(self) -> None:
        self.obj[:] = self.contents
        self.holder[0].__dict__[self.holder[1]] = self.obj
        self.count = 0

    def assign(self, value) -> None:
        from .path_values import MADE, RepeatValue, allowed
        owner, name = self.holder
        self.obj[:] = self.contents
        if _aliased(self.obj, owner, name) or not allowed():
            raise GraphError(
                f"{self.label} (a list) grows in the body of a tensor-dependent loop and is "
                f"also reached by another name (or compared with 'is'): its contents are "
                f"known only when the graph runs")
        TOUCHED.append((owner, name, self.obj))
        owner.__dict__[name] = RepeatValue(value, (self.contents, self.pattern))
        MADE[0] += 1


class _AppendOnly(list):
    """What a growing list's holder holds while the loop body is traced: the body may
    append to it, but reading it (its length, items, printing it, comparing it) raises
    GraphError -- the trace sees the contents of one iteration, not of every one."""
    __slots__ = ("_start", "_label")

    def __init__(self, contents, label: str):
        super().__init__(contents)
        self._start, self._label = len(contents), label

    def appended(self) -> list:
        return list.__getitem__(self, slice(self._start, None))

    def _refuse(self, *args, **kwargs):
        raise GraphError(
            f"{self._label} (a list the body of a tensor-dependent loop appends to) is read "
            f"while tracing the loop: its contents differ on every iteration")

    __len__ = __iter__ = __reversed__ = __getitem__ = __contains__ = __bool__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _refuse
    __repr__ = __str__ = __format__ = __add__ = __mul__ = __rmul__ = __iadd__ = _refuse
    __imul__ = __setitem__ = __delitem__ = __reduce__ = __reduce_ex__ = __copy__ = _refuse
    __deepcopy__ = index = count = copy = pop = remove = insert = sort = reverse = _refuse
    clear = _refuse


def untouch(start: int) -> list:
    """Forget the objects noted since ``start``, putting their attributes back as they
    were before the regions (newest first); returns what was noted."""
    noted = TOUCHED[start:]
    del TOUCHED[start:]
    for obj, name, before in reversed(noted):
        if name is not None and isinstance(obj, (list, dict)):
            from .loop_items import put_back
            put_back(obj, name, before)
        elif name is not None:
            obj.__dict__[name] = before
    return noted


def shared_touched(start: int, existed, written=None) -> Optional[str]:
    """After a trace: the attribute (``'CM.enters'``) a region carried on an object that
    existed before the call (``existed(obj)``), its changes put back; else None (the
    record since ``start`` is dropped). ``written``: (ids of) the argument objects whose
    attributes the call writes back (``argument_objects``): their attributes may change;
    or (id, name) pairs: one attribute the graph sets itself (``carried_numbers``)."""
    noted = TOUCHED[start:]
    for obj, name, before in noted:
        if name is not None and (id(obj) in (written or ()) or
                                 (id(obj), name) in (written or ())) and \
                not isinstance(before, list):       # (not a list's contents: region_state)
            continue
        if existed(obj):
            untouch(start)
            return f"'{type(obj).__name__}.{name}'" if name is not None else \
                f"the contents of a {type(obj).__name__}"
    del TOUCHED[start:]
    return None


def carriable(value, numbers_only: bool) -> bool:
    from .path_values import PathValue, RepeatValue
    if isinstance(value, RepeatValue):      # (a cond chooses it whole: ``path_values``)
        return not numbers_only
    if isinstance(value, _NUMBERS) or is_tensor(value):
        return True
    return not numbers_only and (value is None or isinstance(value, (str, bytes, PathValue)))


def changes(watch, numbers_only: bool, names=()) -> Optional[List[Tuple[Location, object]]]:
    """The locations ``watch``'s region changed and their new values, with the state put
    back as it was before the region; None (nothing put back) when some change is not
    one a region can carry. ``names``: the region's state variables (a cell of one of
    those names is the converter's to carry, not a location of its own)."""
    found = {}
    for root in watch.roots:
        now = root.current()
        if now is root.value:
            continue
        if root.cell is None and root.path[-1][1] not in names:
            loc = region_numbers.global_location(root, now)     # (``global best``)
            if loc is None:
                return None
            found.setdefault(loc.key, (loc, now))
            continue
        if root.value is _EMPTY or now is _EMPTY or root.path[-1][1] in names or \
                not (_local_cell(root) or region_numbers.outer_cell(
                    root)) or not (      # (``nonlocal best``: region_numbers)
                carriable(now, numbers_only) and carriable(root.value, numbers_only)):
            return None
        loc = Location(root.value, root.describe(), cell=root.cell)
        found.setdefault(loc.key, (loc, now))
    seen, replaced = set(), _replaced_lists(watch, numbers_only)
    for obj, copy in watch.containers:
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if id(obj) in replaced:       # its holder's attribute now a list value
            owner, k, now = replaced[id(obj)]
            loc = Location(tuple(copy), f"{type(owner).__name__}.{k}", obj=obj, name="[:]",
                           holder=(owner, k))
            found[loc.key] = (loc, now)
            continue
        if isinstance(obj, (list, dict, set)):
            if _shallow_differs(obj, copy):
                from .loop_items import replaced as replaced_items
                items = replaced_items(obj, copy) if numbers_only else \
                    region_numbers.items(obj, copy)       # (``state["best"] = lossf``)
                if items is not None:       # tensors a loop body put in place of others
                    found.update((loc.key, (loc, new)) for loc, new in items)
                    continue
                holder = _list_holder(obj, copy, watch)
                if holder is None:
                    return None
                if numbers_only:        # a loop body: the list may only grow
                    grown = Grown.of(obj, copy, holder)
                    if grown is None:
                        return None
                    found[grown.key] = (grown, 1)
                    continue
                loc = Location(tuple(copy), f"{type(holder[0]).__name__}.{holder[1]}",
                               obj=obj, name="[:]", holder=holder)
                found[loc.key] = (loc, tuple(obj))
            continue
        if id(obj) in watch.carried or not isinstance(copy, dict):
            continue        # (a builtin's state: a change left unexplained fails below)
        attrs = obj.__dict__
        if attrs.keys() != copy.keys():
            return None
        for k, v in attrs.items():
            if v is copy[k] or id(copy[k]) in replaced:
                continue
            if not ((_user_class(type(obj)) or numbers_only and _dict_object(obj)) and
                    carriable(v, numbers_only) and carriable(copy[k], numbers_only)) and \
                    not region_numbers.attribute(obj, copy[k], v):    # (a SimpleNamespace)
                return None
            loc = Location(copy[k], f"{type(obj).__name__}.{k}", obj=obj, name=k)
            found.setdefault(loc.key, (loc, v))
    if not all(_in_scope(v) for loc, new in found.values() for v in (loc.before, new)):
        return None     # a value of a region traced apart (an object's state elsewhere)
    for loc, _ in found.values():
        loc.reset()
    if watch.changed() is not None:       # a change the locations do not explain
        for loc, new in found.values():
            if isinstance(loc, Grown):
                loc.obj.extend(loc.pattern)
            else:
                loc.set(new)
        return None
    return list(found.values())


def _replaced_lists(watch, numbers_only: bool) -> dict:
    """{id(list): (object, attribute, list value)}: lists of plain values a local
    user-class object's attribute held before the region and a list value
    (``PathValue`` of lists, ``RepeatValue``: a region inside this one chose or grew it)
    holds now: carried as that list's contents location, the value one path's
    contents. Not by a loop body (its options would differ per iteration)."""
    from .path_values import PathValue
    from .subgraphs import _is_plain
    if numbers_only:
        return {}
    copies = {id(obj): copy for obj, copy in watch.containers if type(obj) is list}
    found = {}
    for obj, copy in watch.containers:
        if isinstance(obj, (list, dict, set)) or not isinstance(copy, dict) or \
                id(obj) in watch.carried or not _user_class(type(obj)):
            continue
        for k, before in copy.items():
            now = obj.__dict__.get(k)
            if type(before) is list and id(before) in copies and \
                    isinstance(now, PathValue) and now._grows() and \
                    all(_is_plain(v) for v in copies[id(before)]):
                found[id(before)] = (obj, k, now)
    return found


def held_by(found, out) -> bool:
    """Whether the region's result ``out`` holds a list whose contents ``found`` carries
    (``return t, cm.log`` inside ``with cm:``): it would be read with the contents put
    back, not those of the path (the change is refused instead)."""
    lists = {id(loc.obj) for loc, _ in found if loc.holder}
    if not lists:
        return False
    from .outputs import reachable
    return any(id(v) in lists for v in reachable([out]))


def merge(*carries) -> List[Location]:
    """The locations of several traces' changes, each once, in order."""
    out, seen = [], set()
    for carry in carries:
        for loc, _ in carry:
            if loc.key not in seen:
                seen.add(loc.key)
                out.append(loc)
    return out


def values_on(carry, locations: List[Location], graph) -> tuple:
    """Each location's value after one trace (its value before where it did not change),
    checked to be usable in the trace's ``graph``."""
    from .path_values import PathValue
    new = {loc.key: v for loc, v in carry}
    values = tuple(new.get(loc.key, loc.before) for loc in locations)
    values = tuple(PathValue(0, (list(v),)) if loc.holder and isinstance(v, tuple) else v
                   for loc, v in zip(locations, values))   # (a list value on the other path)
    for loc, value in zip(locations, values):
        if not _in_scope(value, graph):
            raise GraphError(
                f"{loc.label} holds a value traced in another region (or one that has "
                f"finished) when a tensor-dependent region changes it")
    return values


def _list_holder(lst, copy, watch):
    """(object, attribute) of the one local user-class object whose attribute holds the
    list ``lst`` of plain values that a branch changed (``cm.log``), held nowhere else
    the running converted frames reach; else None. After the ``cond`` the attribute
    holds a ``PathValue`` choosing the contents (the list itself is no longer the
    attribute, so no other reference to it may see stale contents)."""
    from .subgraphs import _is_plain
    if type(lst) is not list or not all(_is_plain(v) for v in list(lst) + list(copy)):
        return None
    holders = []
    for obj, _ in watch.containers:
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(obj, (list, dict, set)):
            holders += [(obj, k) for k, v in attrs.items() if v is lst]
    holders = list({(id(o), k): (o, k) for o, k in holders}.values())
    if len(holders) != 1 or id(holders[0][0]) in watch.carried or \
            not _user_class(type(holders[0][0])):
        return None
    return holders[0]


def _frame_roots() -> list:
    """The locals of the running converted frames (generated code on the stack)."""
    roots = []
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_GENERATED):
            roots += list(frame.f_locals.values())
        frame = frame.f_back
    return roots


def _aliased(lst, owner, name: str) -> bool:
    """Whether the locals of the running converted frames reach ``lst`` other than as
    ``owner.<name>``. A list value (a PathValue of lists, a RepeatValue) is reached too
    through another PathValue holding its option lists (a cond passing it on makes a new
    one of the same options: ``with cm: if t: return x, cm.log`` leaves the early
    return's value holding them when ``__exit__`` appends)."""
    from .outputs import reachable
    roots = _frame_roots()
    same = _identities(lst)
    saved = owner.__dict__.pop(name)
    try:
        return any(id(v) in same for v in reachable(roots))
    finally:
        owner.__dict__[name] = saved


def _identities(value) -> set:
    """The ids of the objects that stand for ``value``: itself and, for a list value, the
    lists (a RepeatValue: the parts) its options are, at every depth."""
    from .path_values import PathValue, RepeatValue
    found, stack = set(), [value]
    while stack:
        v = stack.pop()
        if id(v) in found:
            continue
        found.add(id(v))
        if isinstance(v, RepeatValue):
            found.add(id(v.options))
        elif isinstance(v, PathValue):
            stack.extend(o for o in v.options if isinstance(o, (list, PathValue)))
    return found


def regrow(old, new) -> None:
    """A list value a region left (a PathValue of lists, a RepeatValue) is appended to
    while tracing (``cm.log.append('exit')`` in a later ``with cm:``): its holder's
    attribute becomes ``new`` (every option with the items). The holder is the one
    attribute of a local user-class object holding ``old`` that the running converted
    frames reach, and nothing else reaches ``old`` (which keeps its items: another name
    would see stale contents); else GraphError. Inside a later region the attribute's
    change is carried like any other (``changes``)."""
    from .outputs import reachable
    from .path_values import allowed
    roots = _frame_roots()
    holders = [(v, k) for v in reachable(roots) if not isinstance(v, (list, dict, set))
               and isinstance(getattr(v, "__dict__", None), dict)
               for k, x in list(v.__dict__.items()) if x is old]
    if len(holders) != 1 or not _user_class(type(holders[0][0])) or not allowed():
        old._refuse()
    if _aliased(old, *holders[0]):      # (an early return's value holding it: eager's
        raise GraphError(               # sees the append that follows, the graph's not)
            f"{type(holders[0][0]).__name__}.{holders[0][1]} (a list that tensor-dependent "
            f"control flow chose) is appended to while another value also holds it (a "
            f"return inside 'with' or 'try'/'finally' whose __exit__ or finally appends): "
            f"that value would keep the contents as they were")
    owner, name = holders[0]
    TOUCHED.append((owner, name, old))
    owner.__dict__[name] = new


def choose_contents(locations, then_carry, else_carry):
    """The list-contents locations among ``locations``: those the two paths leave alike
    are set now; for the others an index leaf per path (0 then, 1 else: the cond's
    output says which path ran). Returns (other locations, [(location, options)],
    then leaves, else leaves)."""
    rest, chosen, then_idx, else_idx = [], [], [], []
    then_v = dict((loc.key, v) for loc, v in then_carry)
    else_v = dict((loc.key, v) for loc, v in else_carry)
    for loc in locations:
        if not loc.holder:
            rest.append(loc)
            continue
        a, b = then_v.get(loc.key, loc.before), else_v.get(loc.key, loc.before)
        from .path_values import PathValue, allowed
        listy = isinstance(a, PathValue) or isinstance(b, PathValue)
        if listy and (_aliased(loc.obj, *loc.holder) or not allowed()):
            loc.obj[:] = loc.before
            raise GraphError(
                f"{loc.label} (a list) differs between the paths of a tensor condition and "
                f"is also reached by another name (or compared with 'is'): its contents are "
                f"known only when the graph runs")
        if listy:       # a list value on some path: chosen with the others (values_on)
            rest.append(loc)
            continue
        TOUCHED.append((loc.obj, None, None))
        if same_constant(a, b):        # (by type and bits: [-0.0] is not [0.0])
            loc.set(list(a))
            continue
        if _aliased(loc.obj, *loc.holder) or not allowed():
            raise GraphError(
                f"{loc.label} (a list) differs between the paths of a tensor condition and "
                f"is also reached by another name (or compared with 'is'): its contents are "
                f"known only when the graph runs")
        chosen.append((loc, (list(a), list(b))))
        then_idx.append(0)
        else_idx.append(1)
    return rest, chosen, tuple(then_idx), tuple(else_idx)


def assign_contents(chosen, indices) -> None:
    """After the cond: the holder's attribute becomes a PathValue of the contents."""
    from .path_values import PathValue, MADE
    for (loc, options), index in zip(chosen, indices):
        owner, name = loc.holder
        TOUCHED.append((owner, name, loc.obj))
        owner.__dict__[name] = PathValue(index, options)
        MADE[0] += 1


def _in_scope(value, graph=None) -> bool:
    """A traced value the region being traced (``graph``, or the one being built) can
    use: from its graph or an enclosing one (Python values always)."""
    from .symbolic import current_graph
    node = getattr(value, "_node", None)
    if node is None:
        return True
    graph = graph or current_graph()
    while graph is not None:
        if node.graph is graph:
            return True
        graph = graph.parent
    return False


def _shallow_differs(obj, copy) -> bool:
    if isinstance(obj, list):
        return len(obj) != len(copy) or any(a is not b for a, b in zip(obj, copy))
    if isinstance(obj, dict):
        return obj.keys() != copy.keys() or any(obj[k] is not copy[k] for k in copy)
    return obj != copy


def _user_class(cls) -> bool:
    """Instances of classes defined in user code (a library's object may be shared)."""
    if getattr(cls, "__tograph_carried__", False):   # (a stand-in the call made: a generator)
        return True
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    if not filename or getattr(cls, "__slots__", None) is not None:
        return False
    return not _library(filename) and not cls.__module__.startswith(("runtime", "transpiler"))


def _dict_object(obj) -> bool:
    """A loop body may carry the tensors and numbers of any object that keeps its state
    in its ``__dict__`` (a library's too: a KV cache layer's ``keys``); the front door
    refuses the change where the object existed before the call (``shared_touched``)."""
    from .outputs import slot_names
    if getattr(type(obj), "__tograph_carried__", False):
        return True
    return not slot_names(type(obj)) and not type(obj).__module__.startswith(
        ("runtime", "transpiler", "torch"))


def _local_cell(root) -> bool:
    """A cell made by a converted frame that is running now (a local of the call being
    traced), reached only through closure variables of converted code."""
    if root.cell is None or isinstance(root.cell, _FixedCell):
        return False
    for code, name in root.path:      # (our own wrappers' cells lead to the user's code)
        if not (code.co_filename.startswith(_GENERATED) or code.co_filename.startswith(
                _RUNTIME)) or name not in code.co_freevars:
            return False
    code, name = root.path[-1]
    frame = sys._getframe(1)
    while frame is not None:
        outer = frame.f_code
        if outer.co_filename.startswith(_GENERATED) and name in outer.co_cellvars and \
                _contains(outer, code) and _frame_cell(frame, name) is root.cell:
            return True
        frame = frame.f_back
    return False


def _frame_cell(frame, name):
    """The cell ``frame`` holds for ``name`` (found through a function it made that
    closes over it: frames do not show their cells)."""
    for value in list(frame.f_locals.values()):
        fn = getattr(value, "__func__", value)
        code = getattr(fn, "__code__", None)
        if code is not None and name in code.co_freevars and fn.__closure__:
            return fn.__closure__[code.co_freevars.index(name)]
    return None


def _contains(outer, code) -> bool:
    if outer is code:
        return True
    return any(inspect.iscode(c) and _contains(c, code) for c in outer.co_consts)
