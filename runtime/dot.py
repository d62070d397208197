"""Pictures of a graph: Graphviz DOT text, and SVG/PNG/PDF files rendered by Graphviz.

    g = f.graph(x)
    g.render("f.svg")            # runtime.dot.render(g, "f.png"); svg(g) for an HTML page
    text = g.to_dot()

What the picture shows: graph inputs (blue), constants (grey) and outputs (orange) in
their own shapes; each op as a box ``%name`` / ``op args`` (literal arguments inline);
fused groups filled orange with the ops they run; every ``cond``/``while`` as a cluster
titled ``cond %cond_1 (file.py:12)`` holding one nested cluster per subgraph
(``then``/``else``, ``cond``/``body``), each with its inputs (operands, captured values)
fed by dashed edges from the outer values and its ``return``; the cond/while node itself
is the diamond where the subgraphs' results meet. Edges carry shape and dtype
(``f32[4,8]``); tooltips give the user's source line.

Also here, shared with the TensorBoard export: ``subgraph_feeds`` (which outer values
feed a control node's subgraphs) and ``source_text`` (a location as ``file.py:12: line``).
Rendering runs Graphviz's ``dot`` program (Debian's ``graphviz`` package).
"""
from __future__ import annotations

import linecache
import os
import shutil
import subprocess
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .graph import Graph, Node, iter_nodes
from .meta import meta_text
from .printer import _op_text, format_value

SUB_LABELS = {"cond": ("then", "else"), "while": ("cond", "body")}
FUSED_COLOR = "#ffd8a8"
_NODE_STYLE = {     # kind -> DOT attributes
    "input": 'shape=invhouse, style=filled, fillcolor="#d0ebff", color="#1c7ed6"',
    "operand": 'shape=invhouse, style=filled, fillcolor="#e7f5ff", color="#74c0fc"',
    "captured": 'shape=invhouse, style="filled,dashed", fillcolor="#f1f3f5", color="#868e96"',
    "constant": 'shape=box, style=filled, fillcolor="#e9ecef", color="#868e96"',
    "op": 'shape=box, style="rounded,filled", fillcolor="#ffffff"',
    "fused": f'shape=box, style="rounded,filled", fillcolor="{FUSED_COLOR}", color="#e8590c"',
    "control": 'shape=diamond, style=filled, fillcolor="#e5dbff", color="#7048e8"',
    "output": 'shape=house, style=filled, fillcolor="#ffe8cc", color="#f76707"',
}
_CLUSTER_STYLE = {  # construct -> DOT attributes of its cluster
    "cond": 'style="rounded,filled", fillcolor="#f3f0ff", color="#7048e8"',
    "while": 'style="rounded,filled", fillcolor="#e6fcf5", color="#0ca678"',
    "sub": 'style="rounded,filled", fillcolor="#ffffff", color="#adb5bd"',
}
_HEADER = """\
  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.3, ranksep=0.35, labeljust=l];
  node [fontname="Helvetica", fontsize=10, height=0.3, margin="0.1,0.04"];
  edge [fontname="Helvetica", fontsize=8, color="#495057", fontcolor="#495057", arrowsize=0.6];"""
_WRAP = 36          # characters per label line


class GraphvizError(RuntimeError):
    """Graphviz's ``dot`` failed to render a graph."""


class GraphvizNotFound(GraphvizError):
    """Graphviz's ``dot`` program is not installed (or not on PATH)."""

    def __init__(self, message: str = (
            "Graphviz's 'dot' program is not on PATH: install Graphviz "
            "('apt-get install graphviz'; 'bash .ci/setup' installs it when missing)")):
        super().__init__(message)


def subgraph_feeds(node: Node) -> Tuple[List[Node], List[Node], int]:
    """For a node with subgraphs: (outer values feeding each subgraph's inputs, in order;
    inputs the node reads itself, such as a cond's predicate; how many subgraph inputs are
    explicit operands rather than captured values)."""
    inputs = node.inputs
    if node.op == "cond":
        return inputs[1:], inputs[:1], node.attrs.get("n_operands", len(inputs) - 1)
    if node.op == "while":
        return inputs, [], node.attrs.get("n_vars", len(inputs))
    return inputs, [], len(inputs)


def sub_labels(node: Node) -> Sequence[str]:
    """The names of a node's subgraphs: then/else, cond/body (``sub0``... otherwise)."""
    return SUB_LABELS.get(node.op) or [f"sub{i}" for i in range(len(node.subgraphs))]


def source_text(location) -> Optional[str]:
    """``file.py:12: <the source line>`` for a (file, line) location; None without one."""
    if location is None:
        return None
    code = linecache.getline(*location).strip()
    return f"{_where(location)}: {code}" if code else _where(location)


def _where(location) -> str:
    return f"{os.path.basename(location[0])}:{location[1]}"


def _tooltip(node: Node) -> str:
    return source_text(node.location) or node.op


def quote(text: str) -> str:
    """``text`` as a DOT quoted string (one line; ``\\n`` in labels is added by ``_label``)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'


def _label(lines: Sequence[str]) -> str:
    """Several lines as one quoted DOT label, each line escaped, long ones wrapped."""
    out: List[str] = []
    for line in lines:
        out += textwrap.wrap(line, _WRAP, max_lines=4, placeholder=" ...") or [""]
    return '"' + "\\n".join(quote(line)[1:-1] for line in out) + '"'


def _op_lines(node: Node) -> List[str]:
    """The second part of a node's label: what it computes."""
    if node.op == "get":
        return [f"get [{node.attrs.get('index')}]"]
    if node.op == "fused":
        return ["fused", ", ".join(node.attrs.get("ops") or ())]
    if node.op == "constant":
        value = node.attrs.get("value")
        small = isinstance(value, torch.Tensor) and value.numel() <= 4
        return ["constant"] + ([str(value.detach().tolist())] if small else [])
    parts = [format_value(a) for a in node.args]
    parts += [f"{k}={format_value(v)}" for k, v in node.kwargs.items()]
    return [" ".join([_op_text(node)] + parts)]


class _Writer:
    """Builds the DOT text of one graph: statements nested by cluster, edges at the end."""

    def __init__(self):
        self.lines: List[str] = []
        self.edges: Dict[Tuple[str, str], str] = {}     # (from, to) -> attributes, in order
        self.ids: Dict[int, str] = {}
        self.clusters = 0
        self.returns = 0

    def id(self, node: Node) -> str:
        key = id(node)
        if key not in self.ids:
            self.ids[key] = f"n{len(self.ids)}"
        return self.ids[key]

    def node(self, pad: str, node_id: str, lines: Sequence[str], kind: str,
             tooltip: str) -> None:
        self.lines.append(f"{pad}{node_id} [label={_label(lines)}, "
                          f"tooltip={quote(tooltip)}, {_NODE_STYLE[kind]}];")

    def edge(self, src: str, dst: str, label: Optional[str] = None, extra: str = "") -> None:
        attrs = ([f"label={quote(label)}"] if label else []) + ([extra] if extra else [])
        self.edges.setdefault((src, dst), ", ".join(attrs))

    def value_edge(self, src: Node, dst: Node, extra: str = "") -> None:
        """An edge carrying ``src``'s value (a ``get`` shows the element it reads)."""
        meta = dst.meta if dst.op == "get" else src.meta
        self.edge(self.id(src), self.id(dst), meta_text(meta), extra)

    def graph(self, graph: Graph, pad: str, feeds: Optional[List[Node]] = None,
              n_explicit: int = 0) -> Optional[str]:
        """Emit ``graph``'s nodes; ``feeds`` are the outer values of a subgraph's inputs.
        Returns the id of its ``return`` node (None for a root graph with no outputs)."""
        for i, value in enumerate(graph.inputs):
            kind = "input" if feeds is None else ("operand" if i < n_explicit else "captured")
            role = "" if feeds is None else f" ({kind})"
            self.node(pad, self.id(value), [f"%{value.name}{role}"], kind, _tooltip(value))
            if feeds is not None and i < len(feeds):
                self.value_edge(feeds[i], value, "style=dashed")
        for node in graph.nodes:
            if node.subgraphs:
                self.control(node, pad)
            elif node.op != "placeholder":
                kind = {"constant": "constant", "fused": "fused"}.get(node.op, "op")
                self.node(pad, self.id(node), [f"%{node.name}"] + _op_lines(node), kind,
                          _tooltip(node))
                for value in dict.fromkeys(node.inputs):
                    self.value_edge(value, node)
        if feeds is None and isinstance(graph.outputs, tuple) and not graph.outputs:
            return None             # a TF1-style default graph: nothing returned
        self.returns += 1
        ret = f"ret{self.returns}"
        self.node(pad, ret, ["return " + format_value(graph.outputs)], "output", "outputs")
        for value in dict.fromkeys(iter_nodes(graph.outputs)):
            self.edge(self.id(value), ret, meta_text(value.meta))
        return ret

    def control(self, node: Node, pad: str) -> None:
        """A cond/while: a cluster holding one cluster per subgraph and the node's diamond."""
        self.clusters += 1
        name = f"cluster_{self.clusters}"
        where = f" ({_where(node.location)})" if node.location else ""
        title = f"{node.op} %{node.name}{where}"
        tip = _tooltip(node)
        style = _CLUSTER_STYLE.get(node.op, _CLUSTER_STYLE["cond"])
        self.lines.append(f"{pad}subgraph {name} {{")
        self.lines.append(f"{pad}  graph [label={quote(title)}, tooltip={quote(tip)}, {style}];")
        feeds, direct, n_explicit = subgraph_feeds(node)
        returns = []
        for label, sub in zip(sub_labels(node), node.subgraphs):
            self.lines.append(f"{pad}  subgraph {name}_{label} {{")
            self.lines.append(f"{pad}    graph [label={quote(label)}, {_CLUSTER_STYLE['sub']}];")
            returns.append(self.graph(sub, pad + "    ", feeds, n_explicit))
            self.lines.append(f"{pad}  }}")
        self.node(pad + "  ", self.id(node), [f"%{node.name}", node.op], "control", tip)
        self.lines.append(f"{pad}}}")
        for value in direct:
            self.value_edge(value, node)
        for ret in returns:
            self.edge(ret, self.id(node), extra="style=dotted")


def to_dot(graph: Graph) -> str:
    """The Graphviz DOT text of ``graph`` (deterministic: the same graph, the same text)."""
    writer = _Writer()
    writer.graph(graph, "  ")
    edges = [f"  {a} -> {b}" + (f" [{attrs}];" if attrs else ";")
             for (a, b), attrs in writer.edges.items()]
    return "\n".join([f"digraph {quote(graph.name)} {{", _HEADER,
                      f"  label={quote(graph.name)}; labelloc=t;",
                      *writer.lines, *edges, "}"]) + "\n"


def _run_dot(text: str, fmt: str, path: Optional[str] = None) -> bytes:
    """Run ``dot -T<fmt>`` on ``text``: writes ``path`` if given, else returns the output."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFound()
    command = [exe, f"-T{fmt}"] + (["-o", path] if path else [])
    done = subprocess.run(command, input=text.encode("utf-8"), capture_output=True)
    if done.returncode != 0:
        what = path or f"{fmt} output"
        reason = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise GraphvizError(f"Graphviz 'dot -T{fmt}' could not render {what}: {reason}")
    return done.stdout


def render(graph: Graph, path, format: Optional[str] = None) -> str:
    """Draw ``graph`` into ``path``; the format comes from the suffix (.svg, .png, .pdf,
    .dot) unless given. Returns the path. ``.dot``/``.gv`` need no Graphviz."""
    path = os.fspath(path)
    fmt = (format or os.path.splitext(path)[1].lstrip(".")).lower()
    if not fmt:
        raise ValueError(f"cannot tell the picture format of {path!r}: "
                         "give it a suffix (.svg, .png, .pdf, .dot) or format=")
    text = to_dot(graph)
    if fmt in ("dot", "gv"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        _run_dot(text, fmt, path)
    return path


def svg(graph: Graph) -> str:
    """The SVG text of the picture of ``graph`` (to embed in an HTML page)."""
    return _run_dot(to_dot(graph), "svg").decode("utf-8")
