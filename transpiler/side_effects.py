"""Python state a trace depends on: what it mutated (side effects), what it read (guards).

A graph repeats tensor work on every call, but not Python work: a global counter bumped,
a list of the caller's appended to, an attribute of ``self`` reassigned. Such a function
cannot be a graph. ``Snapshot.take`` records, one level deep, the state a function can
reach -- the globals its code names, its closure cells, its arguments, and the object a
bound method belongs to -- and ``changes()`` says what differs after tracing, so the
front door can restore it and fall back to eager execution.

The same record, taken after a successful trace, is the trace's *guard*: Python values
read while tracing (a global ``SCALE``, a closure variable, ``self.p``) are baked into the
graph, so ``Snapshot.still_holds()`` is checked before each run of a cached graph, and a
changed value means tracing again, never a stale answer. Guarded besides: the attributes
of user classes the code can reach (``Holder.SCALE``, ``cfg.scale`` set on ``cfg``'s
class, ``self.EPS``), the attributes a user module global is read for (``config.SCALE``),
the state of the module trees involved (``runtime.module_state``: submodules, parameters,
buffers, attributes, hooks) and what the trace asked of real tensors
(``runtime.trace_reads``: a parameter's ``requires_grad``, a buffer's shape or values).
``compile_check`` makes the check run per call: ``still_holds`` as one function, whose
fingerprints and one-level states are compared by the version tags of the dicts they
looked into, re-taken only when one moved (``runtime.guard_tags``).
"""
from __future__ import annotations

import functools
import inspect
import types
from typing import Any, List, Tuple

from runtime import carried_numbers
from runtime.builtin_state import slot_names, state_of
from runtime.errors import GraphError
from runtime.guard_tags import EMPTY, Bindings, ShallowState, Tags, TaggedPrint
from runtime.plain_containers import (dict_copy, dict_items, dict_values, elements, list_copy,
                                      put_back)
from runtime.python_state import (DEPTH, difference, fingerprint, is_tensor, restore,
                                  strings_used, user_classes)
from runtime.source_info import _is_library

from . import (function_state, helper_containers, hook_helpers, hook_snapshot,
               module_containers, mutation_lines)

_ATOMS = (int, float, complex, str, bytes, bool, type(None))


def _state_of(obj) -> Any:
    """A shallow fingerprint of a mutable object (identities of what it holds)."""
    if isinstance(obj, list):       # (a subclass's own methods are not run: plain_containers)
        return ("list", tuple(id(v) for v in elements(obj)))
    if isinstance(obj, dict):
        return ("dict", tuple((k, id(v)) for k, v in dict_items(obj) if _hashable(k)))
    if isinstance(obj, (set, bytearray)):
        return ("set", frozenset(id(v) for v in elements(obj))) if isinstance(obj, set) \
            else bytes(obj)
    if isinstance(obj, (types.ModuleType, types.FunctionType, type, types.BuiltinFunctionType,
                        types.MethodType)):     # (a method's __dict__ is its function's)
        return None
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not is_tensor(obj):   # (a traced tensor too)
        items = tuple((k, id(v)) for k, v in attrs.items() if not k.startswith("_tograph"))
        if hasattr(obj, "_buffers") and isinstance(obj._buffers, dict):
            items += tuple(("buffer:" + k, id(v)) for k, v in obj._buffers.items())
        return ("obj", items)
    return None


def _hashable(k) -> bool:
    try:
        hash(k)
        return True
    except TypeError:
        return False


def _copy(obj):
    if isinstance(obj, list):
        return list_copy(obj)
    if isinstance(obj, dict):
        return dict_copy(obj)
    if isinstance(obj, set):
        return set(elements(obj))
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return dict(attrs)
    return None


_CHECK_NAMES = (("module_state", "the state of a module tree (submodules, parameters, "
                                 "buffers, attributes, hooks)"),
                ("backend_flags", "a torch.backends flag"),
                ("environment", "the process environment (os.environ)"),
                ("carried_kinds", "the kind of a number the graph carries"),
                ("trace_reads", "what the trace asked of a real tensor (requires_grad, "
                                "shape, values)"))


def _check_name(check) -> str:
    """What one of ``Snapshot._checks`` watches, in words."""
    where = f"{getattr(check, '__module__', '')}.{getattr(check, '__qualname__', '')}"
    return next((text for key, text in _CHECK_NAMES if key in where), "a recorded check")


def _guard_print(label: str, value, names=None, modules=None, inputs=False) -> TaggedPrint:
    """The fingerprint a guard compares (``runtime.guard_tags``: taken again only when a
    dict it looked into changed); GraphError where it cannot look deep enough to see
    what the trace may have read (the call falls back rather than risk a stale graph).
    ``modules``: a list to receive the ``nn.Module``s met, counted by identity there
    (the caller guards their trees with ``runtime.module_state``). ``inputs``: the tensors
    its lists, dicts and attributes hold are graph inputs (``runtime.argument_objects``)."""
    found = TaggedPrint(value, deep=True, names=names, modules=modules, inputs=inputs)
    if found.deep:
        raise GraphError(f"{label} ({type(value).__name__}) holds objects nested deeper than "
                         f"{DEPTH} levels (a {type(found.deep[0]).__name__}): a change there "
                         f"between calls could not be seen")
    return found


class Snapshot:
    def __init__(self):
        self._globals: List[Tuple[dict, str, Any]] = []       # (namespace, name, value)
        self._cells: List[Tuple[Any, Any]] = []
        self._objects: List[Tuple[str, Any, Any, Any]] = []   # (label, obj, fingerprint, copy)
        self._deep: List[Tuple[str, Any, Any, list]] = []    # (label, obj, deep print, copies)
        self._arguments: List[Tuple[int, TaggedPrint]] = []  # (flat index, deep print)
        self._held: List[TaggedPrint] = []                  # (deep prints of) guards
        self._read: List[TaggedPrint] = []       # of a user module's names the code uses
        self._names: set = set()            # names the code uses (globals and attributes)
        self._codes: list = []              # the code objects those names come from
        self._checks: list = []             # module state, tensor reads: () -> bool
        self._owner = None
        self._modules: set = set()          # ids of the modules a ModuleState checks
        self._module_prints: list = []      # the ModuleState's prints: in compile_check's tags

    @classmethod
    def take(cls, fn, args, kwargs, _taking: frozenset = frozenset()) -> "Snapshot":
        snap = cls()
        func = getattr(fn, "__func__", fn)
        code = getattr(func, "__code__", None)
        ns = getattr(func, "__globals__", {})
        if code is not None:
            snap._names = set(_names_used(code)) | strings_used(code)   # (getattr's too)
            snap._codes = [code]
            for name in _names_used(code):
                if name in ns:
                    snap._globals.append((ns, name, ns[name]))
                    snap._watch(f"global {name!r}", ns[name])
            for name, cell in zip(code.co_freevars, func.__closure__ or ()):
                try:
                    value = cell.cell_contents
                except ValueError:
                    value = _EMPTY
                snap._cells.append((name, cell, value))
                snap._watch(f"closure variable {name!r}", value)
        positional = code.co_varnames[:code.co_argcount] if code is not None else ()
        given = getattr(func, "__defaults__", None) or ()
        defaults = [(f"the default of parameter {p!r} (a mutable default shared by all "
                     f"calls)", d) for p, d in zip(positional[len(positional) - len(given):],
                                                   given)] + \
            [(f"the default of parameter {name!r} (shared by all calls)", d)
             for name, d in (getattr(func, "__kwdefaults__", None) or {}).items()]
        for label, default in defaults:
            snap._watch(label, default)
        owner = getattr(fn, "__self__", None)
        snap._owner = owner
        snap._hooks = hook_snapshot.take(owner)     # (a library's hooks installed lazily)
        if owner is not None:
            snap._watch("an attribute of the object the method belongs to", owner)
        taking = _taking | {_hook_key(fn)}      # (a hook that is a method of the module)
        reached = [owner] + [value for _, _, value in snap._globals] + \
            [value for _, _, value in snap._cells] + list(args) + \
            list(kwargs.values())          # (a model the function calls, or is passed)
        for hook in {_hook_key(h): h for m in reached for h in module_hooks(m)}.values():
            if _hook_key(hook) not in taking:   # they run while tracing: what they change
                snap.include(hook, taking, deep=True)   # (and the helpers they call, run
                for helper in hook_helpers.reached(hook):   # natively: ``self.hist`` too)
                    snap.include(helper, taking | {_hook_key(hook)}, deep=True)
        for i, a in enumerate(args):
            snap._watch(f"argument #{i}", a)
        for k, v in kwargs.items():
            snap._watch(f"argument {k!r}", v)
        for ns, name, value in snap._globals:       # an iterator's position, an array's
            snap._watch_state(f"global {name!r}", value)                       # bytes
            if isinstance(value, type) and user_classes(value) or \
                    _holds_containers(value):   # ``Counter.n += 1``, ``STATE.log.append``
                snap._watch_deep(f"global {name!r}", value)
        for name, cell, value in snap._cells:
            snap._watch_state(f"closure variable {name!r}", value)
            if isinstance(value, type) and user_classes(value) or _holds_containers(value):
                snap._watch_deep(f"closure variable {name!r}", value)
        for label, default in defaults:     # ``history=history``'s ``history.losses``
            snap._watch_state(label, default)
            if _holds_containers(default):
                snap._watch_deep(label, default)
        if owner is not None:           # and deeper: ``self.cfg.count += 1``
            snap._watch_deep("an attribute of the object the method belongs to", owner)
        for i, a in enumerate(args):
            snap._watch_deep(f"argument #{i}", a)
        for k, v in kwargs.items():
            snap._watch_deep(f"argument {k!r}", v)
        snap._trees = hook_snapshot.tensors_of(    # other models the call reaches
            [v for v in [value for _, _, value in snap._globals] +
             [value for _, _, value in snap._cells] + list(args) + list(kwargs.values())
             if v is not owner and not isinstance(v, type)])    # (take skips non-modules)
        return snap

    def _watch_state(self, label: str, obj) -> None:
        """Watch (while tracing) an object keeping its state outside a ``__dict__``."""
        if _keeps_state(obj):
            self._watch_deep(label, obj)

    def _watch_deep(self, label: str, obj) -> None:
        if not _is_value(obj):
            containers: list = []
            self._deep.append((label, obj, fingerprint(obj, containers=containers),
                               containers))

    def watch_arguments(self, flat) -> None:
        """Guard the Python values the trace could read through the (flattened)
        arguments: an object's attributes, at any depth up to ``python_state.DEPTH``
        (``cfg.sub.scale``, ``cfgs[0].scale``, a module argument's attributes); atoms
        and tensors are in the signature already; an ``nn.Module`` among them, or held
        by one of them, counts by identity and its tree is guarded by ``ModuleState`` (as
        ``to_graph(module)`` guards its own: submodules, parameters, buffers, attributes,
        the config objects they hold), not walked to the depth. Objects held by the globals, closure
        variables and the method's object's public attributes (``self.cfg.scale``) are
        guarded to the same depth (their binding is checked one level deep already);
        a Module among them keeps the one-level check (a deep one per call costs too
        much for a model)."""
        modules: list = []      # met in them: guarded as to_graph(module) guards its own
        walked = getattr(getattr(flat, "found", None), "leaves", ())   # (argument_objects)
        self._arguments = [(i, _guard_print(f"argument #{i}", v, self._names, modules,
                                            i in walked))
                           for i, v in enumerate(flat) if not _is_value(v)]
        held = [value for _, _, value in self._globals] + \
            [value for _, _, value in self._cells]
        if self._owner is not None and isinstance(getattr(self._owner, "__dict__", None), dict):
            held += [v for k, v in vars(self._owner).items() if not k.startswith("_")]
        if self._owner is not None:                     # ``self.SCALE``, ``cls.factor``
            held += [self._owner, type(self._owner)]
        seen = set()
        for value in held:
            if id(value) not in seen and _plain_holder(value):
                seen.add(id(value))
                self._held.append(_guard_print("a value the function reads", value,
                                               self._names, modules))
        names = tuple(sorted(self._names))
        for value in [value for _, _, value in self._globals] + \
                [value for _, _, value in self._cells]:
            if id(value) not in seen and (_user_module(value) or (   # ``config.SCALE``
                    isinstance(value, types.FunctionType) and vars(value))):  # ``f.extra``
                seen.add(id(value))
                read = tuple(n for n in names if n in vars(value))
                self._read.append(TaggedPrint(value, functools.partial(
                    _attributes, value, read)))
        self._watch_modules([self._owner] + [value for _, _, value in self._globals] +
                            [value for _, _, value in self._cells] + list(flat) + modules)
        if "backends" in self._names:       # ``if torch.backends.mkldnn.enabled:``
            from runtime.trace_reads import backend_flags_check
            self._checks.append(backend_flags_check())
        if self._names & {"environ", "getenv", "environb"}:     # ``os.environ.get("FLAG")``
            from runtime.trace_reads import environment_check
            self._checks.append(environment_check())

    def _watch_modules(self, candidates) -> None:
        """Guard the state of the ``nn.Module`` trees among ``candidates``."""
        roots = [v for v in candidates
                 if isinstance(getattr(v, "__dict__", None), dict) and "_modules" in vars(v)
                 and callable(getattr(v, "modules", None))]
        if roots:
            from runtime.module_state import ModuleState
            state = ModuleState(roots, getattr(self, "_written", None))
            self._modules.update(id(m) for m in state.modules)
            start = len(self._module_prints)
            self._checks.append(state.check(prints=self._module_prints))
            # the config objects the modules hold are compared by fingerprint: refused
            # where it cannot see to their bottom (``self.cfg.a.b.c.d.e.scale``); the
            # modules they hold count by identity there and are guarded here in turn
            held: list = []
            for print_ in self._module_prints[start:]:
                _guard_print("an attribute of a module",
                             print_.value, self._names, held)
            held = [m for m in held if id(m) not in self._modules]
            if held:
                self._watch_modules(held)

    def module_writes(self, names) -> None:
        """The (module, name, shaped) a graph sets or reads when it runs
        (``runtime.module_writes``): the module guard compares their tensors by meta
        (with their shape where ``shaped``), not identity. Before ``watch_arguments``."""
        self._written = {}
        for m, name, shaped in names:
            self._written.setdefault(id(m), {})[name] = shaped

    def dict_writes(self, pairs) -> None:
        """The (dict, key, shaped) a graph sets when it runs (``runtime.module_writes``: a hook's
        dict of activations): those dicts are compared by an ``alike`` check, those keys'
        tensors by meta, not identity. After ``watch_arguments``."""
        keys: dict = {}
        for d, key, shaped in pairs:
            keys.setdefault(id(d), (d, {}))[1][key] = shaped
        if not keys:
            return
        from runtime.module_writes import alike
        self._objects = [e for e in self._objects if id(e[1]) not in keys]
        self._held = [p for p in self._held if id(p.value) not in keys]
        self._checks += [alike(d, names) for d, names in keys.values()]

    def release(self, objects, served=None, noted=None) -> None:
        """Stop guarding the contents of ``objects`` (an optimizer, an lr scheduler whose
        methods the graph calls when it runs: ``runtime.autograd_effects``), which change
        on every call; their bindings stay guarded. Code that names one of their public
        data attributes (``opt.param_groups[0]["lr"]``, ``sched.last_epoch``) may have
        read a value the graph's own calls change when it runs: refused (GraphError),
        but for those ``served`` ({id(object): names}) as graph values while tracing
        (``runtime.training_attributes``: ``param_groups``, ``last_epoch``). ``noted``
        ({id(object): names}): what the trace saw read on that object itself
        (``runtime.optimizer_reads``) and the strings the code holds (``getattr``,
        ``vars(opt)[...]`` read past the recording) decide in place of the attribute names
        the code uses (a model's ``self.state`` is not the optimizer's)."""
        for o in objects:
            if hook_snapshot._is_module(o):     # its zero_grad() changes grads only: its
                continue                        # attributes stay the module guard's
            used = self._names if id(o) not in (noted or {}) else noted[id(o)] | set(
                ).union(*(strings_used(c) for c in self._codes))   # (vars(opt)["state"])
            read = used & {k for k, v in vars(o).items()
                           if not k.startswith("_") and not callable(v)}
            read -= (served or {}).get(id(o), set())
            if read:
                location = first_use(self._codes, read)
                where = "" if location is None else f"{location[0]}:{location[1]}: "
                error = GraphError(f"{where}the function reads {type(o).__name__}'s "
                                   f"{', '.join(sorted(read))} in Python, which its step(), "
                                   f"zero_grad() or scheduler step() (run by the graph "
                                   f"when it runs) change: the value seen while tracing "
                                   f"would be kept")
                error.location = location
                raise error
        drop = {id(o) for o in objects}
        self._objects = [entry for entry in self._objects if id(entry[1]) not in drop]
        self._deep = [entry for entry in self._deep if id(entry[1]) not in drop]
        self._arguments = [(i, print_) for i, print_ in self._arguments  # (the signature
                           if id(print_.value) not in drop]       # has their identity)
        self._staged = drop
        self._mask()

    def bindings(self) -> tuple:
        """The closure cells ``[(name, cell, value)]``, the globals ``[(namespace, name,
        value)]`` and the method's object recorded (``runtime.carried_numbers``)."""
        return list(self._cells), list(self._globals), self._owner

    def numbers_before(self) -> list:
        """(slot, value before the call) of the numbers held by the lists, dicts and plain
        objects of the bindings ``include_new`` added (a helper's ``steps['done'] += 1``:
        ``carried_numbers.rebound`` compares what they hold after the trace with these)."""
        return list(getattr(self, "_numbers", ()))

    def carry(self, slots) -> None:
        """Stop comparing the numbers ``slots`` (``runtime.carried_numbers``) hold: the
        graph reads and sets them itself on every run. A list or object holding one is
        still guarded, by a print that leaves that item or attribute out."""
        if not slots:
            return
        self._checks.append(carried_numbers.check(slots))      # (their kinds)
        lists = {id(s.get()) for s in slots if type(s.get()) is list}   # (appended to:
        if lists:                                   # runtime.appended_lists, never read)
            self._objects = [e for e in self._objects if id(e[1]) not in lists]
            self._deep = [e for e in self._deep if id(e[1]) not in lists]
            self._held = [p for p in self._held if id(p.value) not in lists]
            self._module_prints[:] = [p for p in self._module_prints if id(p.value) not in lists]
        cells = {id(s.holder) for s in slots if s.kind == "cell"}
        names = {(id(s.holder), s.key) for s in slots if s.kind == "global"}
        self._cells = [e for e in self._cells if id(e[1]) not in cells]
        self._globals = [e for e in self._globals if (id(e[0]), e[1]) not in names]
        holders: dict = {}
        for s in slots:
            if s.kind in ("item", "attr"):
                holders.setdefault(id(s.holder), (s.holder, set()))[1].add(s.key)
        if not holders:
            return
        self._carried = {k: keys for k, (_, keys) in holders.items()}
        self._objects = [e for e in self._objects if id(e[1]) not in holders]
        printed = {id(p.value) for p in self._held}
        self._held += [TaggedPrint(h, deep=True, names=self._names, modules=[])
                       for k, (h, _) in holders.items() if k not in printed]
        self._mask()

    def _mask(self) -> None:
        """Re-make the prints of ``_held`` that see what the graph changes itself."""
        carried = getattr(self, "_carried", {})
        staged = getattr(self, "_staged", ())
        self._held = [_masked(p, staged, carried.get(id(p.value), ()), self._names,
                              carried.keys() - {id(p.value)}) for p in self._held]
        if carried:     # (in place: the module check holds this list)
            self._module_prints[:] = [
                _masked(p, staged, carried.get(id(p.value), ()), self._names,
                        carried.keys() - {id(p.value)}) for p in self._module_prints]

    def argument_holders(self, objects) -> None:
        """Stop watching ``objects`` by identity of what they hold (one level deep: a
        method of theirs the trace called, ``cache.layers[0].update``; deep: a value a
        called function's closure holds): they are argument objects whose tensors
        are graph inputs and whose attributes the argument's print guards by place
        (``runtime.argument_objects``): the call's writes replace their tensors."""
        drop = {id(o) for o in objects}
        self._objects = [entry for entry in self._objects if id(entry[1]) not in drop]
        self._deep = [entry for entry in self._deep if id(entry[1]) not in drop]
        self._held = [p for p in self._held if id(p.value) not in drop]   # (a closure's)

    def watch_reads(self, reads, constants=()) -> None:
        """Guard what the trace asked of real tensors (``runtime.trace_reads``);
        ``constants``: the real tensors the graph holds."""
        if reads is None:
            return
        reads.guard_constants(constants)
        check = reads.check()
        if check is not None:
            self._checks.append(check)

    def arguments_check(self):
        """A check of ``watch_arguments``'s record against a call's flattened arguments,
        or None when the arguments hold no objects (the fast path checks nothing)."""
        if not self._arguments:
            return None
        prints = tuple(self._arguments)

        def check(flat) -> bool:
            for i, print_ in prints:
                if not print_.holds_for(flat[i]):
                    return False
            return True
        return check

    def _watch(self, label: str, obj) -> None:
        if isinstance(obj, _ATOMS):
            return
        state = _state_of(obj)
        if state is not None:
            self._objects.append((label, obj, state, _copy(obj)))

    def roots(self) -> list:
        """The values recorded but the arguments (globals, closure values, defaults, the
        method's object): what existed before the call, to tell it from what the call
        made. (The arguments the trace sees are rebuilt containers: see the caller.)"""
        return ([value for _, _, value in self._globals] +
                [value for _, _, value in self._cells if value is not _EMPTY] +
                [obj for label, obj, _, _ in self._objects
                 if not label.startswith("argument ")])

    def labelled_roots(self) -> list:
        """``roots`` as (label, value): ``"the global 'STATE'"``, ``"the closure variable
        'log'"``, ``"the default of parameter 's' (...)"``."""
        return ([(f"the global {name!r}", value) for _, name, value in self._globals] +
                [(f"the closure variable {name!r}", value) for name, _, value in self._cells
                 if value is not _EMPTY] +
                [(label, obj) for label, obj, _, _ in self._objects
                 if label.startswith("the default")])

    def sees(self, objects) -> str:
        """The label of a watched object that is (or directly holds) one of ``objects``."""
        wanted = {id(o) for o in objects}
        for ns, name, value in self._globals:
            if id(value) in wanted:
                return f"global {name!r}"
        for name, cell, value in self._cells:
            if id(value) in wanted:
                return f"closure variable {name!r}"
        for label, obj, state, _ in self._objects:
            held = state[1] if isinstance(state, tuple) and len(state) == 2 else ()
            if id(obj) in wanted or any(
                    (item[1] if isinstance(item, tuple) else item) in wanted
                    for item in (held if isinstance(held, (tuple, frozenset)) else ())):
                return label
        return ""

    def changes(self) -> str:
        """A description of the first mutation found, or '' if none."""
        for ns, name, value in self._globals:
            if ns.get(name, _EMPTY) is not value:
                return f"the function assigns global {name!r}"
        for name, cell, value in self._cells:
            try:
                now = cell.cell_contents
            except ValueError:
                now = _EMPTY
            if now is not value:
                return f"the function assigns nonlocal variable {name!r}"
        for label, obj, state, _ in self._objects:
            now = _state_of(obj)
            if now != state:        # (the line storing what changed: a method's ``self.n``)
                keys = mutation_lines.changed_keys(state, now, obj)
                self._stored_at(keys, obj)
                return f"the function mutates {label}" + (f" (its .{keys[0]})" if keys else "")
        for label, obj, print_, _ in self._deep:
            now = fingerprint(obj)
            if now != print_:
                where = difference(print_, now)     # (deep down: only the user's stores,
                self._stored_at(mutation_lines.path_keys(where), users=True)  # not a model's)
                return f"the function mutates {label}" + (f" (its {where.lstrip('.')})"
                                                          if where else "")
        filled, owner = helper_containers.left(getattr(self, "_helper_containers", ()))
        if filled:
            if owner is not None:       # (the helper's line that changes it)
                self.changed_owner = owner
            return filled
        kept = getattr(self, "_functions", None) and self._functions.changed()
        if kept:                            # (a helper's default, closure, attribute)
            self.changed_owner = kept[1]
            return kept[0]
        replaced = hook_snapshot.replaced_tensor(getattr(self, "_hooks", hook_snapshot.NOTHING)) \
            or hook_snapshot.replaced_tensor(getattr(self, "_trees", hook_snapshot.NOTHING))
        if replaced is not None:
            return f"the function replaces the module's {replaced}"
        return module_containers.changed(getattr(self, "_hooks", hook_snapshot.NOTHING)
                                         .containers + getattr(
                                             self, "_trees", hook_snapshot.NOTHING).containers)

    def _stored_at(self, names, obj=None, users=False) -> None:
        """Note ``changed_line``: where the code the trace met (then the methods of
        ``obj``'s class) first stores one of the
        attributes ``names`` (``transpiler.mutation_lines``); ``users``: the user's code
        only (a library's store, ``self.config.problem_type = ...``, is not the line)."""
        codes = self._codes + getattr(self, "_met", []) + mutation_lines.method_codes(obj)
        self.changed_line = mutation_lines.store_line(
            [c for c in codes if not (users and mutation_lines.installed(c))], names)

    def changed_labels(self) -> set:
        """The labels (``argument #1``) of the watched objects whose state or deep
        contents changed (``held_arguments``)."""
        return {label for label, obj, state, _ in self._objects if _state_of(obj) != state} | \
            {label for label, obj, print_, _ in self._deep if fingerprint(obj) != print_}

    def still_holds(self) -> bool:
        """Whether every recorded value is still the same object (same contents, one
        level deep): the graph traced under this state is still the right one."""
        for print_ in self._read:
            if not print_.holds():
                return False
        for check in self._checks:
            if not check():
                return False
        for print_ in self._module_prints:
            if not print_.holds():
                return False
        for ns, name, value in self._globals:
            if ns.get(name, _EMPTY) is not value:
                return False
        for name, cell, value in self._cells:
            try:
                if cell.cell_contents is not value:
                    return False
            except ValueError:
                if value is not _EMPTY:
                    return False
        for label, obj, state, _ in self._objects:
            if _state_of(obj) != state:
                return False
        for print_ in self._held:
            if not print_.holds():
                return False
        return True

    def compile_check(self):
        """``still_holds`` as one generated expression (checked before every call)."""
        if not (self._globals or self._cells or self._objects or self._held or self._read
                or self._checks):
            return _always
        env = {}
        terms = []
        tagged = self._read + self._held + self._module_prints + [       # one pass over their tags
            ShallowState(obj, _state_of, state, also=("_buffers",))
            for _, obj, state, _ in self._objects
            if id(obj) not in self._modules]    # (a ModuleState compares more of it)
        if tagged:
            env["tags"] = Tags(tagged)
            terms.append("tags()")
        for k, check in enumerate(self._checks):
            env[f"c{k}"] = check
            terms.append(f"c{k}()")
        if self._globals or self._cells:        # what the names are bound to
            env["bound"] = Bindings(self._globals, [(cell, value)
                                                    for _, cell, value in self._cells])
            terms.append("bound()")
        if len(terms) == 1:             # (the one check itself: a call fewer per call)
            return env[terms[0][:-2]]
        return eval("lambda: " + " and ".join(terms), env)  # noqa: S307 -- our own text

    def summary(self) -> str:
        """What the guard checks, in words (the ``tograph.guards`` log)."""
        parts = []
        names = sorted({name for _, name, _ in self._globals})
        if names:
            parts.append("globals " + ", ".join(names))
        if self._cells:
            parts.append("closure variables " + ", ".join(n for n, _, _ in self._cells))
        if self._objects:
            parts.append(f"{len(self._objects)} object(s) one level deep")
        if self._held or self._arguments:
            parts.append(f"{len(self._held) + len(self._arguments)} value(s) in depth")
        if self._read:
            parts.append(f"the attributes read of {len(self._read)} module(s) or function(s)")
        if self._checks:
            parts.append(", ".join(_check_name(c) for c in self._checks))
        return "; ".join(parts) or "nothing (the trace read no Python state)"

    def explainer(self):
        """A function ``(flat arguments) -> str``: the first recorded check that fails now,
        in words ('' when all hold): what the ``tograph.guards`` log says when a cached
        graph's guard fails. It holds what the compiled check holds, no copies."""
        globals_, cells = list(self._globals), list(self._cells)
        objects = [(label, obj, state) for label, obj, state, _ in self._objects]
        read, held, prints = list(self._read), list(self._held), list(self._module_prints)
        checks, arguments = list(self._checks), list(self._arguments)

        def explain(flat=None) -> str:
            for ns, name, value in globals_:
                if ns.get(name, _EMPTY) is not value:
                    return f"global {name!r} is bound to another object"
            for name, cell, value in cells:
                try:
                    now = cell.cell_contents
                except ValueError:
                    now = _EMPTY
                if now is not value:
                    return f"closure variable {name!r} is bound to another object"
            for label, obj, state in objects:
                if _state_of(obj) != state:
                    return f"{label} changed (what it holds, one level deep)"
            for print_ in read:
                if not print_.holds():
                    return (f"an attribute the function reads of "
                            f"{getattr(print_.value, '__name__', type(print_.value).__name__)} "
                            f"changed")
            for print_ in held + prints:
                if not print_.holds():
                    return f"a {type(print_.value).__name__} the function reads changed"
            for check in checks:
                if not check():
                    return f"{_check_name(check)} changed"
            for i, print_ in arguments if flat is not None else ():
                if not print_.holds_for(flat[i]):
                    return (f"argument #{i} ({type(flat[i]).__name__}): an attribute the "
                            f"trace could read changed")
            return ""
        return explain

    def include(self, fn, _taking: frozenset = frozenset(), deep: bool = False) -> None:
        """Also record the globals and closure of ``fn`` (a function the trace called);
        ``deep``: and what the containers they hold (and a method's object) hold, put
        back after a refused trace (a hook's ``self.hist.append(...)``)."""
        other = Snapshot.take(fn, (), {}, _taking)
        if deep:
            self._deep += other._deep
        self._globals += other._globals
        self._cells += other._cells
        self._objects += other._objects
        self._names |= other._names
        self._codes += other._codes

    def include_new(self, fn) -> None:
        """Also watch, from now on, the bindings of the globals and closure cells of
        ``fn`` (a user function the trace meets: a helper rebinding ``global N``), but
        those already recorded (their value from before the call is kept). Only the
        bindings: what the objects they hold keep is watched as before (cheap: a trace
        of GPT-2 meets ~60 such functions)."""
        func = getattr(fn, "__func__", fn)
        code = getattr(func, "__code__", None)
        if code is None:
            return
        ns = getattr(func, "__globals__", {})
        known = getattr(self, "_known", None)
        if known is None:       # (kept across calls: a trace meets many functions)
            known = self._known = {(id(space), name) for space, name, _ in self._globals} | \
                {id(c) for _, c, _ in self._cells}
        new = len(self._cells), len(self._globals)
        self._met = getattr(self, "_met", []) + [code]     # (mutation_lines)
        for name in _names_used(code):
            if name in ns and (id(ns), name) not in known:
                known.add((id(ns), name))
                self._globals.append((ns, name, ns[name]))
                self._helper_containers = getattr(self, "_helper_containers", [])
                self._helper_containers += helper_containers.take(name, ns[name], func)  # (METRICS)
        for name, cell in zip(code.co_freevars, func.__closure__ or ()):
            if id(cell) not in known:
                known.add(id(cell))
                try:
                    value = cell.cell_contents
                except ValueError:
                    value = _EMPTY
                self._cells.append((name, cell, value))
        self._numbers = getattr(self, "_numbers", []) + carried_numbers.held_numbers(
            self._cells[new[0]:], self._globals[new[1]:])   # (before the helper runs)
        if not hasattr(self, "_functions"):      # (and what it keeps across calls; not
            self._functions = function_state.Watch(self._argument_ids())    # the arguments)
        self._functions.function(func, [(n, ns[n]) for n in _names_used(code) if n in ns])

    def _argument_ids(self) -> set:
        """The ids of the arguments and of what they hold (their changes are the argument
        objects' and held arguments' to carry or refuse)."""
        ids = {id(obj) for label, obj, _, _ in self._objects if label.startswith("argument ")}
        for label, obj, _, containers in self._deep:
            if label.startswith("argument "):
                ids.add(id(obj))
                ids.update(id(held) for held, _ in containers)
        return ids

    def restore(self) -> None:
        hook_snapshot.restore(getattr(self, "_hooks", hook_snapshot.NOTHING))
        helper_containers.restore(getattr(self, "_helper_containers", ()))
        if hasattr(self, "_functions"):
            self._functions.restore()
        hook_snapshot.restore(getattr(self, "_trees", hook_snapshot.NOTHING))
        for label, obj, print_, containers in self._deep:
            if fingerprint(obj) != print_:
                restore(containers)
        for ns, name, value in self._globals:
            ns[name] = value
        for name, cell, value in self._cells:
            if value is not _EMPTY:
                cell.cell_contents = value
        for label, obj, state, copy in self._objects:
            if copy is None or _state_of(obj) == state:
                continue
            if isinstance(obj, (list, dict, set)):
                put_back(obj, copy)
            elif isinstance(getattr(obj, "__dict__", None), dict):
                obj.__dict__.clear()
                obj.__dict__.update(copy)


_EMPTY = EMPTY          # an empty cell's value, a missing name's


def _is_value(v) -> bool:
    """An atom or a tensor: compared by the signature, not fingerprinted."""
    return isinstance(v, _ATOMS) or is_tensor(v)


def _holds_containers(v) -> bool:
    """A global's or closure variable's plain object or container that holds another one
    (``STATE.log``, ``CACHE["k"]``): its shallow watch sees only its own items, so what
    the trace appends deeper (a traced tensor) is watched, and restored, by a deep print."""
    if isinstance(v, type) or not _plain_holder(v):
        return False
    state = _state_of(v)
    held = elements(v) if isinstance(v, (list, tuple, set)) else dict_values(v) \
        if isinstance(v, dict) \
        else vars(v).values() if state is not None else ()
    return any(_plain_holder(h) and not isinstance(h, type) or _keeps_state(h) for h in held)


def _keeps_state(v) -> bool:
    """An object keeping its items outside a ``__dict__`` (a ``deque``: a replay memory's
    ``self.memory.append(...)``), which a fingerprint sees through ``builtin_state``."""
    return _state_of(v) is None and not _is_value(v) and state_of(v) is not None


def _masked(print_: TaggedPrint, drop, keys, names, holders=frozenset()) -> TaggedPrint:
    """``print_``, or where its list, dict or object holds what the graph changes on
    every run -- one of the objects ``drop`` names (a Trainer's ``self.optimizer``: staged
    calls change its contents), a number or tensor at one of ``keys`` (state the graph
    carries: ``runtime.carried_numbers``) or one of the objects ``holders`` holding such
    state (a dict of meters: each guarded by its own masked print) -- a print of a view
    counting the first and third by identity and leaving the second out (else every step
    would trace again)."""
    value = print_.value
    if type(value) in (list, dict):
        items = value.items() if type(value) is dict else enumerate(value)
    else:
        attrs = getattr(value, "__dict__", None)
        if type(attrs) is not dict:
            return print_
        items = attrs.items()
    if not keys and not any(id(v) in drop or id(v) in holders for _, v in items):
        return print_

    def token(k, v):
        return ("staged", id(v)) if id(v) in drop else ("carried",) if k in keys else \
            ("holder", id(v)) if id(v) in holders else v

    if type(value) is list:
        def view():
            return [token(i, v) for i, v in enumerate(value)]
    elif type(value) is dict:
        def view():
            return {k: token(k, v) for k, v in value.items()}
    else:
        def view():
            return {k: token(k, v) for k, v in vars(value).items()}
    if print_.how is None:          # (a module's plain object: one level, as it was)
        return TaggedPrint(value, view)
    return TaggedPrint(value, view, deep=True, names=names, modules=[])


def _plain_holder(v) -> bool:
    """A container or plain object whose contents a trace may read (not code, a module,
    a tensor or an ``nn.Module``)."""
    if isinstance(v, type):
        return bool(user_classes(v))        # its class attributes (``Holder.SCALE``)
    if _is_value(v) or isinstance(v, (types.ModuleType, types.FunctionType,
                                      types.BuiltinFunctionType, types.MethodType)):
        return False
    if isinstance(v, (list, tuple, dict, set)):
        return True
    attrs = getattr(v, "__dict__", None)
    if attrs is None and slot_names(type(v)):    # a __slots__ object: ``self.k`` read
        attrs = {}
    return isinstance(attrs, dict) and "_modules" not in attrs and \
        type(v).__module__.split(".")[0] not in ("runtime", "transpiler", "torch")


def _hook_key(fn) -> tuple:
    """A function's identity, the same for every bound-method object of one method."""
    return id(getattr(fn, "__func__", fn)), id(getattr(fn, "__self__", None))


def module_hooks(owner) -> list:
    """The hook functions registered on the modules of ``owner``'s tree (an ``nn.Module``)
    and torch's global module hooks: a trace of the forward runs them (a hook storing a
    submodule's output in a dict of the user's is a side effect a graph cannot repeat)."""
    if not (isinstance(getattr(owner, "__dict__", None), dict) and "_modules" in vars(owner)
            and callable(getattr(owner, "modules", None))):
        return []
    from runtime.module_state import HOOK_DICTS, global_hooks
    found = [h for hooks in global_hooks() for h in hooks.values()]
    for m in owner.modules():
        found += [h for name in HOOK_DICTS if isinstance(vars(m).get(name), dict)
                  for h in vars(m)[name].values()]
    return [getattr(h, "__call__", h) if not isinstance(h, (types.FunctionType,
                                                             types.MethodType)) else h
            for h in found if callable(h)]


def _user_module(v) -> bool:
    """A Python module of the user's (``import config``), not a library's or ours."""
    file = getattr(v, "__file__", None)
    return isinstance(v, types.ModuleType) and isinstance(file, str) and \
        v.__name__.split(".")[0] not in ("runtime", "transpiler") and not _is_library(file)


def _attributes(module, names) -> dict:
    """The attributes ``names`` of ``module`` as they are now (missing ones too)."""
    attrs = vars(module)
    return {n: attrs.get(n, _EMPTY) for n in names}


def _always() -> bool:
    return True


def first_use(codes, names):
    """(file, line) of the first instruction of ``codes`` (and the code nested in them)
    that names one of ``names`` (an attribute or global read, a ``getattr`` string), or
    None."""
    return mutation_lines.first_instruction(
        codes, lambda instr: isinstance(instr.argval, str) and instr.argval in names)


def _names_used(code) -> List[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names.update(_names_used(const))
    return sorted(names)
