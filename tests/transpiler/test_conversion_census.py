"""The census of a parsed function (pyct.census) and the statement-level line map
(conversion._line_map) give what the walks they replace gave (issue 13, first call):
converters skipped for want of their node kinds would have changed nothing, the namer
avoids the names it avoided, and the line map is the one every node's filled origin gave."""
import functools

import gast
import pytest
import torch

from tests.e2e.e2e_helpers import assert_same
from tests.transpiler.test_conversion_speed import (ORIGIN_PROGRAMS, _plain_fill_from_parents,
                                                    _plain_line_map)
from transpiler import ConversionError, conversion, to_graph
from transpiler.pyct import census, clone, codegen, parser


def _plain(x, n):
    y = x * 2
    return y + n


def _decorated_and_handlers(x, n):
    @functools.lru_cache(maxsize=None)
    def scale(k):
        return k * 2

    try:
        y = x / scale(n)
    except (ZeroDivisionError, TypeError) as e:
        y = str(e)
    except ValueError:
        raise
    else:
        y = -y
    finally:
        n += 1
    if n > 3:
        z = 1
    elif n > 2:
        z = 2
    else:
        z = 3
    with open(__file__) as handle:
        first = handle.readline()
    return y, z, first


def _every_trigger(x, xs, n):
    assert n >= 0, "n"
    for v in xs:
        if v > n:
            break
        if v < 0:
            continue
    else:
        n = -n
    while (m := n - 1) > 0:
        n = m
    try:
        s = f"{n:3d}" + "%d" % n
    except ValueError:
        s = ""
    return [v * x for v in xs if v], s


def _no_loops(x, flag):
    if flag and x.sum() > 0:
        return x.sum() if flag else -x
    return -x


PROGRAMS = [_plain, _decorated_and_handlers, _every_trigger, _no_loops] + ORIGIN_PROGRAMS


def _converted(fn):
    try:
        tree = conversion._convert_tree(fn)
    except ConversionError as e:            # the same refusal either way
        return repr(e)
    source, parsed = codegen.to_source_and_ast(tree)
    return source, conversion._line_map(tree, parsed)


@pytest.mark.parametrize("fn", PROGRAMS)
def test_skipped_converters_would_change_nothing(fn, monkeypatch):
    """Every converter run (none skipped on the census) gives the same source and map."""
    skipping = _converted(fn)
    monkeypatch.setattr(conversion, "_has_work", lambda converter, found: True)
    assert _converted(fn) == skipping


def test_some_converters_are_skipped(monkeypatch):
    """A function without loops, try or f-strings skips their converters (the census is
    used: a test above that could not fail otherwise)."""
    ran = []
    real = conversion._has_work
    monkeypatch.setattr(conversion, "_has_work",
                        lambda converter, found: ran.append(converter) or real(converter, found))
    conversion._convert_tree(_plain)
    skipped = [c for c in ran if not real(c, census.take(parser.parse_function(_plain)[0]))]
    assert {c.__name__.rpartition(".")[2] for c in skipped} >= {
        "loops", "break_statements", "try_statements", "formatted_strings", "comprehensions"}


def _plain_names(tree):
    """The names ``naming.Namer.for_tree`` collected, walking the tree itself."""
    used = set()
    for node in gast.walk(tree):
        if isinstance(node, gast.Name):
            used.add(node.id)
        elif isinstance(node, (gast.FunctionDef, gast.ClassDef, gast.AsyncFunctionDef)):
            used.add(node.name)
        elif isinstance(node, (gast.Global, gast.Nonlocal)):
            used.update(node.names)
        elif isinstance(node, gast.alias):
            used.add((node.asname or node.name).split(".")[0])
    return used


@pytest.mark.parametrize("fn", PROGRAMS)
def test_census_is_the_plain_walk(fn):
    tree, _ = parser.parse_function(fn)
    found = census.take(tree)
    assert found.names == _plain_names(tree)
    assert found.kinds == {type(n) for n in gast.walk(tree)}
    assert found.ids == {n.id for n in gast.walk(tree) if isinstance(n, gast.Name)}


def _uses_tg(x):
    tg = 1
    return x + tg


def _generator(x):
    yield x


@pytest.mark.parametrize("fn, message", [(_uses_tg, "reserved"), (_generator, "yield")])
def test_refusals_still_found(fn, message):
    with pytest.raises(ConversionError, match=message):
        conversion._convert_tree(fn)


@pytest.mark.parametrize("fn", [_decorated_and_handlers, _every_trigger, _no_loops, _plain])
def test_line_map_is_the_filled_one(fn):
    tree = conversion._convert_tree(fn)
    source, parsed = codegen.to_source_and_ast(tree)
    filled = clone.copy(tree)
    _plain_fill_from_parents(filled)
    line_map = conversion._line_map(tree, parsed)
    assert line_map == _plain_line_map(filled, parsed)
    # every line is named (decorators and except clauses too) but a bare ``else:`` or
    # ``finally:``, which starts with no node
    lines = source.splitlines()
    bare = {"else:", "finally:"}
    assert sorted(line_map) == [n for n, text in enumerate(lines, 1) if text.strip() not in bare]
    if fn is _decorated_and_handlers:
        assert any(lines[n - 1].strip().startswith("@") for n in line_map)
        assert sum(lines[n - 1].strip().startswith("except") for n in line_map) == 2


@pytest.mark.parametrize("strict", [False, True])
def test_skipping_converters_matches_eager(strict):
    g = to_graph(_no_loops, strict=strict)
    for x, flag in [(torch.tensor([1.0, 2.0]), True), (torch.tensor([-3.0, 1.0]), True),
                    (torch.tensor([1.0]), False)]:
        assert_same(g(x, flag), _no_loops(x, flag))
    g = to_graph(_plain, strict=strict)
    assert_same(g(torch.arange(3.0), 2), _plain(torch.arange(3.0), 2))


# ------------------------------------------- code generation reading the gast tree itself
UNPARSED = '''
def f(a, b: int = 2, /, c=3, *args: "x", d, e: float = 1.0, **kw: dict) -> int:
    if a:
        x = 1
    elif b and c or not d:
        x = 2
    elif (y := c):
        x = 3
    else:
        if d:
            x = 4
    (z): int = 5
    w: int = 6
    kw.update(a=1)
    w.add_(tg.call(args.append, 1) if a else a.pop())
    v = 1 .real + 1.5 .real + (-1) .real + "s".upper()
    try:
        pass
    except (ValueError, TypeError) as err:
        raise RuntimeError(f"{err!r:>{width}} {a and b}") from err
    except Exception:
        raise
    finally:
        del v
    lam = lambda q, /, r=1, *s, t, u=2, **k: (q, r, s, t, u, k)
    comp = {k: v for k, v in kw.items() if k or v}, [i for i in args if i and not i]
    s = f"{x}" + f"plain" + "%d" % a
    with open(a) as h, open(b):
        for i, (j, *k) in enumerate(args):
            while i and j or k:
                break
            else:
                continue
    class C(Base, metaclass=M):
        attr: int = 1
    return a if b else -c, a < b <= c, a @ b, a[1:2], x.y.z, *args, {**kw}
'''


def _plain_source(tree):
    """What codegen gave before it read gast trees: astunparse of gast_to_ast's tree."""
    import ast
    import astunparse
    from transpiler.pyct import gast_bridge
    return codegen._without_blank_lines(astunparse.unparse(ast.Module(
        body=[gast_bridge.gast_to_ast(tree)], type_ignores=[])).strip("\n") + "\n")


@pytest.mark.parametrize("fn", PROGRAMS)
def test_generated_source_is_astunparse_of_the_ast(fn):
    try:
        tree = conversion._convert_tree(fn)
    except ConversionError:     # a refused program: nothing generated
        return
    assert codegen.to_source(tree) == _plain_source(tree)


def test_every_construct_unparses_as_from_the_ast():
    tree = gast.parse(UNPARSED).body[0]
    source = codegen.to_source(tree)
    assert source == _plain_source(tree)
    assert "elif" in source and "(z): int" in source and "1 .real" in source


def test_text_astunparse_gets_wrong_is_the_standard_library_s():
    """astunparse writes ``a[1:2, ::3]`` as ``a[(1:2, ::3)]``, which does not parse: then
    the text is ``ast.unparse``'s, as before."""
    import ast
    from transpiler.pyct import gast_bridge
    tree = gast.parse("def f(a):\n    return a[1:2, ::3] and a\n").body[0]
    source = codegen.to_source(tree)
    assert source == codegen._without_blank_lines(ast.unparse(ast.Module(
        body=[gast_bridge.gast_to_ast(tree)], type_ignores=[])).strip("\n") + "\n")
    assert "a[1:2, ::3]" in source


# ----------------------------------------------- activity's expression walk, on a stack
def _plain_expr(self, node):
    """Effects.expr as it recursed (the reference its stack walk must match)."""
    from transpiler.analysis import activity
    from transpiler.pyct import traversal
    if node is None:
        return
    if isinstance(node, gast.Name):
        (self.reads if isinstance(node.ctx, gast.Load) else self.binds).add(node.id)
    elif isinstance(node, (gast.Lambda,) + activity._COMPS):
        if not self.bindings_only:
            self.reads |= activity.free_names(node)
    elif isinstance(node, gast.NamedExpr):
        self.expr(node.value)
        self.target(node.target)
    else:
        if isinstance(node, gast.Call) and activity._mutated_receiver(node) is not None:
            self.mutated.add(activity._mutated_receiver(node))
        for child in traversal.iter_child_nodes(node):
            self.expr(child)


def _activity(tree):
    from transpiler.analysis import activity
    from transpiler.pyct import anno
    scopes = [activity.analyze(fn) for fn in gast.walk(tree) if isinstance(fn, gast.FunctionDef)]
    keys = (anno.Key.READ, anno.Key.MODIFIED, anno.Key.COMPOSITES)
    return scopes, [(type(n).__name__, [anno.getanno(n, k) for k in keys])
                    for n in gast.walk(tree)], \
        [activity.block_bound(fn.body) for fn in gast.walk(tree)
         if isinstance(fn, gast.FunctionDef)]


@pytest.mark.parametrize("fn", PROGRAMS + ["UNPARSED"])
def test_activity_stack_walk_is_the_recursion(fn, monkeypatch):
    from transpiler.analysis import activity
    def tree():
        if fn == "UNPARSED":
            return gast.parse(UNPARSED).body[0]
        return parser.parse_function(fn)[0]
    mine = _activity(tree())
    monkeypatch.setattr(activity.Effects, "expr", _plain_expr)
    assert _activity(tree()) == mine
    assert any(reads for _, (reads, _, _) in mine[1] if reads)


# ------------------------------------ the analyses sharing each statement's effects (memo)
def _analysed(fn, share):
    from transpiler.analysis import activity, liveness, reaching_defs, state
    from transpiler.pyct import anno
    tree, _ = parser.parse_function(fn)
    for fn_node in [n for n in gast.walk(tree) if isinstance(n, gast.FunctionDef)]:
        memo = {} if share else None
        activity.analyze(fn_node, memo)
        liveness.analyze(fn_node, memo if share else None)
        state.analyze(fn_node)
        reaching_defs.analyze(fn_node, memo if share else None)
    keys = [k for k in anno.Key if k not in (anno.Key.ORIGIN, anno.Key.EXTRA_LOOP_TEST)]
    return [(type(n).__name__, [anno.getanno(n, k) for k in keys]) for n in gast.walk(tree)]


@pytest.mark.parametrize("fn", PROGRAMS)
def test_shared_effects_give_the_same_analyses(fn, monkeypatch):
    """Each statement's effects found once (``memo``) annotate as finding them again in
    every analysis did (the memo dropped: each call finds them anew)."""
    from transpiler.analysis import activity
    shared = _analysed(fn, True)
    real = activity.header_effects
    monkeypatch.setattr(activity, "header_effects",
                        lambda s, bindings_only=False, memo=None: real(s, bindings_only))
    assert _analysed(fn, False) == shared
