"""Lower a graph, once, to generated straight-line Python, and run it.

The generated function calls each node's target in topological order, deletes every value
right after its last use, and runs ``cond``/``while`` subgraphs as nested generated
functions. The source is registered with ``linecache``, so tracebacks show it; an error
while running a node is re-raised naming the op, the node and the user source line that
created it. ``executable.source`` holds the text for inspection.
"""
from __future__ import annotations

import itertools
import keyword
import linecache
import math
import weakref
from typing import Any, Dict, List, Optional, Sequence

import torch


from . import fast_calls, int_overflow, logs
from .graph import Graph, Node, iter_nodes, map_structure
from .meta import TensorMeta
from .outputs import Again, ArgRef, Existing, Rebuild
from .passes.counted_loops import counted, kernel_loop, kernel_while, stacked
from .source_info import forget, format_location

_FILE_IDS = itertools.count(1)
_FLAT = object()      # a function returning the flat tuple of its outputs
_LINE_NODES: Dict[str, Dict[int, Node]] = {}


class Executable:
    """A compiled graph: call it with values for its inputs; returns its output structure."""

    def __init__(self, fn, source: str, filename: str):
        self.fn = fn
        self.source = source
        self.filename = filename

    def __call__(self, *args):
        try:
            return self.fn(*args)
        except Exception as e:
            raise located(e) from e


class Unstack:
    """An output that is a Python list at run time, computed as one stacked tensor (a list
    grown in a tensor loop): the generated code returns ``list(value.unbind(0))``."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node


def located(e: Exception, exact: bool = False) -> Exception:
    """The same kind of error, naming the failing node's op and user source line: before
    its text, or (``exact``: a converted function's error, which eager raises with its own
    text; and a failing assert's, always) in a note, leaving the text as eager's."""
    tb = e.__traceback__
    node = generated = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        lines = _LINE_NODES.get(filename)
        if lines is not None and tb.tb_lineno in lines:
            node = lines[tb.tb_lineno]
            text = linecache.getline(filename, tb.tb_lineno).strip()
            generated = f"{filename}:{tb.tb_lineno}: {text}"
        tb = tb.tb_next
    if node is None or getattr(e, "_tograph_located", False):
        return e
    if exact or getattr(e, "_tograph_exact", False):    # eager's type and text; where,
        try:                                                # in a note
            new = type(e)(*e.args)
        except Exception:       # noqa: BLE001 - an error class built otherwise: the same one
            new = e
        new.add_note(f"{format_location(node.location)}: raised by the graph's "
                     f"{node.op!r} (node %{node.name})\n  generated code: {generated}")
        new._tograph_located = True
        new.location = node.location
        return new
    msg = (f"{format_location(node.location)}: error in graph op {node.op!r} "
           f"(node %{node.name}): {e}\n  generated code: {generated}")
    try:
        new = type(e)(msg)
    except Exception:
        new = RuntimeError(msg)
    new._tograph_located = True
    new.location = node.location
    return new


# --------------------------------------------------------------------------- code generation
class _Lowering:
    """Builds the Python source (and its globals) for one graph and its subgraphs."""

    def __init__(self, observer=None):
        self.globals: Dict[str, Any] = {"torch": torch}
        self.observe = None if observer is None else self.global_name(observer, "observe")
        self.free = True            # ``del`` each value after its last use
        self.predicates: set = set()  # ids of loop tests to compute as Python bools
        self.lines: List[str] = []
        self.line_nodes: Dict[int, Node] = {}
        self._global_ids: Dict[int, str] = {}
        self._counter = itertools.count(1)
        self._int_inputs = set()    # ids of counted loops' counters: Python ints, not tensors
        self.swaps: list = []       # (kernel, global, is a test): kernels.background.swap

    # names ------------------------------------------------------------------------------
    def global_name(self, value, base: str) -> str:
        name = f"_{base}"
        self.globals[name] = value
        return name

    def global_for(self, value, base: str) -> str:
        key = id(value)
        if key in self._global_ids:
            return self._global_ids[key]
        name = f"_{_ident(base)}_{next(self._counter)}"
        self.globals[name] = value
        self._global_ids[key] = name
        return name

    def expr(self, value, names: Dict[int, str]) -> str:
        if isinstance(value, Node):
            return names[id(value)]
        # exact types only: a subclass's repr need not be a literal (numpy 2's
        # ``np.float64(5.65)``, an ``IntEnum``'s ``<Color.RED: 1>``): it is a global
        kind = type(value)
        if kind is bool or value is None or kind is int or kind is str:
            return repr(value)
        if kind is float:
            return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
        if value is Ellipsis:
            return "..."
        if isinstance(value, torch.dtype):
            return str(value)
        if isinstance(value, slice):
            return f"slice({self.expr(value.start, names)}, {self.expr(value.stop, names)}, " \
                   f"{self.expr(value.step, names)})"
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            inner = ", ".join(self.expr(v, names) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if isinstance(value, list):
            return "[" + ", ".join(self.expr(v, names) for v in value) + "]"
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return "{" + ", ".join(f"{k!r}: {self.expr(v, names)}" for k, v in value.items()) + "}"
        return self.global_for(value, "k")

    # functions -----------------------------------------------------------------------------
    def function(self, graph: Graph, fname: str, inputs: Sequence[Optional[Node]],
                 outputs: Sequence[Any], keep_effects: bool = True, structure: Any = _FLAT):
        """Emit ``def fname(*inputs): ...; return (outputs,)``; returns nothing.

        Only nodes the outputs need are emitted, plus impure ones when ``keep_effects``.
        A None input is a parameter the function ignores (a Python value of the call).
        With ``structure``, the function returns that nested structure (fresh containers
        each call) instead of the flat tuple of ``outputs``."""
        roots = list(iter_nodes(list(outputs)))
        if keep_effects:
            roots += [n for n in graph.nodes if n.impure]
        needed = _needed(roots)
        names: Dict[int, str] = {}
        used = set(self.globals) | set(keyword.kwlist) | {fname}

        def bind(node: Node) -> str:
            name = _ident(node.name.lstrip("_"))
            while name in used:
                name = f"{name}_"
            used.add(name)
            names[id(node)] = name
            return name
        params = [bind(n) if n is not None else f"_unused{k}" for k, n in enumerate(inputs)]
        body_nodes = [n for n in graph.nodes if n.op != "placeholder" and id(n) in needed]
        last_use = _last_uses(body_nodes, outputs)
        out_ids = {id(n) for n in iter_nodes(list(outputs))}
        self.predicates |= _branch_tests(body_nodes, out_ids)
        subfns = []
        text: List[tuple] = []      # (line, node or None)
        for index, node in enumerate(body_nodes):
            code, extra = self.node_code(node, names, bind)
            subfns.extend(extra)
            for line in code:
                text.append((line, node))
            dead = [names[id(n)] for n in last_use.get(index, ())
                    if id(n) not in out_ids and id(n) in names]
            if dead and self.free:
                text.append(("del " + ", ".join(dead), None))
        for sub_graph, sub_name, sub_inputs, sub_outputs in subfns:
            self.function(sub_graph, sub_name, sub_inputs, sub_outputs)
        self.lines.append(f"def {fname}({', '.join(params)}):")
        if any(n.attrs.get("planned_out") or "planned_inplace" in n.attrs or
               n.attrs.get("grad_out_of_place") for n in body_nodes):
            self.lines.append("    " + self.plan_check(graph, names, inputs, body_nodes))
        for line, node in text:
            self.lines.append("    " + line)
            if node is not None:
                self.line_nodes[len(self.lines)] = node
        if structure is not _FLAT:
            self.lines.append("    return " + self.structure(structure, names))
        else:
            rets = [self.expr(o, names) for o in outputs]
            self.lines.append("    return (" + "".join(r + ", " for r in rets) + ")")
        self.lines.append("")

    def plan_check(self, graph: Graph, names, inputs, body_nodes) -> str:
        """``_plan``: True when autograd records nothing on this call, so planned nodes may
        write into dead buffers (grad mode off, or no input and no constant of this graph
        or of its subgraphs requires grad)."""
        grad = self.global_for(torch.is_grad_enabled, "grad_enabled")
        tensors = [names[id(n)] for n in inputs if n is not None and id(n) in names
                   and isinstance(n.meta, TensorMeta) and id(n) not in self._int_inputs]
        tensors += [self.global_for(n.attrs["value"], n.name) for n in graph.walk()
                    if n.op == "constant" and isinstance(n.attrs.get("value"), torch.Tensor)]
        checks = " or ".join(f"{t}.requires_grad" for t in tensors) or "False"
        return f"_plan = not {grad}() or not ({checks})"

    def structure(self, value, names) -> str:
        """An output structure as an expression building fresh containers."""
        if isinstance(value, Node):
            return names[id(value)]
        if isinstance(value, Unstack):
            return f"list({names[id(value.node)]}.unbind(0))"
        if isinstance(value, Rebuild):      # an object made afresh: make(items, attrs, slots)
            parts = ", ".join(self.structure(v, names) for v in value)
            text = f"{self.global_for(value.make, 'make')}({parts})"
            return f"(_obj{value.key}_ := {text})" if value.shared else text
        if isinstance(value, Again):
            return f"_obj{value.key}_"
        if isinstance(value, Existing):     # the caller's own object, as itself
            return self.global_for(value.obj, "existing")
        if isinstance(value, ArgRef):       # replaced by the call's own (resolve_arguments)
            return self.global_for(value, "argument")
        if isinstance(value, (tuple, list, dict)):
            if isinstance(value, dict):
                inner = ", ".join(f"{self.expr(k, names)}: {self.structure(v, names)}"
                                  for k, v in value.items())
                text = "{" + inner + "}"
            else:
                inner = ", ".join(self.structure(v, names) for v in value)
                if isinstance(value, list):
                    text = "[" + inner + "]"
                elif hasattr(value, "_fields"):
                    return f"{self.global_for(type(value), 'tuple')}({inner})"
                else:
                    text = f"({inner},)" if len(value) == 1 else f"({inner})"
            if type(value) in (tuple, list, dict):
                return text
            return f"{self.global_for(type(value), 'container')}({text})"
        return self.expr(value, names)

    def node_code(self, node: Node, names, bind):
        extra = []
        if node.op == "constant":
            value = node.attrs["value"]
            return [f"{bind(node)} = {self.global_for(value, node.name)}"], extra
        args = [self.expr(a, names) for a in node.args]
        if node.op == "get":
            return [f"{bind(node)} = {args[0]}[{node.attrs['index']}]"], extra
        if node.op == "cond":
            fnames = self.sub_functions(node, extra)
            operands = ", ".join(args[1:])
            test = args[0] if self.observe is None else \
                f"{self.observe}.cond({node.name!r}, {args[0]})"
            return [f"{bind(node)} = {fnames[0]}({operands}) if {test} else "
                    f"{fnames[1]}({operands})"], extra
        if node.op == "while":
            n = node.attrs["n_vars"]
            form = counted(node)
            if form is not None:
                return self.counted_loop(node, form, args, bind, extra), extra
            driver = None if self.observe is not None else kernel_while(node)
            if driver is not None:          # test and body are one compiled kernel each
                call = f"{self.global_for(driver, 'kernel_while')}({', '.join(args)})"
                return [f"{bind(node)} = " + (call if driver.counter else f"({call},)")], extra
            self.predicates |= _loop_tests(node)
            fc, fb = self.sub_functions(node, extra)
            state = bind(node)
            init = "".join(a + ", " for a in args[:n])
            caps = "".join(", " + a for a in args[n:])
            lines = [f"{state} = ({init})",
                     f"while {fc}(*{state}{caps})[0]:",
                     f"    {state} = {fb}(*{state}{caps})"]
            if self.observe is not None:
                lines.insert(1, f"{self.observe}.loop({node.name!r})")
                lines.insert(3, f"    {self.observe}.step({node.name!r})")
            return lines, extra
        callee = getattr(node.target, "launcher", node.target)
        kwargs = [f"{k}={self.expr(v, names)}" for k, v in node.kwargs.items()]
        spelled = None if node.attrs.get("planned_out") or "planned_inplace" in node.attrs \
            else fast_calls.spelling(callee, node.args, node.kwargs)
        if spelled is not None:             # the same ATen op without a Python wrapper
            callee = spelled[0]
            args = [self.expr(a, names) for a in spelled[1]]
            kwargs = [f"{k}={self.expr(v, names)}" for k, v in spelled[2].items()]
        building = getattr(node.target, "building", False)    # (kernels.background)
        test = id(node) in self.predicates and (
            building or getattr(node.target, "predicate", None) is not None)
        if test:
            callee = node.target if building else node.target.predicate
            kwargs = [k for k in kwargs if not k.startswith("out=")]   # a bool: no buffer
        if building:         # a global of its own, made its launcher or predicate when bound
            target = self.global_name(callee, f"{_ident(node.op)}_{next(self._counter)}")
            self.swaps.append((node.target, target, test))
        else:
            target = self.global_for(callee, node.op)
        if node.attrs.get("planned_out"):    # memory planning: only when autograd is off
            buffer = names[id(node.kwargs['out'])]
            kwargs = [f"out=({buffer} if _plan{self.layout_check(node, buffer, args)} "
                      f"else None)" if k.startswith("out=") else k for k in kwargs]
        if node.attrs.get("grad_out_of_place"):    # (passes/grad_out_of_place.py)
            kwargs = ["inplace=_plan" if k.startswith("inplace=") else k for k in kwargs]
        inplace = node.attrs.get("planned_inplace")
        if inplace is not None:              # memory planning: only when autograd is off
            target = f"({self.global_for(inplace, node.op + '_')} if _plan else {target})"
            kwargs = [k for k in kwargs if not k.startswith("inplace=")]
        call = f"{target}({', '.join(args + kwargs)})"
        if node.meta is None:
            return [call], extra
        return [f"{bind(node)} = {call}"], extra

    def layout_check(self, node: Node, buffer: str, args: List[str]) -> str:
        """The run-time condition under which a planned ``out=`` buffer gives eager's
        layout: a torch op keeps the buffer's strides, where eager's result is contiguous
        for a product and follows its inputs' layout for an elementwise op (contiguous
        when they are). A fused kernel checks for itself."""
        if node.op == "fused":
            return ""
        tensors = [buffer] + ([] if node.op in _PRODUCTS else [
            a for a, v in zip(args, node.args)
            if isinstance(v, Node) and isinstance(v.meta, TensorMeta)])
        return "".join(f" and {t}.is_contiguous()" for t in tensors)

    def counted_loop(self, node: Node, form, args: List[str], bind, extra: list) -> List[str]:
        """A counted ``while`` (``passes.counted_loops``) as ``for i in range(...)``: the
        body takes the counter as a Python int first and returns the other loop variables;
        the counter's slot of the result (which nothing reads) is None."""
        k, start, stop, step = form
        n = node.attrs["n_vars"]
        body = node.subgraphs[1]
        state = bind(node)
        driver = None if self.observe is not None else kernel_loop(node, form)
        if driver is not None:              # the body is one compiled kernel
            caps = "".join(", " + a for a in args[n:])
            return [f"{state} = ({self.global_for(driver, 'kernel_loop')}({args[1 - k]}{caps}),)",
                    f"{state} = {state}[:{k}] + (None,) + {state}[{k}:]"]
        fb = self.fresh(f"{node.name}_body")
        stacks = stacked(node, form) if self.observe is None else {}   # list appends
        inputs = [None if j in stacks else v for j, v in enumerate(body.inputs)]
        outputs = [stacks.get(j, v) for j, v in enumerate(body.outputs)]
        self._int_inputs.add(id(inputs[k]))
        extra.append((body, fb, [inputs[k]] + inputs[:k] + inputs[k + 1:],
                      [v for j, v in enumerate(outputs) if j != k]))
        counter = f"_i_{state}"
        init = "".join(a + ", " for j, a in enumerate(args[:n]) if j != k)
        caps = "".join(", " + a for a in args[n:])
        lines = [f"{state} = ({init})",
                 f"for {counter} in range({start}, {stop}, {step}):",
                 f"    {state} = {fb}({counter}, *{state}{caps})"]
        after = []
        for j in stacks:        # each step's value kept, stacked once after the loop
            at, acc = j - (j > k), f"_acc{j}_{state}"
            lines.insert(1, f"{acc} = []")
            lines.append(f"    {acc}.append({state}[{at}])")
            after.append(f"{state} = {state}[:{at}] + (({self.global_for(torch.stack, 'stack')}"
                         f"({acc}) if {acc} else {args[j]}),) + {state}[{at + 1}:]")
        lines += after + [f"{state} = {state}[:{k}] + (None,) + {state}[{k}:]"]
        if self.observe is not None:
            lines.insert(1, f"{self.observe}.loop({node.name!r})")
            lines.insert(3, f"    {self.observe}.step({node.name!r})")
        return lines

    def sub_functions(self, node: Node, extra: list) -> List[str]:
        """Reserve one generated function per subgraph of a ``cond`` (then, else) or
        ``while`` (cond, body) node, to be emitted after it; returns their names."""
        labels = ("then", "else") if node.op == "cond" else ("cond", "body")
        names = []
        for sub, label in zip(node.subgraphs, labels):
            names.append(self.fresh(f"{node.name}_{label}"))
            extra.append((sub, names[-1], sub.inputs, list(sub.outputs)))
        return names

    def fresh(self, base: str) -> str:
        name = f"_{_ident(base)}_{next(self._counter)}"
        self.globals[name] = None         # reserved: generated below as a module-level def
        return name


_PRODUCTS = frozenset({"matmul", "mm", "addmm", "bmm"})     # results always contiguous


def _loop_tests(node: Node) -> set:
    """The node computing a ``while``'s test, when nothing but the loop reads it: it may
    hand the loop a Python bool (``FusedKernel.predicate``) instead of a 0-d tensor."""
    cond = node.subgraphs[0]
    test = cond.outputs[0] if isinstance(cond.outputs, (tuple, list)) and \
        len(cond.outputs) == 1 else None
    if not isinstance(test, Node) or test.op != "fused" or \
            any(test in n.inputs for n in cond.nodes):
        return set()
    return {id(test)}


def _branch_tests(nodes: List[Node], out_ids: set) -> set:
    """The fused nodes that compute a ``cond``'s predicate and nothing else reads."""
    uses: Dict[int, int] = {}
    for n in nodes:
        for v in n.inputs:
            uses[id(v)] = uses.get(id(v), 0) + 1
    return {id(n.args[0]) for n in nodes
            if n.op == "cond" and isinstance(n.args[0], Node) and n.args[0].op == "fused"
            and uses.get(id(n.args[0])) == 1 and id(n.args[0]) not in out_ids}


def _ident(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "v"
    return "v" + out if out[0].isdigit() or keyword.iskeyword(out) else out


def _needed(roots: List[Node]) -> set:
    """Ids of the nodes the roots depend on, the roots included."""
    needed = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if id(node) in needed:
            continue
        needed.add(id(node))
        stack.extend(node.inputs)
    return needed


def _last_uses(nodes: List[Node], outputs) -> Dict[int, List[Node]]:
    """For each node position, the values whose last reader is that node."""
    last: Dict[int, int] = {}
    value_of: Dict[int, Node] = {}
    for index, node in enumerate(nodes):
        for value in node.inputs:
            last[id(value)] = index
            value_of[id(value)] = value
    by_index: Dict[int, List[Node]] = {}
    for key, index in last.items():
        by_index.setdefault(index, []).append(value_of[key])
    return by_index


def lower(graph: Graph, inputs: Optional[Sequence[Optional[Node]]] = None,
          outputs: Any = None, name: str = "graph_fn", keep_effects: bool = True,
          observer=None) -> Executable:
    """Compile ``graph`` to a Python function of ``inputs`` returning ``outputs`` (a nested
    structure of nodes, ``Unstack`` markers and Python values). ``observer`` (for
    debugging) is told which way each ``cond`` went and how often each ``while`` looped:
    ``observer.cond(node_name, pred) -> bool(pred)``, ``observer.loop(node_name)`` when a
    loop starts, ``observer.step(node_name)`` per iteration."""
    inputs = list(graph.inputs if inputs is None else inputs)
    outputs = graph.outputs if outputs is None else outputs
    flat = list(iter_nodes(map_structure(outputs, lambda v: isinstance(v, Unstack),
                                         lambda v: v.node)))
    lowering = _Lowering(observer)
    lowering.function(graph, name, inputs, flat, keep_effects, structure=outputs)
    namespace, source, filename = load_lowered(lowering, "exec")
    logs.code.debug("lowered %s (%s):\n%s", name, filename, source)
    fn = namespace[name]
    if any(n.op == "set_grad_enabled" for n in graph.walk()):
        fn = _restoring_grad_mode(fn)
    if int_overflow.holds_checks(graph):    # (whether the call may run eagerly instead)
        fn = int_overflow.rerun_on_overflow(fn, graph)
    return Executable(fn, source, filename)


def _restoring_grad_mode(fn):
    """``fn``, leaving autograd's mode as it found it when it raises: a graph switching
    it (``with torch.no_grad():``) may fail between the switches (a staged ``assert`` or
    ``raise``), where eager's ``__exit__`` restores the mode."""
    is_enabled, set_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled

    def run(*args):
        mode = is_enabled()
        try:
            return fn(*args)
        except BaseException:
            set_enabled(mode)
            raise
    return run


class _Lifetime:
    """Kept in a generated module's namespace: freed with the namespace (when its last
    function is), it frees the file's ``linecache`` text and line table."""

    __slots__ = ("__weakref__",)


def _forget(filename: str) -> None:
    _LINE_NODES.pop(filename, None)
    forget(filename)


def load_lowered(lowering: "_Lowering", kind: str):
    """Run the generated source of ``lowering`` as a module registered with ``linecache``
    (tracebacks show it; its lines map to nodes) for as long as its functions live:
    (namespace, source, file name)."""
    source = "\n".join(lowering.lines) + "\n"
    filename = f"<tograph-{kind}-{next(_FILE_IDS)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _LINE_NODES[filename] = lowering.line_nodes
    namespace = dict(lowering.globals)
    lifetime = namespace["__tograph_lifetime__"] = _Lifetime()
    weakref.finalize(lifetime, _forget, filename)
    exec(compile(source, filename, "exec"), namespace)
    if getattr(lowering, "swaps", None):
        from .kernels import background
        for kernel, name, test in lowering.swaps:
            background.swap(kernel, namespace, name, test)
    return namespace, source, filename


def compile_graph(graph: Graph) -> Executable:
    """The executable of ``graph`` for its own inputs and outputs (cached on the graph)."""
    key = ("exec", id(graph.outputs))
    exe = graph._cache.get(key)
    if exe is None:
        exe = graph._cache[key] = lower(graph)
    return exe
