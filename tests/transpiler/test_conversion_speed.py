"""The conversion's speed mechanisms give what the plain ones gave (issue 13, first call):
pyct.clone (deepcopy's result), pyct.traversal (ast's walks and NodeTransformer), and the
on-disk conversion cache (transpiler.conversion_cache): a hit is the same function, an
edited source or a damaged or foreign entry is a miss, an unsafe directory is not used;
pyct.gast_bridge (gast's trees), pyct.source_block (inspect's source, a file edited on disk
read again), and the statement-only converters (the source they gave entering everything)."""
import ast
import copy
import importlib.util
import os
import stat
import sys
import textwrap
import warnings

import gast
import pytest
import torch

from runtime.options import options
from tests.e2e.e2e_helpers import assert_same
from transpiler import api, conversion, to_graph
from transpiler.pyct import anno, clone, codegen, origin, parser, traversal

SAMPLE = '''
def f(x, n, d):
    """doc"""
    total = 0
    for i in range(n):
        if x.sum() > i:
            x = x * 2
        elif d.get("k", 0):
            x = x - 1
        else:
            total += i
    while x.sum() < 100 and n:
        x = x + 1
        n -= 1
    d["k"] = [v for v in range(3) if v] + [lambda: x, (yield_ := 1)]
    return x, total, f"{n:3d}", d
'''


def _tree():
    node = gast.parse(textwrap.dedent(SAMPLE)).body[0]
    origin.annotate(node, "sample.py", 10, 4)
    anno.setanno(node.body[1], anno.Key.READ, frozenset({"x", "n"}))
    anno.setanno(node.body[2], anno.Key.EXTRA_LOOP_TEST, [node.body[2].iter])  # shared node
    return node


def _annos(tree):
    return [(type(n).__name__, sorted((k.name, repr(v)) for k, v in
                                      getattr(n, anno._ATTR, {}).items()
                                      if k is not anno.Key.EXTRA_LOOP_TEST))
            for n in ast.walk(tree)]


def test_clone_is_deepcopy():
    tree = _tree()
    mine, theirs = clone.copy(tree), copy.deepcopy(tree)
    assert ast.dump(mine, include_attributes=True) == ast.dump(theirs, include_attributes=True)
    assert _annos(mine) == _annos(theirs) == _annos(tree)
    originals = {id(n) for n in ast.walk(tree)}
    assert not originals & {id(n) for n in ast.walk(mine)}          # a new node per node
    loop = mine.body[2]       # the annotation's node is the copied tree's node, as deepcopy's
    assert anno.getanno(loop, anno.Key.EXTRA_LOOP_TEST)[0] is loop.iter
    assert anno.getanno(tree.body[2], anno.Key.EXTRA_LOOP_TEST)[0] is tree.body[2].iter
    shared = gast.Name(id="s", ctx=gast.Load(), annotation=None, type_comment=None)
    pair = clone.copy([shared, shared])
    assert pair[0] is pair[1] and pair[0] is not shared


def test_walk_and_children_are_ast_s():
    tree = _tree()
    assert [id(n) for n in traversal.walk(tree)] == [id(n) for n in ast.walk(tree)]
    for node in ast.walk(tree):
        assert [id(c) for c in traversal.iter_child_nodes(node)] == \
            [id(c) for c in ast.iter_child_nodes(node)]


class _Edits:
    """Deletes ``pass``-like expression statements, splices two statements for an
    AugAssign, renames names, replaces constants: every kind of visitor result."""

    def visit_Expr(self, node):
        return None if isinstance(node.value, gast.Constant) else self.generic_visit(node)

    def visit_AugAssign(self, node):
        node = self.generic_visit(node)
        return [node, gast.Expr(value=gast.Name(id="after", ctx=gast.Load(), annotation=None,
                                                type_comment=None))]

    def visit_Name(self, node):
        node.id = node.id.upper()
        return self.generic_visit(node)

    def visit_Constant(self, node):
        return gast.Constant(value=repr(node.value), kind=None) \
            if isinstance(node.value, int) else node


class _Plain(_Edits, gast.NodeTransformer):
    pass


class _Fast(_Edits, traversal.Transformer):
    pass


def test_transformer_is_node_transformer():
    a, b = _tree(), _tree()
    assert ast.dump(_Fast().visit(a)) == ast.dump(_Plain().visit(b))
    # no visit_ methods: nothing changes, the same nodes stay
    c = _tree()
    before = [id(n) for n in ast.walk(c)]
    traversal.Transformer().visit(c)
    assert [id(n) for n in ast.walk(c)] == before


# --------------------------------------------------------------------------- disk cache
MODULE = '''
import torch

SCALE = 3.0

def step(x, k):
    if x.sum() > 0:
        y = x * SCALE + k
    else:
        y = x - k
    for i in range(k):
        y = y + i
    return y, k + 1

def fails(x):
    if x.sum() > 0:
        y = x.nonexistent_attribute
    else:
        y = x
    return y
'''


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fresh(tmp_path):
    """A cache root, and conversions forgotten in memory (as in a new process)."""
    root = tmp_path / "cache"

    def forget():
        api._CONVERTED.clear()
        conversion._cache.clear()
    forget()
    with options.override(cache_dir=str(root), compiler=False):   # (no kernel builds)
        yield root, forget
    forget()


def _entries(root):
    d = root / "converted"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _check(fn, strict):
    g = to_graph(fn, strict=strict)
    for x, k in ((torch.tensor([1.0, 2.0]), 2), (torch.tensor([-5.0, 1.0]), 3)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_same(g(x, k), fn(x, k))


@pytest.mark.parametrize("strict", [False, True])
def test_disk_hit_is_the_same_function(tmp_path, fresh, strict):
    root, forget = fresh
    (tmp_path / "m1.py").write_text(MODULE)
    mod = _load(tmp_path / "m1.py", "m1")
    _check(mod.step, strict)
    made = _entries(root)
    assert len(made) == 1 and made[0].endswith(".conv")
    source = api.convert_function(mod.step).__tograph_source__
    line_map = api.convert_function(mod.step).__tograph_line_map__
    forget()
    loaded = api.convert_function(mod.step)          # from disk this time
    assert loaded.__tograph_source__ == source and loaded.__tograph_line_map__ == line_map
    assert _entries(root) == made
    forget()
    _check(mod.step, strict)


def test_disk_hit_keeps_user_lines_in_errors(tmp_path, fresh):
    root, forget = fresh
    (tmp_path / "m2.py").write_text(MODULE)
    mod = _load(tmp_path / "m2.py", "m2")
    for _ in range(2):                    # converted, then loaded from disk
        forget()
        with pytest.raises(AttributeError) as info, warnings.catch_warnings():
            warnings.simplefilter("ignore")          # (the FallbackWarning: it runs eagerly)
            to_graph(mod.fails)(torch.ones(2))
        frames = [(f.filename, f.lineno) for f in
                  __import__("traceback").extract_tb(info.value.__traceback__)]
        assert (str(tmp_path / "m2.py"), MODULE.splitlines().index(
            "        y = x.nonexistent_attribute") + 1) in frames
    assert len(_entries(root)) == 1


def test_edited_source_is_a_new_conversion(tmp_path, fresh):
    root, forget = fresh
    path = tmp_path / "m3.py"
    path.write_text(MODULE)
    mod = _load(path, "m3")
    _check(mod.step, False)
    path.write_text(MODULE.replace("x * SCALE + k", "x * SCALE - k"))
    os.utime(path, (1, 1))                # (linecache notices the change by size/mtime)
    forget()
    mod = _load(path, "m3")
    x = torch.tensor([1.0, 2.0])
    assert_same(to_graph(mod.step)(x, 2), mod.step(x, 2))
    assert torch.equal(to_graph(mod.step)(x, 2)[0], x * 3.0 - 2 + 1)
    assert len(_entries(root)) == 2


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign"])
def test_damaged_or_foreign_entry_is_a_miss(tmp_path, fresh, damage):
    root, forget = fresh
    (tmp_path / "m4.py").write_text(MODULE)
    mod = _load(tmp_path / "m4.py", "m4")
    _check(mod.step, True)
    (entry,) = (root / "converted").iterdir()
    data = entry.read_bytes()
    if damage == "flip":
        data = data[:40] + bytes([data[40] ^ 0xFF]) + data[41:]
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:                 # another function's intact entry under this key
        other = tmp_path / "m5.py"
        other.write_text(MODULE.replace("y = x - k", "y = x - 2 * k"))
        mod5 = _load(other, "m5")
        forget()
        to_graph(mod5.step)(torch.ones(2), 1)
        data = next(p for p in (root / "converted").iterdir() if p != entry).read_bytes()
    entry.write_bytes(data)
    forget()
    _check(mod.step, True)
    x = torch.tensor([-5.0, 1.0])
    assert torch.equal(to_graph(mod.step)(x, 1)[0], x - 1)


def test_unsafe_or_no_directory_is_not_used(tmp_path, fresh):
    root, forget = fresh
    (tmp_path / "m6.py").write_text(MODULE)
    mod = _load(tmp_path / "m6.py", "m6")
    shared = tmp_path / "shared"
    (shared / "converted").mkdir(parents=True)
    os.chmod(shared / "converted", 0o777)
    with options.override(cache_dir=str(shared)):
        _check(mod.step, True)
    assert not os.listdir(shared / "converted")
    forget()
    with options.override(cache_dir=""):
        _check(mod.step, True)
    assert not os.path.exists(root / "converted") or not _entries(root)
    assert stat.S_IMODE(os.stat(shared / "converted").st_mode) == 0o777


def test_parsed_source_unchanged_by_fast_walks():
    """The generated source of a function using every converter (the golden tests hold
    the text; this checks the walks kept origins on every generated line)."""
    (node, _) = parser.parse_function(test_parsed_source_unchanged_by_fast_walks)
    assert all(origin.of(n) is not None for n in traversal.walk(node)
               if getattr(n, "lineno", None) is not None)
    converted = conversion.convert(_sample_fn, {"tg": object()})
    assert converted.line_map and all(f == __file__ for f, _ in converted.line_map.values())


def _sample_fn(x, n):
    while n > 0 and x:
        if x > n:
            x -= 1
        n -= 1
    return [x for _ in range(n)], f"{x}"


# ------------------------------------------------------------- parsing and code generation
EVERY_SYNTAX = '''
import os, sys as system
from typing import (Any,
    Optional)
x: int = 1
y: "str"
@decorator(1)
@other
async def f(a, /, b: int = 2, *args, c, d=3, **kw) -> Optional[int]:  # type: ignore
    global g
    async with ctx() as (p, q), other():
        async for i in aiter():
            await i
    return [v async for v in w if v]
def h(self):
    nonlocal_free = 1
    def inner():
        nonlocal nonlocal_free
        nonlocal_free += 1
    try:
        pass
    except (ValueError, TypeError) as e:
        raise RuntimeError("x") from e
    except Exception:
        raise
    else:
        del self.a, self.b[1:2, ::3]
    finally:
        assert x, "message"
    while (n := len(a)) > 10:
        break
    else:
        continue_ = 1
    for i, (j, *k) in enumerate(z):
        continue
    with open(p) as fh: pass
    lam = lambda q, *r, s=1, **t: (q, r, s, t)
    comp = {k: v for k, v in d.items() if k}, {s for s in t}, (g for g in h), [l for l in m]
    s = f"{x!r:>{width}} {y=}" + b"bytes" + ...
    return a if b else -c, not d, a < b <= c, a @ b, a[1:2], x.y.z, *args, {**kw}
class C(Base, metaclass=Meta):
    """doc"""
    attr = 1
match command:
    case [1, 2, *rest]: pass
    case {"k": v, **others}: pass
    case Point(x=0, y=yy) | Other() as o if yy: pass
    case _: pass
try:
    pass
except* ValueError as eg:
    pass
'''


def _same_tree(a, b, path="tree"):
    """Same classes, the same ``__dict__`` keys (fields and positions) and equal leaves."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_tree(x, y, f"{path}[{i}]")
    elif isinstance(a, ast.AST):
        assert a.__dict__.keys() == b.__dict__.keys(), f"{path}: {a.__dict__.keys()} != {b.__dict__.keys()}"
        for k in a.__dict__:
            _same_tree(a.__dict__[k], b.__dict__[k], f"{path}.{k}")
    else:
        assert a == b or a != a, f"{path}: {a!r} != {b!r}"


@pytest.mark.parametrize("source", [EVERY_SYNTAX, "__file__", "conversion"],
                         ids=["every_syntax", "this_file", "conversion_py"])
def test_gast_bridge_gives_gasts_trees(source):
    from transpiler.pyct import gast_bridge
    if source == "__file__":
        source = open(__file__).read()
    elif source == "conversion":
        source = open(conversion.__file__).read()
    tree = ast.parse(source)
    mine, theirs = gast_bridge.ast_to_gast(tree), gast.ast_to_gast(tree)
    _same_tree(mine, theirs)
    _same_tree(gast_bridge.gast_to_ast(theirs), gast.gast_to_ast(theirs))
    # and what the converters make: nodes without positions, Param names
    fn = conversion._convert_tree(_sample_fn)
    _same_tree(gast_bridge.gast_to_ast(fn), gast.gast_to_ast(fn))
    assert gast_bridge.FAST == ((3, 10) <= sys.version_info[:2] <= (3, 11))


BLOCKS = '''
import functools


@functools.lru_cache(maxsize=None)
def decorated(a):
    return a   # trailing comment


    # a comment after a blank line, less indented than the body
def signature_over_lines(
    a,
    b=(1,
2),
) -> int:
    s = """
text at column 0
"""
    t = a + \\
b
    return len(s) + t


class Holder:
    def method(self, x): return x + 1
    def nested(self):
        def inner(y):
            return y
        return inner
    value = [
1]


def last(x):
    if x:
        return 1
    return 2'''


def test_source_block_matches_inspect(tmp_path):
    """The ``def`` source found by indentation and a parse is the one inspect finds (its
    trailing blank and comment lines aside), for decorators, signatures over several lines, strings
    and continued lines at column 0, one-line and nested defs, the file's last line."""
    import inspect
    from transpiler.pyct import source_block
    path = tmp_path / "blocks.py"
    path.write_text(BLOCKS)
    mod = _load(path, "tograph_blocks")
    fns = [mod.decorated.__wrapped__, mod.signature_over_lines, mod.Holder.method,
           mod.Holder.nested, mod.Holder().nested(), mod.last]
    for fn in fns:
        lines, first, tree = source_block.find(fn, str(path))
        expected, expected_first = inspect.getsourcelines(fn.__code__)
        assert first == expected_first, fn.__qualname__
        def code(block):
            return [ln for ln in block if ln.strip() and not ln.strip().startswith("#")]
        assert code(lines) == code(expected), fn.__qualname__
        assert lines[-1] == code(expected)[-1], fn.__qualname__
        assert tree.body[0].name == fn.__code__.co_name
    assert mod.signature_over_lines(1, 2) == len("\ntext at column 0\n") + 3
    assert source_block.find(lambda v: v, __file__) is None


def test_edited_file_is_read_again(tmp_path, fresh):
    """Source found through linecache: a file edited on disk (a module reloaded) converts
    from its new text, as inspect's did."""
    path = tmp_path / "edited.py"
    path.write_text("def g(x):\n    if x > 0:\n        return x * 2\n    return -x\n")
    first = _load(path, "tograph_edited")
    assert "x * 2" in conversion.to_source(first.g)
    path.write_text("def g(x):\n    if x > 0:\n        return x * 3\n    return -x\n")
    os.utime(path, (1, 1))          # another mtime, whatever the clock's resolution
    second = _load(path, "tograph_edited")
    assert "x * 3" in conversion.to_source(second.g)
    for strict in (False, True):
        g = to_graph(second.g, strict=strict)
        for v in (torch.tensor(2.0), torch.tensor(-1.0)):
            assert_same(g(v), second.g(v))


def _with_del(x, n):
    tmp = x + 1
    if x.sum() > n:
        y = tmp * 2
        del tmp
    else:
        y = x
    return y


def _statement_converters():
    from transpiler.converters import (asserts, break_statements, continue_statements,
                                       control_flow, functions, loops, return_statements,
                                       try_statements, walrus_tests)
    return (asserts.AssertTransformer, break_statements.BreakTransformer,
            continue_statements.ContinueTransformer, control_flow.IfTransformer,
            functions.DeclarationHoister, loops.LoopTransformer,
            return_statements.ReturnTransformer, try_statements.TryTransformer,
            walrus_tests.WalrusTestTransformer)


def _jumps(x, xs, n):
    total = 0
    for v in xs:
        if v > n:
            break
        if v < 0:
            continue
        try:
            total += (lambda w: w * 2)(v) if v else -1
        finally:
            assert total == total, "nan"
    else:
        total = -total
    while (m := n - 1) > 0 and x.sum() > 0:
        n = m
        if n == 3:
            return x, total
    return [x for _ in range(n)], total and n or None


@pytest.mark.parametrize("fn", [_jumps, _sample_fn, _with_del, _check, _load,
                                test_source_block_matches_inspect])
def test_statement_converters_skip_expressions_with_the_same_result(fn, monkeypatch):
    """Converters marked ``statements_only`` give the source they gave entering every
    expression; block_bound's bindings-only effects and the skipped ``del`` check too."""
    def source():
        traversal._METHODS.clear()
        try:
            return conversion.to_source(fn)
        except Exception as e:      # noqa: BLE001 - the same refusal either way
            return repr(e)
    fast = source()
    from transpiler.analysis import activity
    from transpiler.converters import base
    for cls in _statement_converters():
        assert cls.statements_only
        monkeypatch.setattr(cls, "statements_only", False)
    real = activity.header_effects
    monkeypatch.setattr(activity, "header_effects",
                        lambda s, bindings_only=False, memo=None: real(s, memo=memo))
    monkeypatch.setattr(base, "holds_del", lambda tree: True)
    try:
        assert source() == fast
    finally:
        traversal._METHODS.clear()


@pytest.mark.parametrize("strict", [False, True])
def test_del_of_state_in_a_branch_still_refused(strict):
    from transpiler import ConversionError, FallbackWarning
    x = torch.tensor([1.0, 2.0])
    if strict:
        with pytest.raises(ConversionError, match="del tmp"):
            to_graph(_with_del, strict=True)(x, 0)
    else:
        with pytest.warns(FallbackWarning, match="del tmp"):
            got = to_graph(_with_del)(x, 0)
        assert_same(got, _with_del(x, 0))


def _early_returns(x, n, d):
    """Nested early returns (each guards the rest of its block with ``if not do_return``),
    an ``elif`` chain and a loop: the shapes whose bodies and tests templates move."""
    if n is None:
        return x
    if d.get("skip"):
        return -x
    y = x
    for i in range(n):
        if y.sum() > i:
            y = y * 2
        elif i == 2:
            return y * i
        else:
            y = y - 1
    if y.sum() < 0 and n > 1:
        return y + 1
    return y


def test_owned_placeholder_is_moved_once():
    """A node the caller gives up (``_owned``) goes in as it is, once; a second use and a
    node not given up are copies (the template's caller keeps its own)."""
    from transpiler.pyct import templates
    test = gast.Name(id="t", ctx=gast.Load(), annotation=None, type_comment=None)
    kept = templates.replace_as_expression("f(test, other)", None, ("test",), test=test,
                                           other=test)
    assert kept.args[0] is test and kept.args[1] is not test
    assert ast.dump(kept.args[1]) == ast.dump(test)
    (assign,) = templates.replace("target = value", None, ("target",), target=test, value=1)
    assert assign.targets[0] is test and isinstance(test.ctx, gast.Store)
    copied = templates.replace_as_expression("f(test)", None, test=test)
    assert copied.args[0] is not test


@pytest.mark.parametrize("fn", [_early_returns, _jumps, _sample_fn, _with_del])
def test_moved_placeholders_give_the_copied_source(fn, monkeypatch):
    """Moving owned tests, calls and guarded rests into templates (instead of copying them)
    gives the source and line map that copying gave."""
    from transpiler.pyct import codegen, templates
    def converted():
        try:
            tree = conversion._convert_tree(fn)
        except Exception as e:      # noqa: BLE001 - the same refusal either way
            return repr(e)
        source, parsed = codegen.to_source_and_ast(tree)
        return source, conversion._line_map(tree, parsed)
    moved = converted()
    real = templates.replace
    monkeypatch.setattr(templates, "replace",
                        lambda template, origin=None, _owned=(), **r: real(template, origin, **r))
    assert converted() == moved


def test_factory_positions_are_fix_missing_locations(monkeypatch):
    """The loader locates only its factory's nodes (the parsed source has its positions):
    the code it compiles is the code ``ast.fix_missing_locations`` gave, positions too."""
    from transpiler.pyct import codegen, loader
    def fingerprint(code):
        return (code.co_code, code.co_linetable, code.co_firstlineno, list(code.co_positions()),
                [fingerprint(c) for c in code.co_consts if hasattr(c, "co_code")])
    def compiled(fn, outer):
        source, parsed = codegen.to_source_and_ast(conversion._convert_tree(fn))
        return fingerprint(loader.compile_function(source, fn.__name__, outer, "<x>", parsed))
    cases = [(_early_returns, ["tg"]), (_sample_fn, ["tg", "_sample_fn"]), (_jumps, [])]
    fast = [compiled(fn, outer) for fn, outer in cases]
    monkeypatch.setattr(loader, "_locate_factory",
                        lambda factory, located: ast.fix_missing_locations(factory))
    assert [compiled(fn, outer) for fn, outer in cases] == fast


@pytest.mark.parametrize("strict", [False, True])
def test_early_returns_match_eager(strict):
    """The moved-template conversion runs as eager does (tensor and Python paths, two calls)."""
    g = to_graph(_early_returns, strict=strict)
    for x, n, d in [(torch.tensor([1.0, -2.0]), 3, {}), (torch.tensor([-5.0, 1.0]), 4, {}),
                    (torch.tensor([0.5, 0.5]), None, {}), (torch.tensor([2.0]), 2, {"skip": 1})]:
        assert_same(g(x, n, d), _early_returns(x, n, d))


# ------------------------------------- origins, the line map and tg calls built directly
def _plain_annotate(tree, filename, line_offset, col_offset):
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) is not None:
            anno.setanno(node, anno.Key.ORIGIN, origin.Location(
                filename, node.lineno + line_offset, node.col_offset + col_offset))


def _plain_fill_from_parents(tree):
    stack = [(tree, None)]
    while stack:
        node, loc = stack.pop()
        if anno.hasanno(node, anno.Key.ORIGIN):
            loc = origin.of(node) or loc
        elif loc is not None:
            anno.setanno(node, anno.Key.ORIGIN, loc)
        stack.extend((child, loc) for child in ast.iter_child_nodes(node))


def _plain_line_map(tree, parsed):
    def nodes(node, base):
        out, stack = [], [node]
        while stack:
            node = stack.pop()
            out.append(node)
            children = []
            for field in node._fields:
                if field in ("annotation", "returns", "type_comment", "type_params") or \
                        (type(node).__name__ == "ExceptHandler" and field == "name"):
                    continue
                value = getattr(node, field, None)
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, base) and type(child).__name__ != "arguments":
                        children.append(child)
            stack.extend(reversed(children))
        return out
    out = {}
    for g, c in zip(nodes(parsed, ast.AST),
                    nodes(gast.Module(body=[tree], type_ignores=[]), gast.AST)):
        if type(g).__name__ != type(c).__name__:
            break
        loc = origin.of(c)
        if loc is not None and getattr(g, "lineno", None) is not None:
            out.setdefault(g.lineno, (loc.filename, loc.lineno))
    return out


def _origins(tree):
    return [(type(n).__name__, origin.of(n)) for n in ast.walk(tree)]


def _without_origins(tree):
    for n in ast.walk(tree):
        anno.delanno(n, anno.Key.ORIGIN)
    return tree


ORIGIN_PROGRAMS = [_jumps, _sample_fn, _with_del, _check, _load, _early_returns,
                   test_source_block_matches_inspect]


@pytest.mark.parametrize("fn", ORIGIN_PROGRAMS)
def test_origin_walks_and_line_map_are_the_plain_ones(fn):
    """origin.annotate (direct annotation writes, one list per walk) gives what ast's walk
    gave; conversion._line_map (statements, except clauses and decorators paired, their
    origins inherited, nothing written into the tree) gives the map that filling every
    node's origin from its parents, then pairing every node, gave."""
    parsed, _ = parser.parse_function(fn)
    mine = _origins(parsed)
    assert any(loc is not None for _, loc in mine)
    theirs = _without_origins(clone.copy(parsed))
    filename, line, col = next(loc for _, loc in mine if loc is not None)
    first = next(n for n in ast.walk(parsed) if origin.of(n) is not None)
    _plain_annotate(theirs, filename, line - first.lineno, col - first.col_offset)
    assert _origins(theirs) == mine

    try:
        tree = conversion._convert_tree(fn)
    except Exception:  # noqa: BLE001 - a refused program: nothing generated to compare
        return
    unfilled = _origins(tree)
    source, parsed_source = codegen.to_source_and_ast(tree)
    line_map = conversion._line_map(tree, parsed_source)
    assert _origins(tree) == unfilled           # (the tree is left as it was)
    filled = clone.copy(tree)
    _plain_fill_from_parents(filled)
    assert line_map and line_map == _plain_line_map(filled, parsed_source)
    assert max(line_map) <= len(source.splitlines())


@pytest.mark.parametrize("op", ["call", "and_", "ifexp", "fstring"])
@pytest.mark.parametrize("where", ["node", "location", "none"])
def test_tg_call_gives_the_template_s_nodes(op, where):
    from transpiler.converters import base
    from transpiler.pyct import templates
    source = gast.parse("x + 1").body[0]
    if where != "none":
        origin.annotate(source, "user.py", 41, 4)
    at = origin.of(source) if where == "location" else source
    args = [gast.Name(id="a", ctx=gast.Load(), annotation=None, type_comment=None)]
    keywords = [gast.keyword(arg="k", value=gast.Constant(value=1, kind=None))]
    expected = templates.replace_as_expression(f"tg.{op}()", at)
    expected.args, expected.keywords = list(args), list(keywords)
    got = base.tg_call(op, args, at, keywords)
    assert gast.dump(got, include_attributes=True) == \
        gast.dump(expected, include_attributes=True)
    assert _origins(got) == _origins(expected)
    assert (origin.of(got) is not None) == (where != "none")
    assert got.args[0] is args[0] and got.keywords[0] is keywords[0]   # not copied
    assert got.func.ctx is not got.func.value.ctx


def _plain_inherit(nodes, source):
    loc = source if isinstance(source, origin.Location) else origin.of(source)
    if loc is None:
        return
    stack = list(nodes) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        if anno.hasanno(node, anno.Key.ORIGIN):
            continue
        anno.setanno(node, anno.Key.ORIGIN, loc)
        stack.extend(ast.iter_child_nodes(node))


@pytest.mark.parametrize("fn", ORIGIN_PROGRAMS)
def test_inherit_is_the_plain_one(fn):
    """origin.inherit: nodes without an origin take the source's, nodes with one are not
    entered (their unannotated children keep none), as ast's walk gave."""
    parsed, _ = parser.parse_function(fn)
    for i, node in enumerate(ast.walk(parsed)):
        if i % 3:
            anno.delanno(node, anno.Key.ORIGIN)     # a mix, as a template around user code
    where = origin.Location("template.py", 7, 0)
    for source in (where, gast.Pass()):              # (a source without an origin: none)
        mine, theirs = clone.copy(parsed.body), clone.copy(parsed.body)
        origin.inherit(mine, source)
        _plain_inherit(theirs, source)
        assert [_origins(s) for s in mine] == [_origins(s) for s in theirs]
        given = sum(loc == where for s in mine for _, loc in _origins(s))
        assert given if source is where else not given


def _expressions(x, y, n):
    a = x if n > 0 else y
    b = (x if n else y) and (y if n < 1 < 2 else x) or (n if x is True else -n)
    c = n and (x if y else n) or y
    d = [v if v and not n else -v for v in range(n)]
    f = lambda q: q if 0 < q < n <= (x if y else 3) else (not q)   # noqa: E731
    while (x if n else y) and n:
        n = n - 1 if n > 1 and n is not False else 0
    return a, b, c, d, f(n), (x if y else n) if (n or x) else (y and x or n)


@pytest.mark.parametrize("fn", [_expressions, _jumps, _sample_fn, _early_returns])
def test_one_walk_for_conditional_expressions_and_logical(fn, monkeypatch):
    """``conversion._Expressions`` (one walk) gives the source the two passes gave."""
    from transpiler.converters import conditional_expressions, control_flow, logical, loops
    merged = conversion.to_source(fn)
    assert "tg.ifexp(" in merged or fn is not _expressions
    monkeypatch.setattr(conversion, "AFTER_ANALYSIS",
                        (control_flow, loops, conditional_expressions, logical))
    assert conversion.to_source(fn) == merged


def _tensor_expressions(x, y, n):
    a = x if n > 0 else y
    b = (x if n else y) * 2 if (x.sum() > 0) and (y.sum() < 1) or n > 2 else -x
    c = x * 2 if 0 < n < 3 else (y if x.sum() > 0 else x)
    while (x.sum() > 0 if n else y.sum() > 0) and n > 0:
        x = x - 1 if n > 1 and n is not False else x * 0.5
        n -= 1
    return a, b, c, x, n


@pytest.mark.parametrize("strict", [False, True])
def test_expressions_match_eager(strict):
    assert "tg.ifexp(" in conversion.to_source(_tensor_expressions)
    g = to_graph(_tensor_expressions, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x, y, n in [([2.0, 1.0], [-1.0, 0.0], 3), ([0.0, -1.0], [1.5, 2.0], 1),
                        ([3.0, 0.5], [0.25, 0.0], 2), ([-1.0, 0.0], [2.0, 2.0], 0)]:
            x, y = torch.tensor(x), torch.tensor(y)
            assert_same(g(x, y, n), _tensor_expressions(x, y, n))


@pytest.mark.parametrize("body", [
    "x = 1", "del x", "if a:\n    pass\nelse:\n    del x", "while a:\n    pass\nelse:\n    del x",
    "try:\n    pass\nexcept E:\n    del x", "try:\n    pass\nfinally:\n    del x",
    "try:\n    pass\nexcept E:\n    pass\nelse:\n    del x[0]",
    "with m:\n    for i in r:\n        del x.a", "def g():\n    del x",
    "class C:\n    del x", "match a:\n    case 1:\n        del x",
    "f = lambda: [y for y in x if y]\ng = x if a else y"])
def test_holds_del_walks_statements_only_with_the_same_answer(body):
    from transpiler.converters import base
    tree = gast.parse("def f(x, a):\n" + textwrap.indent(body, "    ")).body[0]
    expected = any(isinstance(n, gast.Delete) for n in ast.walk(tree))
    assert base.holds_del(tree) == expected
    assert expected == ("del " in body)
