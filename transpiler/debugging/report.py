"""The HTML report: one self-contained page about what tograph made of a function.

    html = build_report(fn, args=(x, 3))              # the page's text
    write_report(fn, "report.html", args=(x, 3))      # the same, written to a file

Sections (stable ids): ``#source`` (the original, lines anchored ``src-L<n>`` by the
user's real line numbers), ``#generated`` (the converted code; each line links to the
user line it came from), ``#graph`` and ``#optimized`` (the pictures before and after
optimization, listings in ``<details>``), ``#fused`` (the fused groups), ``#outputs``
(eager vs converted per output, the path each ``cond`` took, loop iteration counts,
timings), ``#fallbacks`` and ``#explain``. Every step is attempted on its own: when one
fails (no source, conversion or tracing fails, Graphviz is missing) its section says why
and the page is still produced. The page has inline CSS and SVG, no script, and no
external URL; all user text is escaped.
"""
from __future__ import annotations

import dataclasses
import datetime
import html
import inspect
import os
import platform
from typing import Any, Callable, List, Optional, Tuple

import torch

from runtime import dot
from runtime import operators as tg
from runtime.meta import TensorMeta, meta_text
from runtime.passes.plan_memory import format_report as memory_text

from .. import api, conversion
from ..errors import ConversionError
from . import highlight

SECTIONS = {        # id -> title, in page order
    "source": "Original source", "generated": "Generated code",
    "graph": "Graph", "optimized": "Optimized graph", "fused": "Fused groups",
    "outputs": "Eager vs converted", "fallbacks": "Fallbacks", "explain": "Line by line",
}
NO_FALLBACK = "none: the function converted and ran as a graph"


@dataclasses.dataclass
class _Facts:
    """What the page shows; a value that could not be had is None and its error says why."""
    name: str
    target: Any                      # the Python function converted (a bound forward...)
    filename: Optional[str] = None
    first_line: int = 1
    source: Optional[str] = None
    source_error: Optional[Exception] = None
    generated: Optional[str] = None
    line_map: dict = dataclasses.field(default_factory=dict)
    generated_error: Optional[Exception] = None
    graph: Any = None
    optimized: Any = None
    graph_error: Optional[Exception] = None
    comparison: Any = None
    comparison_error: Optional[Exception] = None
    explanation: Any = None
    explanation_error: Optional[Exception] = None


def _attempt(step: Callable[[], Any]) -> Tuple[Any, Optional[Exception]]:
    """(result, None), or (None, the exception) when ``step`` raises."""
    try:
        return step(), None
    except Exception as e:
        return None, e


def _why(e: Optional[Exception]) -> str:
    """An error as one line: a ConversionError is already ``file:line: reason``."""
    if isinstance(e, ConversionError):
        return str(e)
    return f"{type(e).__name__}: {e}" if e is not None else "unknown reason"


def _gather(fn, args: tuple, kwargs: dict) -> _Facts:
    gf = api.graph_function(fn)
    target = api._python_function(gf)
    facts = _Facts(name=getattr(target, "__qualname__", None) or repr(target), target=target)
    code = getattr(inspect.unwrap(getattr(target, "__func__", target)), "__code__", None)
    facts.filename = code.co_filename if code is not None else None
    lines, facts.source_error = _attempt(lambda: inspect.getsourcelines(target))
    if lines is not None:
        facts.source, facts.first_line = "".join(lines[0]), max(lines[1], 1)
    converted, facts.generated_error = _attempt(
        lambda: conversion.convert(target, {"tg": tg}))
    if converted is not None:
        facts.generated, facts.line_map = converted.source, converted.line_map
    facts.graph, facts.graph_error = _attempt(lambda: gf.graph(*args, **kwargs))
    if facts.graph is not None:
        facts.optimized, facts.graph_error = _attempt(facts.graph.optimize)
    facts.comparison, facts.comparison_error = _attempt(
        lambda: _compare(gf, args, kwargs))
    facts.explanation, facts.explanation_error = _attempt(lambda: gf.explain(*args, **kwargs))
    return facts


def _compare(fn, args, kwargs):
    from .compare import compare
    return compare(fn, *args, timing=True, **kwargs)


# --------------------------------------------------------------------------- small pieces
def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _note(text: str, kind: str = "info") -> str:
    """A one-paragraph message; ``kind`` is info, ok, bad or missing."""
    return f'<p class="note {kind}">{_esc(text)}</p>'


def _table(headers: List[str], rows: List[List[str]], cls: str = "") -> str:
    """A table of already-escaped HTML cells."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _details(summary: str, text: str) -> str:
    return f"<details><summary>{_esc(summary)}</summary><pre>{_esc(text)}</pre></details>"


def _in_source(facts: _Facts, filename: Optional[str], line: Optional[int]) -> bool:
    if facts.source is None or not filename or not line or not facts.filename:
        return False
    if os.path.realpath(filename) != os.path.realpath(facts.filename):
        return False
    return facts.first_line <= line < facts.first_line + facts.source.count("\n") + 1


def _where(facts: _Facts, location) -> str:
    """``file.py:12`` as a link to the source line when it is in the function shown."""
    if not location or not location[0]:
        return '<span class="dim">unknown</span>'
    filename, line = location
    text = _esc(f"{os.path.basename(filename)}:{line}")
    if _in_source(facts, filename, line):
        return f'<a href="#src-L{line}" title="{_esc(filename)}:{line}">{text}</a>'
    return f'<span title="{_esc(filename)}:{line}">{text}</span>'


def _code_lines(source: str, first: int, gutter: Callable[[int, int], str],
                anchor: Optional[str] = None) -> str:
    """Highlighted ``source`` one line per row; ``gutter(index, lineno)`` fills the margin."""
    rows = []
    for i, line in enumerate(highlight.highlight_lines(source.rstrip("\n"))):
        n = first + i
        ident = f' id="{anchor}{n}"' if anchor else ""
        rows.append(f'<div class="line"{ident}>{gutter(i, n)}<code>{line}</code></div>')
    return '<div class="code">' + "".join(rows) + "</div>"


def _seconds(s: Optional[float]) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _kind(dtype: Optional[str], shape) -> str:
    """``float32 [3, 4]``; ``-`` when there is no value."""
    if dtype is None and shape is None:
        return "-"
    return f"{dtype or ''} {list(shape) if shape is not None else ''}".strip()


def _number(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3g}"


def _value_text(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return str(TensorMeta.of(v)) + (" (requires grad)" if v.requires_grad else "")
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------- sections
def _source(facts: _Facts) -> str:
    if facts.source is None:
        return _note(f"source unavailable: {_why(facts.source_error)}", "missing")
    return _code_lines(facts.source, facts.first_line,
                       lambda i, n: f'<a class="ln" href="#src-L{n}">{n}</a>', "src-L")


def _generated(facts: _Facts) -> str:
    if facts.generated is None:
        return _note(f"conversion failed: {_why(facts.generated_error)}", "bad")

    def gutter(i, n):
        where = facts.line_map.get(n)
        link = (f'<a class="map" href="#src-L{where[1]}" title="from line {where[1]}">'
                f"{where[1]}</a>" if where and _in_source(facts, *where)
                else '<span class="map"></span>')
        return f'<span class="ln">{n}</span>{link}'
    intro = ('<p class="hint">Right of each line number: the original line it came '
             "from (a link).</p>")
    return intro + _code_lines(facts.generated, 1, gutter)


def _picture(graph, error: Optional[Exception]) -> str:
    if graph is None:
        return _note(f"no graph: {_why(error)}", "bad")
    try:
        text = dot.svg(graph)
    except dot.GraphvizNotFound as e:
        return _note(f"picture unavailable: {e}", "missing")
    except Exception as e:
        return _note(f"picture unavailable: {type(e).__name__}: {e}", "missing")
    return f'<div class="picture">{text[text.find("<svg"):]}</div>'


def _graph(facts: _Facts) -> str:
    listing = _details("text listing", str(facts.graph)) if facts.graph is not None else ""
    return _picture(facts.graph, facts.graph_error) + listing


def _optimized(facts: _Facts) -> str:
    out = _picture(facts.optimized, facts.graph_error)
    if facts.optimized is not None:
        memory, _ = _attempt(lambda: memory_text(facts.optimized.memory_report))
        out += _note(memory) if memory else ""
        out += _details("text listing, before optimization", str(facts.graph))
        out += _details("text listing, after optimization", str(facts.optimized))
        executor, _ = _attempt(facts.optimized.executor_source)
        out += _details("generated Python that runs it", executor) if executor else ""
    return out


def _fused(facts: _Facts) -> str:
    if facts.optimized is None:
        return _note(f"no optimized graph: {_why(facts.graph_error)}", "bad")
    rows = [[f"<code>%{_esc(n.name)}</code>", _esc(", ".join(n.attrs.get("ops", ()))),
             f"<code>{_esc(meta_text(n.meta))}</code>", _where(facts, n.location)]
            for n in facts.optimized.walk() if n.op == "fused"]
    if not rows:
        return _note("no fused groups: nothing here was fused into a kernel")
    return _table(["node", "ops", "shape/dtype", "source line"], rows)


def _taken(record) -> str:
    """``then 0×, else 3×``; for a loop the iterations of each time it ran."""
    taken = record.taken or {}
    if record.kind == "cond":
        return ", ".join(f"{k} {v}×" for k, v in taken.items())
    runs = taken.get("iterations", [])
    if len(runs) == 1:
        return f"{runs[0]} iteration" + ("" if runs[0] == 1 else "s")
    return f"ran {len(runs)} times: " + ", ".join(str(k) for k in runs) + " iterations" \
        if runs else "never ran"


def _verdict(report) -> str:
    """Whether the two runs agree, in one note (two when both raised different errors)."""
    eager, graph = report.eager_error, report.graph_error
    if eager and graph and report.ok:
        return _note(f"Eager and converted both raised: {eager}", "ok")
    if eager or graph:
        return "".join(_note(f"{side} run raised: {err}", "bad") for side, err in
                       (("eager", eager), ("converted", graph)) if err)
    if not report.ok:
        return _note("The results differ: see the rows marked mismatch.", "bad")
    count = len(report.outputs)
    agree = _note("The results agree: converted equals eager on " + (
        "its output." if count == 1 else f"all {count} outputs."), "ok")
    if report.fell_back:
        agree += _note("The converted side fell back to running eagerly (see Fallbacks).")
    return agree


def _timing(report) -> str:
    if report.eager_seconds is None or report.graph_seconds is None:
        return _note("not timed: a run raised")
    ratio = report.eager_seconds / report.graph_seconds if report.graph_seconds else 0.0
    return _table(["eager", "converted", "ratio"], [[
        _esc(_seconds(report.eager_seconds)), _esc(_seconds(report.graph_seconds)),
        _esc(f"converted is {ratio:.2f}× as fast as eager")]])


def _outputs(facts: _Facts) -> str:
    report = facts.comparison
    if report is None:
        return _note(f"comparison unavailable: {_why(facts.comparison_error)}", "missing")
    parts = [_verdict(report)]
    if report.outputs:
        rows = [[f"<code>{_esc(o.path)}</code>", _esc(_kind(o.eager_dtype, o.eager_shape)),
                 _esc(_kind(o.graph_dtype, o.graph_shape)), _esc(_number(o.max_abs)),
                 _esc(_number(o.max_rel)),
                 '<span class="ok">OK</span>' if o.ok else '<span class="bad">mismatch</span>',
                 _esc(o.note or "")] for o in report.outputs]
        parts.append(_table(["output", "eager", "converted", "max abs diff", "max rel diff",
                             "result", "note"], rows))
    if report.branches:
        rows = [[_esc(b.kind), f"<code>{_esc(b.node)}</code>", _where(facts, b.location),
                 f"<code>{_esc((b.source or '').strip())}</code>", _esc(_taken(b))]
                for b in report.branches]
        parts.append("<h3>Branches and loops taken</h3>")
        parts.append(_table(["kind", "node", "line", "source", "taken"], rows))
    parts.append("<h3>Time per call</h3>" + _timing(report))
    return "".join(parts)


def _raised_at(facts: _Facts, e: BaseException) -> Optional[tuple]:
    """``(file, line)`` of the innermost frame of ``e``'s traceback in the function's own
    file (the user's ``raise``), or None."""
    found, tb = None, e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if facts.filename and os.path.realpath(code.co_filename) == \
                os.path.realpath(facts.filename):
            found = (code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _fallbacks(facts: _Facts) -> str:
    reasons = []                      # (reason, (file, line) or None)
    report = facts.comparison
    if report is not None and report.fell_back:
        reasons.append((report.fallback_reason or "unknown reason", report.fallback_location))
    for e in () if reasons else (facts.generated_error, facts.graph_error):
        if isinstance(e, ConversionError):
            reasons.append((e.reason, (e.filename, e.lineno)))
        elif e is not None:
            reasons.append((f"tracing failed: {_why(e)}", _raised_at(facts, e)))
    if not reasons:
        return _note(NO_FALLBACK, "ok")
    rows = [[_where(facts, loc), _esc(text)] for text, loc in reasons]
    return _note("The function did not run as a graph: it fell back to eager.", "bad") + \
        _table(["where", "reason"], rows)


def _explain(facts: _Facts) -> str:
    ex = facts.explanation
    if ex is None:
        return _note(f"explanation unavailable: {_why(facts.explanation_error)}", "missing")
    rows = [[_where(facts, (e.filename, e.lineno)), f"<code>{_esc(e.source.strip())}</code>",
             f'<span class="what {_esc(e.what)}">{_esc(e.what)}</span>', _esc(e.detail)]
            for e in ex.lines]
    out = _table(["line", "source", "became", "detail"], rows) if rows else \
        _note("no control flow or fallback to explain")
    if ex.retraces:
        out += "<h3>Retraces</h3><ul>" + "".join(f"<li>{_esc(r)}</li>"
                                                for r in ex.retraces) + "</ul>"
    return out + _details("as text", str(ex))


_RENDER = {"source": _source, "generated": _generated, "graph": _graph,
           "optimized": _optimized, "fused": _fused, "outputs": _outputs,
           "fallbacks": _fallbacks, "explain": _explain}


def _section(ident: str, facts: _Facts) -> str:
    body, error = _attempt(lambda: _RENDER[ident](facts))
    if body is None:
        body = _note(f"this section could not be built: {_why(error)}", "bad")
    return (f'<section id="{ident}"><h2>{_esc(SECTIONS[ident])}</h2>'
            f"{body}</section>")


def _header(facts: _Facts, args: tuple, kwargs: dict) -> str:
    where = f"{facts.filename}:{facts.first_line}" if facts.filename else "unknown"
    shown = [_value_text(a) for a in args] + [f"{k}={_value_text(v)}"
                                              for k, v in kwargs.items()]
    items = [("file", where), ("arguments", ", ".join(shown) or "none"),
             ("made", datetime.datetime.now().isoformat(sep=" ", timespec="seconds")),
             ("torch", torch.__version__), ("python", platform.python_version())]
    meta = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items)
    nav = " ".join(f'<a href="#{i}">{_esc(t)}</a>' for i, t in SECTIONS.items())
    return (f"<header><h1>tograph report: <code>{_esc(facts.name)}</code></h1>"
            f'<dl class="meta">{meta}</dl><nav>{nav}</nav></header>')


def build_report(fn, args=(), kwargs=None) -> str:
    """The HTML text of the report on ``fn`` (function, method, ``nn.Module`` or
    ``to_graph`` function) called with ``args`` and ``kwargs``."""
    args, kwargs = tuple(args), dict(kwargs or {})
    return _page(_gather(fn, args, kwargs), args, kwargs)


def _page(facts: _Facts, args: tuple, kwargs: dict) -> str:
    pairs = (("source", "generated"), ("graph", "optimized"))
    body = "".join(f'<div class="pair">{_section(a, facts)}{_section(b, facts)}</div>'
                   for a, b in pairs)
    body += "".join(_section(i, facts) for i in SECTIONS if not any(i in p for p in pairs))
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>tograph report: {_esc(facts.name)}</title><style>{_CSS}</style>"
            f"</head><body>{_header(facts, args, kwargs)}<main>{body}</main></body></html>\n")


def write_report(fn, path, args=(), kwargs=None) -> str:
    """Write the report on ``fn`` to ``path`` (UTF-8); returns the path."""
    return report_on(fn, path, args, kwargs)[0]


def report_on(fn, path, args=(), kwargs=None) -> Tuple[str, Optional[str]]:
    """Write the report on ``fn`` to ``path``: (the path, why the function did not run as
    a graph agreeing with eager, or None when it did: ``tograph report``'s exit status)."""
    args, kwargs = tuple(args), dict(kwargs or {})
    facts = _gather(fn, args, kwargs)
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_page(facts, args, kwargs))
    return path, _trouble(facts)


def _trouble(facts: _Facts) -> Optional[str]:
    """Why the report's function did not run as a graph that agrees with eager; None."""
    report = facts.comparison
    if report is None:
        return f"the comparison with eager failed: {_why(facts.comparison_error)}"
    if report.fell_back:
        where = "{}:{}: ".format(*report.fallback_location) if report.fallback_location \
            else ""
        return f"fell back to eager: {where}{report.fallback_reason}"
    if report.eager_error or report.graph_error:
        return (f"raised: eager {report.eager_error or '-'}; converted "
                f"{report.graph_error or '-'}")
    return None if report.ok else "eager and converted differ (see #outputs)"


_CSS = """
:root { --ink: #212529; --dim: #868e96; --line: #dee2e6; --soft: #f8f9fa; --accent: #1c7ed6; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans",
       sans-serif; color: var(--ink); background: #fff; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--soft); }
h1 { margin: 0 0 8px; font-size: 22px; font-weight: 600; }
h2 { margin: 0 0 10px; font-size: 17px; font-weight: 600; border-bottom: 2px solid var(--line);
     padding-bottom: 4px; }
h3 { margin: 16px 0 6px; font-size: 14px; font-weight: 600; }
code, pre, .code { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0 0 8px; }
dl.meta dt { color: var(--dim); } dl.meta dd { margin: 0; word-break: break-all; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
nav a { margin-right: 12px; }
main { padding: 8px 28px 40px; }
section { margin: 18px 0; min-width: 0; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 28px; }
.code { border: 1px solid var(--line); border-radius: 6px; background: #fbfbfc;
        overflow-x: auto; padding: 6px 0; }
.line { white-space: pre; display: flex; min-height: 1.45em; }
.line:target { background: #fff3bf; }
.ln, .map { flex: none; text-align: right; color: var(--dim); padding-right: 10px;
            user-select: none; text-decoration: none; }
.ln { width: 3.5em; } .map { width: 2.8em; color: var(--accent); }
.line code { flex: 1; padding-left: 6px; }
.k { color: #7048e8; font-weight: 600; } .b { color: #1971c2; } .s { color: #2b8a3e; }
.n { color: #d9480f; } .c { color: #868e96; font-style: italic; } .d { color: #0c8599; }
.o { color: #495057; } .f { color: #1864ab; font-weight: 600; }
.picture { border: 1px solid var(--line); border-radius: 6px; padding: 8px; overflow: auto;
           text-align: center; }
.picture svg { max-width: 100%; height: auto; }
details { margin: 8px 0; } summary { cursor: pointer; color: var(--accent); }
details pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px;
              padding: 8px; overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td code, .what { white-space: nowrap; }
.note { padding: 8px 12px; border-radius: 6px; border-left: 4px solid var(--accent);
        background: #e7f5ff; margin: 6px 0; }
.note.ok { border-color: #2f9e44; background: #ebfbee; }
.note.bad { border-color: #e03131; background: #fff5f5; }
.note.missing { border-color: #f08c00; background: #fff9db; }
.hint, .dim { color: var(--dim); } .hint { margin: 0 0 6px; font-size: 12.5px; }
span.ok { color: #2f9e44; font-weight: 600; } span.bad { color: #e03131; font-weight: 600; }
.what { padding: 0 6px; border-radius: 4px; background: var(--soft);
        border: 1px solid var(--line); }
.what.cond, .what.while { background: #f3f0ff; border-color: #b197fc; }
.what.fallback { background: #fff5f5; border-color: #ffa8a8; }
@media (max-width: 1100px) { .pair { grid-template-columns: 1fr; } }
"""
