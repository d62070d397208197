"""Graph pictures: the DOT text (clusters, colors, edge types, tooltips, escaping) and
SVG/PNG/PDF files rendered by the real Graphviz ``dot`` (skipped only when it is missing)."""
import os
import re
import shutil
import xml.etree.ElementTree as ET

import pytest
import torch

import runtime
from runtime.dot import (FUSED_COLOR, GraphvizError, GraphvizNotFound, quote, render, svg,
                         to_dot)
from transpiler import to_graph

THIS_FILE = os.path.basename(__file__)
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz 'dot' is not installed (bash .ci/setup)")


@to_graph
def halve_until_small(x, n):
    i = 0
    while x.abs().sum() > 1:
        if x.sum() > 0:
            x = x * 0.5
        else:
            x = x / 3
        i += 1
    return torch.tanh(x) * 2 + 1, i


def loop_graph():
    """A tensor ``while`` whose body holds a tensor ``if`` (traced once, then cached)."""
    return halve_until_small.graph(torch.ones(4, 8), 3)


def parts(graph):
    """The while node, its body's cond node, and the cond's then/else nodes by op."""
    loop = next(n for n in graph.nodes if n.op == "while")
    branch = next(n for n in loop.subgraphs[1].nodes if n.op == "cond")
    then_mul = next(n for n in branch.subgraphs[0].nodes if n.op == "mul")
    else_div = next(n for n in branch.subgraphs[1].nodes if n.op == "div")
    return loop, branch, then_mul, else_div


def layout(text):
    """{first label line: (node id, cluster titles enclosing it)} from the DOT text,
    and the list of (from, to, attributes) edges."""
    nodes, stack, edges = {}, [], []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("subgraph "):
            stack.append(None)
        elif line.startswith("graph [label=") and stack:
            stack[-1] = re.match(r'graph \[label="((?:[^"\\]|\\.)*)"', line).group(1)
        elif line == "}":
            if stack:
                stack.pop()
        elif m := re.match(r'(\w+) -> (\w+)(?: \[(.*)\])?;$', line):
            edges.append(m.groups())
        elif m := re.match(r'(\w+) \[label="((?:[^"\\]|\\.)*?)(?:\\n|")', line):
            assert m.group(2) not in nodes, f"two nodes labelled {m.group(2)}"
            nodes[m.group(2)] = (m.group(1), tuple(stack))
    return nodes, edges


def node_line(text, node_id):
    return next(line for line in text.splitlines() if line.strip().startswith(node_id + " ["))


def test_while_and_nested_cond_are_nested_clusters():
    g = loop_graph()
    loop, branch, then_mul, else_div = parts(g)
    nodes, _ = layout(to_dot(g))
    while_title = f"while %{loop.name} ({THIS_FILE}:{loop.location[1]})"
    cond_title = f"cond %{branch.name} ({THIS_FILE}:{branch.location[1]})"
    assert nodes[f"%{then_mul.name}"][1] == (while_title, "body", cond_title, "then")
    assert nodes[f"%{else_div.name}"][1] == (while_title, "body", cond_title, "else")
    test_op = next(n for n in loop.subgraphs[0].nodes if n.op == "gt")
    assert nodes[f"%{test_op.name}"][1] == (while_title, "cond")
    assert nodes[f"%{branch.name}"][1] == (while_title, "body", cond_title)   # the diamond
    assert nodes[f"%{loop.name}"][1] == (while_title,)
    x = g.inputs[0]
    assert nodes[f"%{x.name}"][1] == ()


def test_ids_are_unique_and_every_edge_joins_declared_nodes():
    text = to_dot(loop_graph())
    ids = re.findall(r"^\s*(?!graph )(\w+) \[label=", text, re.M)
    assert len(ids) == len(set(ids))
    _, edges = layout(text)
    assert edges and all(a in ids and b in ids for a, b, _ in edges)


def test_edges_carry_shape_and_dtype():
    g = loop_graph()
    loop, branch, then_mul, _ = parts(g)
    nodes, edges = layout(to_dot(g))
    by_pair = {(a, b): attrs for a, b, attrs in edges}
    x = nodes[f"%{g.inputs[0].name}"][0]
    body_x = loop.subgraphs[1].inputs[1]
    # the outer x feeds the body's loop variable: dashed, typed
    assert by_pair[(x, nodes[f"%{body_x.name} (operand)"][0])] == 'label="f32[4,8]", style=dashed'
    then_x = branch.subgraphs[0].inputs[0]
    assert by_pair[(nodes[f"%{then_x.name} (operand)"][0], nodes[f"%{then_mul.name}"][0])] \
        == 'label="f32[4,8]"'
    pred = branch.inputs[0]
    assert by_pair[(nodes[f"%{pred.name}"][0], nodes[f"%{branch.name}"][0])] == 'label="bool[]"'
    counter = next(n for n in g.nodes if n.op == "get" and n.attrs["index"] == 0)
    assert by_pair[(nodes[f"%{loop.name}"][0], nodes[f"%{counter.name}"][0])] == 'label="i64[]"'


def test_subgraph_outputs_meet_at_the_control_node():
    g = loop_graph()
    loop, branch, then_mul, else_div = parts(g)
    nodes, edges = layout(to_dot(g))
    returns = {label: ident for label, (ident, _) in nodes.items() if label.startswith("return")}
    into_cond = {a for a, b, _ in edges if b == nodes[f"%{branch.name}"][0]}
    assert returns[f"return (%{then_mul.name},)"] in into_cond
    assert returns[f"return (%{else_div.name},)"] in into_cond
    assert len([a for a, b, _ in edges if b == nodes[f"%{loop.name}"][0]]) == 2   # cond, body


def test_tooltips_show_the_source_line():
    g = loop_graph()
    _, branch, then_mul, _ = parts(g)
    text = to_dot(g)
    nodes, _ = layout(text)
    line = node_line(text, nodes[f"%{then_mul.name}"][0])
    assert f'tooltip="{THIS_FILE}:{then_mul.location[1]}: x = x * 0.5"' in line
    assert f'tooltip="{THIS_FILE}:{branch.location[1]}: if x.sum() > 0:"' in text   # cluster
    x_line = node_line(text, nodes[f"%{g.inputs[0].name}"][0])
    assert 'tooltip="placeholder"' in x_line and "invhouse" in x_line


def test_fused_groups_are_colored_and_list_their_ops():
    opt = loop_graph().optimize()
    text = to_dot(opt)
    nodes, _ = layout(text)
    fused = [n for n in opt.walk() if n.op == "fused"]
    assert fused, "the optimizer made no fused group"
    for node in fused:
        line = node_line(text, nodes[f"%{node.name}"][0])
        assert f'fillcolor="{FUSED_COLOR}"' in line
        assert f'\\nfused\\n{", ".join(node.attrs["ops"])}"' in line
    others = [n for n in opt.walk() if n.op not in ("fused", "placeholder") and not n.subgraphs]
    for node in others:
        assert FUSED_COLOR not in node_line(text, nodes[f"%{node.name}"][0])


def test_same_graph_same_text():
    g = loop_graph()
    assert to_dot(g) == to_dot(g) == g.to_dot()
    assert to_dot(g.optimize()) == to_dot(g.optimize())


def seed_graph():
    """The TF1-style seed, with a captured value in a cond inside a while and odd names."""
    g = runtime.Graph()
    with g.as_default():
        a = runtime.placeholder(torch.float32, shape=(None, 2), name='in "a"\\b <c>')
        b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
        n = runtime.placeholder(torch.int64, shape=(), name="n")

        def body(i, v):
            v = runtime.cond(v.sum() > 0, lambda t: t @ b, lambda t: t - 1, (v,))
            return i + 1, v
        _, out = runtime.while_loop(lambda i, v: i < n, body, (torch.tensor(0), a))
        c = out * len('q"\\<>')
    return g, c


def test_tf1_graph_escaping_and_captured_values(graph):
    g, c = seed_graph()
    text = to_dot(g)
    nodes, edges = layout(text)
    weird = nodes['%in \\"a\\"\\\\b <c>']          # quote and backslash escaped
    assert weird[1] == () and "invhouse" in node_line(text, weird[0])
    const = node_line(text, nodes["%const_b"][0])
    assert "[[1.0, 2.0], [3.0, 4.0]]" in const and 'fillcolor="#e9ecef"' in const
    assert not [label for label, (_, where) in nodes.items()   # a default graph returns
                if label.startswith("return") and where == ()]   # nothing; subgraphs do
    assert f"tooltip=\"{THIS_FILE}:" in text and "len('q\\\"\\\\\\\\<>')" in text
    captured = {label: v for label, v in nodes.items()
                if label.startswith("%const_b") and label.endswith("(captured)")}
    in_branches = [v for v in captured.values() if v[1][-1] in ("then", "else")]
    assert len(in_branches) == 2                     # const_b as seen by then and else
    body_b = [v for v in captured.values() if v[1][-1] == "body"]
    assert len(body_b) == 1                          # ... through the loop body
    sources = {a for a, b, _ in edges if b in {v[0] for v in in_branches}}
    assert sources == {body_b[0][0]}                 # captured chain: outer -> body -> branch
    assert (nodes["%const_b"][0], body_b[0][0]) in {(a, b) for a, b, _ in edges}


def test_same_tf1_graph_built_twice_same_text(graph):
    assert to_dot(seed_graph()[0]) == to_dot(seed_graph()[0])


def test_quote_escapes_quotes_backslashes_and_newlines():
    assert quote('a"b\\c\nd<e>') == '"a\\"b\\\\c\\nd<e>"'


@needs_dot
def test_svg_shows_nodes_and_both_branches(tmp_path):
    g = loop_graph()
    loop, branch, then_mul, else_div = parts(g)
    path = render(g, tmp_path / "loop.svg")
    assert path == str(tmp_path / "loop.svg")
    root = ET.parse(path).getroot()
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    for label in (f"%{then_mul.name}", f"%{else_div.name}", "then", "else", "cond", "body",
                  f"while %{loop.name} ({THIS_FILE}:{loop.location[1]})",
                  f"cond %{branch.name} ({THIS_FILE}:{branch.location[1]})", "f32[4,8]"):
        assert label in texts, label
    assert ET.fromstring(svg(g)).iter("{http://www.w3.org/2000/svg}text")
    assert f"%{then_mul.name}" in svg(g)


@needs_dot
def test_svg_keeps_odd_names_intact(graph):
    g, _ = seed_graph()
    root = ET.fromstring(svg(g))
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert '%in "a"\\b <c>' in texts


@needs_dot
@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".pdf", b"%PDF")])
def test_png_and_pdf(tmp_path, suffix, magic):
    path = loop_graph().optimize().render(tmp_path / f"loop{suffix}")
    data = open(path, "rb").read()
    assert data.startswith(magic) and len(data) > 1000


def test_dot_file_needs_no_graphviz(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    g = loop_graph()
    path = render(g, tmp_path / "loop.gv", format="dot")
    assert open(path).read() == to_dot(g)


def test_missing_graphviz_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(GraphvizNotFound, match="apt-get install graphviz") as info:
        render(loop_graph(), tmp_path / "loop.svg")
    assert isinstance(info.value, RuntimeError) and "\n" not in str(info.value)
    with pytest.raises(GraphvizNotFound):
        svg(loop_graph())
    assert not (tmp_path / "loop.svg").exists()


@needs_dot
def test_dot_failure_names_the_file(tmp_path):
    with pytest.raises(GraphvizError, match="loop.nosuchformat"):
        render(loop_graph(), tmp_path / "loop.nosuchformat")


def test_unknown_format_without_suffix(tmp_path):
    with pytest.raises(ValueError, match="suffix"):
        render(loop_graph(), tmp_path / "loop")
