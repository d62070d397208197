"""``f.explain(*args)``: per source line, what converting and tracing did with it.

    print(f.explain(torch.randn(4, 8), 3))

For the given arguments the function is traced once more (apart from its own cache, so
nothing changes for later calls) while the operators note the decisions Python made:
  cond / while   a tensor condition: the line became a ``cond`` / ``while`` node
  guard          a line that runs only if no earlier tensor-dependent ``return``,
                 ``break`` or ``continue`` happened: a ``cond`` node around it
  python-if      an ``if`` or ternary on a Python value: specialized, no node (which way)
  python-loop    a loop on Python values: unrolled into the graph (how many times), or
                 unrolled until its test became a tensor and staged from there
  fallback       the line tracing stopped at, and why (the function runs eagerly)
  not-reached    converted control flow that this trace never reached
and the retrace history lists each trace of ``f`` so far with what part of the signature
changed from the one before.
"""
from __future__ import annotations

import ast
import dataclasses
import linecache
import os
import warnings
from typing import Dict, List, Optional, Tuple

from runtime.operators.decisions import listening
from .. import argument_aliases

_STATIC_KINDS = {"if_stmt": "if", "ifexp": "ternary", "while_stmt": "while",
                 "for_stmt": "for", "and_": "and/or", "or_": "and/or"}


@dataclasses.dataclass
class LineEvent:
    filename: str
    lineno: int
    source: str
    what: str          # cond, while, python-if, python-loop, fallback, not-reached
    detail: str


@dataclasses.dataclass
class Explanation:
    function: str
    lines: List[LineEvent] = dataclasses.field(default_factory=list)
    fell_back: bool = False
    fallback_reason: Optional[str] = None
    retraces: List[str] = dataclasses.field(default_factory=list)

    def at(self, lineno: int) -> List[LineEvent]:
        """The events of one line (of any file)."""
        return [e for e in self.lines if e.lineno == lineno]

    def __str__(self) -> str:
        head = f"explain {self.function}: " + (
            f"falls back to eager: {self.fallback_reason}" if self.fell_back
            else "traced into a graph")
        out = [head]
        width = max((len(_where(e)) for e in self.lines), default=0)
        for e in self.lines:
            out.append(f"  {_where(e):<{width}}  {e.what:<11}  {e.detail}")
            if e.source:
                out.append(f"  {'':<{width}}  {'':<11}    | {e.source}")
        out.append("retrace history:" if self.retraces else "retrace history: none yet")
        out += [f"  {r}" for r in self.retraces]
        return "\n".join(out)


def _where(e: LineEvent) -> str:
    return f"{os.path.basename(e.filename)}:{e.lineno}"


def _line(filename: str, lineno: int) -> str:
    return linecache.getline(filename, lineno).strip()


def _static_lines(converted) -> Dict[Tuple[str, int], str]:
    """User lines whose control flow the converter turned into operator calls."""
    line_map = getattr(converted, "__tograph_line_map__", {})
    found = {}
    for node in ast.walk(ast.parse(converted.__tograph_source__)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "tg" and \
                node.func.attr in _STATIC_KINDS:
            loc = line_map.get(node.lineno)
            if loc is not None:
                found.setdefault(tuple(loc), _STATIC_KINDS[node.func.attr])
    return found


def _has_condition(text: str) -> bool:
    """Whether a source line holds a condition of its own (``if``/``elif``, a ternary,
    ``and``/``or``); a line without one got its ``cond`` from a jump before it."""
    words = f" {text.split('#')[0]} "
    return text.startswith(("if ", "elif ", "if(", "elif(")) or any(
        f" {w} " in words for w in ("if", "and", "or"))


def _graph_events(graph) -> List[Tuple[Tuple[str, int], str, str]]:
    """cond/while nodes by line; a ``cond`` on a line with no condition of its own guards
    that line (it runs only if no earlier tensor-dependent return/break/continue did)."""
    events = []

    def walk(g, inside):
        for node in g.nodes:
            if node.op in ("cond", "while") and node.location is not None:
                where = f" inside %{inside}" if inside else ""
                loc = tuple(node.location)
                if node.op == "while":
                    kind, what = "while", "tensor loop test -> while node"
                elif _has_condition(_line(*loc)):
                    kind, what = "cond", "tensor condition -> cond node"
                else:
                    kind, what = "guard", ("runs only if no earlier tensor-dependent "
                                           "return/break/continue happened: cond node")
                events.append((loc, kind, f"{what} %{node.name}{where}"))
            for sub in node.subgraphs:
                walk(sub, node.name)
    walk(graph, None)
    return events


def _note_events(notes) -> List[Tuple[Tuple[str, int], str, str]]:
    by_line: Dict[Tuple[Tuple[str, int], str], list] = {}
    for loc, kind, detail in notes:
        if loc is not None:
            by_line.setdefault((tuple(loc), kind), []).append(detail)
    events = []
    for (loc, kind), details in by_line.items():
        if kind in ("if", "ifexp"):
            counts = {v: details.count(v) for v in (True, False) if v in details}
            ways = ", ".join(f"{v} x{n}" if len(details) > 1 else str(v)
                             for v, n in counts.items())
            events.append((loc, "python-if", f"Python condition ({ways}): specialized, "
                                             f"no node in the graph"))
        else:
            unrolled = sum(runs for runs, _ in details)
            staged = any(s for _, s in details)
            times = f" ({len(details)} times)" if len(details) > 1 else ""
            text = f"Python loop{times}: {unrolled} iteration{'s' * (unrolled != 1)} " \
                   f"unrolled into the graph"
            if staged:
                text += "; then its test became a tensor: the rest is a while node"
            events.append((loc, "python-loop", text))
    return events


def _describe_signature(names: List[str], key) -> str:
    from ..api import _GRAD_MODE, _is_call_modes, _mode
    parts = []
    leaves = key[0].num_leaves
    # a Module's train/eval flags, then the caller's autocast, default dtype, forward-AD
    # level and inference mode, then the grad mode
    extra = [e for e in key[leaves + 1:] if not _is_call_modes(e)]
    aliases = [argument_aliases.text(e, names) for e in extra if argument_aliases.is_key(e)
               and e[1] is not None]        # (one tensor object passed twice)
    extra = [e for e in extra if not argument_aliases.is_key(e)]
    parts_mode = [f"training mode: {_mode(e)}" for e in extra if e not in _GRAD_MODE.values()]
    parts_mode += aliases
    for autocast, dtype, dual_level, inference in (e for e in key[leaves + 1:]
                                                   if _is_call_modes(e)):
        autocast, uncached = autocast if isinstance(autocast, tuple) else (autocast, False)
        parts_mode += ["CPU autocast"] * (autocast is not False)
        parts_mode += ["autocast's cast cache off"] * bool(uncached)
        parts_mode += ["forward-mode AD"] * (dual_level >= 0)
        parts_mode += ["inference mode"] * inference
        parts_mode += [f"default dtype {str(dtype).replace('torch.', '')}"] * \
            (str(dtype) != "torch.float32")
    parts_mode += [e[0] for e in extra if e == _GRAD_MODE[False]]
    for i, leaf in enumerate(key[1:leaves + 1]):
        name = names[i] if i < len(names) else f"#{i}"
        if leaf and leaf[0] == "T":
            dtype = str(leaf[2]).replace("torch.", "")
            grad = ", requires_grad" if leaf[3] else ""
            parts.append(f"{name}: {dtype}{list(leaf[1])}{grad}")
        elif leaf and leaf[0] in ("M", "O"):
            parts.append(f"{name}: object")
        else:
            parts.append(f"{name}={leaf[-1]!r}")
    return ", ".join(parts + parts_mode) or "no arguments"


def _retraces(fn, key) -> List[str]:
    from ..api import _describe_change
    from ..retracing import serves
    names, history, out = fn._param_names, fn._history, []
    for i, old in enumerate(history):
        if i == 0:
            out.append(f"trace 1: {_describe_signature(names, old)}")
        else:
            out.append(f"trace {i + 1}: {_describe_change(names, history[i - 1], old)}")
    if not any(serves(old, key) for old in history):     # (a dynamic graph serves sizes)
        change = _describe_change(names, history[-1], key) if history else \
            _describe_signature(names, key)
        out.append(f"(these arguments are not traced yet; a call would trace: {change})")
    return out


def explain(fn, args, kwargs) -> Explanation:
    """Trace ``fn`` (a GraphFunction) on the arguments apart from its cache, listening."""
    from ..api import GraphFunction, _Fallback, _python_function, convert_function
    report = Explanation(function=getattr(fn, "__qualname__", repr(fn)))
    scratch = GraphFunction(fn._fn, strict=False)
    key, flat, spec = scratch._signature(args, kwargs)
    with listening() as notes, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry = scratch._build(key, args, kwargs, flat, spec)
    events = _note_events(notes)
    if isinstance(entry, _Fallback):
        report.fell_back, report.fallback_reason = True, entry.reason
        if entry.filename:
            events.append(((entry.filename, entry.lineno), "fallback",
                           f"{entry.reason} -- the function runs eagerly"))
    try:
        static = _static_lines(convert_function(_python_function(fn._fn)))
    except Exception:           # cannot convert: the fallback event says why
        static = {}
    if not isinstance(entry, _Fallback):
        events += _graph_events(entry.graph)
    seen = {loc for loc, _, _ in events}
    events += [(loc, "not-reached", f"converted {kind}, not reached by this trace")
               for loc, kind in static.items() if loc not in seen]
    order = {"fallback": 0, "while": 1, "cond": 2}
    events.sort(key=lambda e: (e[0][0], e[0][1], order.get(e[1], 3)))
    report.lines = [LineEvent(loc[0], loc[1], _line(*loc), what, detail)
                    for loc, what, detail in events]
    report.retraces = _retraces(fn, fn._signature(args, kwargs)[0])
    return report
