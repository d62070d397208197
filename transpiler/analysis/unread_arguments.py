"""Unread arguments: which parameters' values the function's source can never read.

Requires: nothing (a gast FunctionDef, as ``pyct.parser.parse_function`` gives it).
Provides: ``unread(node)`` -> {parameter name: ``WHOLE``, a frozenset of element keys or
``Passed``}, for the parameters whose value no code of the function can read:

    def training_step(self, batch, batch_idx):     # {'batch_idx': WHOLE}
        x, y = batch                                # (batch: every element read)
        return self.model(x).sum()

    def step(x, cfg, n):                            # {'cfg': frozenset({0}), 'n': WHOLE}
        if n is None or isinstance(n, int):         # a question its type answers
            return x * cfg[0]                       # only cfg[0] (cfg[1] never read)

    def training_step(self, batch, batch_idx):     # {'batch_idx': Passed(((('attr',
        return self.shared(batch, batch_idx)        #   'self', 'shared'), 1),))}

``WHOLE``: the name is never loaded, except as ``n is None``/``n is not None`` or
``isinstance(n, <a built-in class>)``/``type(n)`` (which its type answers; ``QUESTIONS``
and ``CLASSES`` name what those rely on, for the caller to check they are not rebound). A
frozenset: the parameter is loaded only as ``p[<constant>]`` (a read of that element) or
unpacked whole by ``a, b, c = p`` with every target a plain name (element ``i`` read where
its name is loaded anywhere): the elements not listed are never read. Any other use -- an
operator, a call, a store (``self.step = n``), a nested function, lambda or comprehension
naming it, ``x += n`` -- is a read (but ``Passed``: only passed on as an argument, which
the caller resolves), as is everything where the function names ``locals``,
``vars``, ``eval``, ``exec`` or a frame (``_getframe``, ``currentframe``, ``f_locals``): the
answer is by name, conservative (a name loaded on a path never taken still counts).
"""
import gast

WHOLE = 'whole'
QUESTIONS = frozenset({'isinstance', 'type'})
_SCOPES = frozenset({'locals', 'vars', 'eval', 'exec'})       # (as names)
_FRAMES = frozenset({'_getframe', 'currentframe', 'f_locals', 'f_back'})    # (attributes)
# classes whose isinstance answer is the argument's type alone (no __instancecheck__ of
# the user's that could read the value)
CLASSES = frozenset({'int', 'float', 'bool', 'complex', 'str', 'bytes', 'tuple', 'list',
                      'dict', 'Number', 'Integral', 'Real', 'Complex', 'Tensor'})


def unread(node) -> dict:
    """{parameter name: WHOLE or frozenset of the element keys read} (see above)."""
    params = _parameters(node.args)
    if not params or any(_names_frame(n) or _rebinds_question(n) for n in gast.walk(node)):
        return {}
    uses = {p: [] for p in params}          # name -> (node, parent) of each use
    parents = {}
    for parent in gast.walk(node):
        for child in gast.iter_child_nodes(parent):
            parents[id(child)] = parent
            if isinstance(child, gast.Name) and child.id in uses and \
                    not isinstance(child.ctx, gast.Param) and parent is not node.args:
                uses[child.id].append((child, parent))
    bound = _bound_names(node)
    out = {}
    for p in params:
        passed = _passed_on(uses[p], parents, bound)
        found = _elements_read([u for u in uses[p] if u[0] not in passed], node)
        if found is WHOLE and passed:
            found = Passed(frozenset(passed.values()))
        elif passed:
            found = None
        if found is not None:
            out[p] = found
    return out


class Passed(tuple):
    """A parameter whose only reads are as an argument of calls (besides type questions):
    ``(callee, slot)`` pairs; callee ``('name', f)`` for ``f(..., n)``, ``('attr', base,
    m)`` for ``base.m(..., n)``; slot the position among the call's arguments, or the
    keyword. Unread where every callee leaves that parameter unread (the caller decides:
    it knows the callees)."""

    def __new__(cls, calls):
        return super().__new__(cls, sorted(calls, key=repr))


def _bound_names(fn) -> dict:
    """{name: how} for the names ``fn`` binds anywhere ('param' for parameters, nested
    ones too; 'local' for stores, deletes, defs, classes and imports)."""
    bound = {}
    for n in gast.walk(fn):
        if isinstance(n, gast.Name) and not isinstance(n.ctx, gast.Load):
            if bound.get(n.id) != 'local':
                bound[n.id] = 'param' if isinstance(n.ctx, gast.Param) else 'local'
        elif isinstance(n, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)) and \
                n is not fn:
            bound[n.name] = 'local'
        elif isinstance(n, gast.alias):
            bound[(n.asname or n.name).split('.')[0]] = 'local'
        elif isinstance(n, (gast.Global, gast.Nonlocal)):
            bound.update((name, 'local') for name in n.names)
    return bound


def _passed_on(uses, parents, bound) -> dict:
    """{use: (callee, slot)} for the uses that are a plain argument of a call of a name
    the function does not bind (a global or closure function) or of a method of a
    parameter it never rebinds (``self.m``), no ``*``/``**`` in that call."""
    out = {}
    for name, parent in uses:
        if _type_question(name, parent):
            continue
        call, slot = parent, None
        if isinstance(parent, gast.keyword) and parent.arg is not None:
            call, slot = parents.get(id(parent)), parent.arg
        if not isinstance(call, gast.Call) or call.func is name or \
                any(isinstance(a, gast.Starred) for a in call.args) or \
                any(k.arg is None for k in call.keywords):
            continue
        if slot is None:
            if not any(a is name for a in call.args):
                continue
            slot = next(i for i, a in enumerate(call.args) if a is name)
        func = call.func
        if isinstance(func, gast.Name) and func.id not in bound:
            out[name] = (('name', func.id), slot)
        elif isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) and \
                bound.get(func.value.id) == 'param':
            out[name] = (('attr', func.value.id, func.attr), slot)
    return out


def _rebinds_question(n) -> bool:
    """A local ``isinstance``/``int``... (its questions might read the value)."""
    return isinstance(n, gast.Name) and not isinstance(n.ctx, gast.Load) and \
        (n.id in QUESTIONS or n.id in CLASSES)


def _parameters(args) -> list:
    names = [a.id for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if isinstance(n, str)]


def _names_frame(n) -> bool:
    return (isinstance(n, gast.Name) and (n.id in _SCOPES or n.id in _FRAMES)) or \
        (isinstance(n, gast.Attribute) and n.attr in _FRAMES)


def _elements_read(uses, fn):
    """WHOLE when no use reads the value, a frozenset of element keys when only those
    elements are read, None when the value may be read."""
    elements = set()
    whole = True
    for name, parent in uses:
        if isinstance(name.ctx, gast.Del):
            continue
        if not isinstance(name.ctx, gast.Load):
            return None                     # (rebound, or ``x += 1``: reads it)
        if _type_question(name, parent):
            continue
        whole = False
        if isinstance(parent, gast.Subscript) and parent.value is name and \
                isinstance(parent.ctx, gast.Load) and _constant_key(parent.slice):
            elements.add(parent.slice.value)
            continue
        unpacked = _unpacked(name, parent)
        if unpacked is None:
            return None
        for index, target in enumerate(unpacked):
            if _loaded(target, fn):
                elements.add(index)
    return WHOLE if whole else frozenset(elements)


def _constant_key(index) -> bool:
    value = getattr(index, 'value', None)
    return isinstance(index, gast.Constant) and (
        isinstance(value, str) or (type(value) is int and value >= 0))


def _type_question(name, parent) -> bool:
    if isinstance(parent, gast.Compare) and len(parent.ops) == 1 and \
            isinstance(parent.ops[0], (gast.Is, gast.IsNot)):
        other = parent.comparators[0] if parent.left is name else parent.left
        return isinstance(other, gast.Constant) and other.value is None
    if isinstance(parent, gast.Call) and isinstance(parent.func, gast.Name) and \
            not parent.keywords and parent.args and parent.args[0] is name:
        if parent.func.id == 'type':
            return len(parent.args) == 1
        return parent.func.id == 'isinstance' and len(parent.args) == 2 and \
            _builtin_classes(parent.args[1])
    return False


def _builtin_classes(node) -> bool:
    if isinstance(node, gast.Tuple):
        return all(_builtin_classes(e) for e in node.elts)
    if isinstance(node, gast.Name):
        return node.id in CLASSES
    return isinstance(node, gast.Attribute) and node.attr in CLASSES and \
        isinstance(node.value, gast.Name) and node.value.id in ('torch', 'numbers')


def _unpacked(name, parent):
    """The target names of ``a, b, c = name`` (a statement of its own), else None."""
    if not isinstance(parent, gast.Assign) or parent.value is not name or \
            len(parent.targets) != 1 or not isinstance(parent.targets[0], (gast.Tuple,
                                                                          gast.List)):
        return None
    targets = parent.targets[0].elts
    if not all(isinstance(t, gast.Name) for t in targets):
        return None                         # (a starred or nested target: all read)
    return [t.id for t in targets]


def _loaded(name: str, fn) -> bool:
    """Whether a local ``name`` may be read: loaded anywhere, ``name += 1``, or declared
    global or nonlocal (a store others read)."""
    for n in gast.walk(fn):
        if isinstance(n, gast.Name) and n.id == name and not isinstance(n.ctx, gast.Store):
            return True
        if isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Name) and \
                n.target.id == name:
            return True
        if isinstance(n, (gast.Global, gast.Nonlocal)) and name in n.names:
            return True
    return False
