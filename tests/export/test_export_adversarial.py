"""Differential tests of the export: programs a demanding user would deploy, exported once
at batch size 3 and run at other batch sizes on inputs taking every path, as .pt2
(``ep.module()``, a save/load round trip for a few) and ONNX (onnxruntime), against eager.
Artifacts run in this process for speed; one test runs several in a fresh process that
cannot import tograph (``run_artifacts.py``). Strict xfails mark the bugs found."""
import inspect
import os
import subprocess
import sys
import warnings

import pytest
import torch

import adversarial_programs as ap
from adversarial_programs import BATCHES, EXAMPLE_BATCH, PROGRAMS, call, rows
from runtime.export import ExportError, ExportWarning, dynamic_dims, to_onnx, to_torch_export
from transpiler import to_graph

HERE = os.path.dirname(os.path.abspath(__file__))
_NO_ONNX = "the optional extra 'onnx' is not installed"
onnx = pytest.importorskip("onnx", reason=_NO_ONNX)
onnxruntime = pytest.importorskip("onnxruntime", reason=_NO_ONNX)
pytest.importorskip("onnxscript", reason=_NO_ONNX)
LINE = {name: getattr(ap, name).__code__.co_firstlineno for name in dir(ap)
        if inspect.isfunction(getattr(ap, name))}


# ----------------------------------------------------------------------------- helpers
def _leaves(out):
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _leaves(item)]
    return [out]


def _tensors(c):
    """The exported program's inputs: the tensor arguments, then the tensor keywords."""
    return [v for v in list(c.args) + list(c.kwargs.values()) if isinstance(v, torch.Tensor)]


def _feed(fn, c):
    """ONNX inputs by name: the function's parameter names of its tensor arguments."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    bound = inspect.signature(target).bind(*c.args, **c.kwargs)
    return {k: v.numpy() for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)}


def _eager(obj, c):
    with torch.no_grad():
        return _leaves(obj(*c.args, **c.kwargs))


def assert_matches(got, want, atol=1e-5, where=""):
    """Artifact outputs ``got`` against eager leaves ``want``: a tensor keeps its dtype and
    shape; a Python number comes back as a 0-d tensor holding it."""
    got = [torch.as_tensor(g) for g in _leaves(got)]
    assert len(got) == len(want), (where, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, torch.Tensor):
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (where, i, g.dtype, g.shape,
                                                               w.dtype, w.shape)
            torch.testing.assert_close(g, w, rtol=atol, atol=atol, msg=f"{where} output {i}")
        else:
            assert g.shape == (), (where, i, g.shape)
            assert g.item() == pytest.approx(w, rel=atol, abs=atol), (where, i, g.item(), w)


_EXPORTS, _WARNINGS = {}, {}


def _exported(name):
    """(the eager object, its conversion, the ExportedProgram, its module): exported once,
    at the example batch size, on the first path, with the default dynamic="auto"; the
    ExportWarnings it gave are kept in ``_WARNINGS[name]``."""
    if name not in _EXPORTS:
        program = PROGRAMS[name]
        obj = program.fn() if isinstance(program.fn, type) else program.fn
        converted = to_graph(obj)
        example = next(iter(program.paths.values()))(EXAMPLE_BATCH)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ExportWarning)
            ep = to_torch_export(converted, example.args, example.kwargs)
        _WARNINGS[name] = [str(w.message) for w in seen if w.category is ExportWarning]
        _EXPORTS[name] = obj, converted, ep, ep.module()
    return _EXPORTS[name]


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


_SESSIONS = {}


def _session(name, root):
    if name not in _SESSIONS:
        obj, converted, _, _ = _exported(name)
        example = next(iter(PROGRAMS[name].paths.values()))(EXAMPLE_BATCH)
        path = to_onnx(converted, root / f"{name}.onnx", example.args, example.kwargs)
        _SESSIONS[name] = onnxruntime.InferenceSession(path)
    return _SESSIONS[name]


def _run_onnx(session, obj, c):
    feed = _feed(obj, c)
    assert sorted(i.name for i in session.get_inputs()) == sorted(feed)
    return session.run(None, feed)


def _cases(name):
    for label, make in PROGRAMS[name].paths.items():
        for n in BATCHES:
            yield f"{name}[{label}, batch {n}]", make(n)


# ----------------------------------------------------------------------------- every program
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pt2_matches_eager_on_every_path_at_other_batch_sizes(name):
    obj, _, ep, module = _exported(name)
    assert dynamic_dims(ep)[0] == (0,), dynamic_dims(ep)
    assert not [w for w in _WARNINGS[name] if "cannot stay dynamic" in w], _WARNINGS[name]
    for where, c in _cases(name):
        assert_matches(module(*_tensors(c)), _eager(obj, c), PROGRAMS[name].atol, where)


@pytest.mark.parametrize("name", sorted(n for n, p in PROGRAMS.items() if p.onnx))
def test_onnx_matches_eager_on_every_path_at_other_batch_sizes(name, onnx_dir):
    obj = _exported(name)[0]
    session = _session(name, onnx_dir)
    for where, c in _cases(name):
        assert_matches(_run_onnx(session, obj, c), _eager(obj, c), PROGRAMS[name].atol, where)


@pytest.mark.parametrize("name", ["nested_if_in_while", "network_module", "int_and_bool"])
def test_pt2_save_load_round_trip(name, tmp_path):
    obj, _, ep, _ = _exported(name)
    torch.export.save(ep, tmp_path / f"{name}.pt2")
    module = torch.export.load(tmp_path / f"{name}.pt2").module()
    for where, c in _cases(name):
        assert_matches(module(*_tensors(c)), _eager(obj, c), PROGRAMS[name].atol, where)


_FRESH = ["while_break_continue", "int_and_bool", "float64_program"]


def test_artifacts_in_a_fresh_process_without_tograph(tmp_path, onnx_dir):
    cases, expected = {}, {}
    for name in _FRESH:
        obj, _, ep, _ = _exported(name)
        _session(name, onnx_dir)
        inputs = [c for _, c in _cases(name)]
        assert all(not c.kwargs for c in inputs)
        expected[name] = [_eager(obj, c) for c in inputs]
        torch.export.save(ep, tmp_path / f"{name}.pt2")
        tensors = [tuple(_tensors(c)) for c in inputs]
        cases[f"{name}.pt2"] = {"kind": "pt2", "path": str(tmp_path / f"{name}.pt2"),
                                "inputs": tensors}
        cases[f"{name}.onnx"] = {"kind": "onnx", "path": str(onnx_dir / f"{name}.onnx"),
                                 "inputs": tensors}
    torch.save(cases, tmp_path / "cases.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "run_artifacts.py"),
                           str(tmp_path / "cases.pt"), str(tmp_path / "results.pt")],
                          capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
                          env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    run = torch.load(tmp_path / "results.pt")
    assert run["tograph_modules"] == []
    assert sorted(run["results"]) == sorted(cases)
    for key, outputs in run["results"].items():
        name = key.rsplit(".", 1)[0]
        assert len(outputs) == len(expected[name])
        for i, (got, want) in enumerate(zip(outputs, expected[name])):
            assert_matches(got, want, PROGRAMS[name].atol, f"{key} input #{i}")


@pytest.mark.parametrize("n", [0, 1])
@pytest.mark.parametrize("name", ["while_break_continue", "elif_chain_and_ternary"])
def test_empty_and_single_row_batches(name, n, onnx_dir):
    obj, _, _, module = _exported(name)
    c = call(rows(n, -0.5))
    want = _eager(obj, c)
    assert_matches(module(*_tensors(c)), want, where=f"pt2 batch {n}")
    if PROGRAMS[name].onnx:
        session = _session(name, onnx_dir)
        assert_matches(_run_onnx(session, obj, c), want, where=f"onnx batch {n}")


# ----------------------------------------------------------------------------- arguments
def test_keyword_tensors_are_inputs_in_keyword_order_python_scalars_are_not():
    obj, converted, ep, _ = _exported("keywords_and_scalars")
    assert len(ep.graph_signature.user_inputs) == 3       # x, shift, scale; not k, flag
    c = PROGRAMS["keywords_and_scalars"].paths["positive"](EXAMPLE_BATCH)
    chosen = to_torch_export(converted, c.args, c.kwargs, dynamic={"shift": 0, "x": 0})
    assert dynamic_dims(chosen) == [(0,), (0,), ()]       # x, shift, scale
    c = PROGRAMS["keywords_and_scalars"].paths["negative"](6)
    assert_matches(chosen.module()(*_tensors(c)), _eager(obj, c))


def test_weights_first_dimension_is_pinned_with_a_warning(onnx_dir):
    """dynamic="auto" asks for dim 0 of the (4, 4) weights too; ``x @ w`` ties it to x's
    static dim 1, so torch.export pins it to 4: the export says so, reports it static,
    runs any batch of x and refuses other weight shapes (loudly, in both artifacts)."""
    obj, _, ep, module = _exported("weights_argument")
    assert [w for w in _WARNINGS["weights_argument"] if "fixed w[0]" in w]
    assert dynamic_dims(ep) == [(0,), ()]
    x = rows(6, 1)
    assert_matches(module(x, torch.eye(4) * 3), _eager(obj, call(x, torch.eye(4) * 3)))
    with pytest.raises(Exception):
        module(x, torch.eye(5))
    session = _session("weights_argument", onnx_dir)
    model = onnx.load(str(onnx_dir / "weights_argument.onnx"))
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input]
    assert dims[1] == [4, 4] and isinstance(dims[0][0], str) and dims[0][1] == 4, dims
    with pytest.raises(Exception):
        session.run(None, {"x": x.numpy(), "w": torch.eye(4)[:2].contiguous().numpy()})


def test_an_example_batch_of_one_still_exports_a_dynamic_batch():
    """Sizes are exported "size-oblivious": no 0/1 specialization of the example."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExportWarning)
        ep = to_torch_export(to_graph(ap.two_batches), (rows(1, 1), rows(1, 1)))
    assert dynamic_dims(ep) == [(0,), (0,)]
    for n, m in ((1, 1), (4, 2), (0, 3)):
        args = (rows(n, 1), rows(m, -1))
        assert_matches(ep.module()(*args), _eager(ap.two_batches, call(*args)))


# ----------------------------------------------------------------------------- static graph API
def _tf1_graph():
    import runtime
    graph = runtime.Graph()
    with graph.as_default():
        a = runtime.placeholder(torch.float32, shape=(None, 3), name="a")
        w = runtime.placeholder(torch.float32, shape=(3, 3), name="w")
        i, h = runtime.while_loop(
            lambda i, h: torch.logical_and(h.abs().max() > 1, i < 50),
            lambda i, h: (i + 1, runtime.cond(h.sum() > 0, lambda: h / 2, lambda: h / 4)),
            (runtime.constant(0), torch.matmul(a, w)))
        out = runtime.cond(h.sum() > 0, lambda: h * 2 + a, lambda: -h)
    graph.outputs = (out._node, i._node)
    return graph, a, w


def _tf1_eager(a, w):
    h, i = a @ w, 0
    while h.abs().max() > 1 and i < 50:
        h = h / 2 if h.sum() > 0 else h / 4
        i += 1
    return [h * 2 + a if h.sum() > 0 else -h, i]


def test_tf1_graph_with_dynamic_placeholder_both_ways(tmp_path):
    import runtime
    graph, a, w = _tf1_graph()
    listing = str(graph)
    example = (torch.ones(3, 3), torch.eye(3))
    ep = to_torch_export(graph, example)
    session = onnxruntime.InferenceSession(to_onnx(graph, tmp_path / "g.onnx", example))
    assert dynamic_dims(ep) == [(0,), ()]
    assert str(graph) == listing                         # the user's graph is left alone
    weights = torch.eye(3) * 1.5
    for n in BATCHES:
        for value in (5.0, -5.0, 0.5):
            x = torch.full((n, 3), value) + torch.arange(3.0)
            want = _tf1_eager(x, weights)
            assert_matches(ep.module()(x, weights), want, where=f"pt2 {n} {value}")
            assert_matches(session.run(None, {"a": x.numpy(), "w": weights.numpy()}), want,
                           where=f"onnx {n} {value}")
            with runtime.Session(graph) as sess:
                assert_matches(sess.run(list(graph.outputs), {a: x, w: weights}), want)


def test_tf1_branches_returning_the_placeholder():
    import runtime
    graph = runtime.Graph()
    with graph.as_default():
        a = runtime.placeholder(torch.float32, shape=(None, 2), name="a")
        out = runtime.cond(a.sum() > 0, lambda: a, lambda: a)
    graph.outputs = out._node
    listing = str(graph)
    ep = to_torch_export(graph, (torch.ones(3, 2),))
    assert str(graph) == listing
    x = torch.randn(5, 2)
    torch.testing.assert_close(ep.module()(x), x)
    with runtime.Session(graph) as sess:
        torch.testing.assert_close(sess.run(out, {a: x}), x)


def test_tf1_example_of_the_wrong_shape_or_dtype_is_refused():
    import runtime
    graph = runtime.Graph()
    with graph.as_default():
        a = runtime.placeholder(torch.float32, shape=(None, 3), name="a")
        out = a.sum(1) / a.shape[1]
    graph.outputs = out._node
    with pytest.raises(ValueError, match="placeholder 'a'.*does not fit"):
        to_torch_export(graph, (torch.ones(2, 4),))
    with pytest.raises(ValueError, match="placeholder 'a'.*does not fit"):
        to_torch_export(graph, (torch.ones(2, 3, dtype=torch.float64),))


# ----------------------------------------------------------------------------- error paths
def test_unmapped_onnx_op_inside_a_loop_names_its_line(tmp_path):
    def zeta_loop(x):
        while x.sum() < 10:
            x = x + torch.special.zeta(x, torch.full_like(x, 2.0))
        return x
    line = zeta_loop.__code__.co_firstlineno + 2
    with pytest.raises(ExportError, match=rf"test_export_adversarial.py:{line}: .*zeta.*ONNX"):
        to_onnx(to_graph(zeta_loop), tmp_path / "z.onnx", (torch.ones(3, 2),))


def test_branch_dtype_mismatch_names_the_line():
    line = LINE["branch_dtype_mismatch"] + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExportWarning)
        with pytest.raises(Exception, match=rf"adversarial_programs.py:{line}: 'y' has dtype"):
            to_torch_export(to_graph(ap.branch_dtype_mismatch), (rows(3, 1),))


def test_an_unrelated_trace_error_is_not_blamed_on_the_batch_dimension():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(Exception):
            to_torch_export(to_graph(ap.branch_dtype_mismatch), (rows(3, 1),))
    assert not [w for w in seen if "cannot stay dynamic" in str(w.message)]


@pytest.mark.parametrize("dynamic", ["auto", None])
def test_item_of_a_tensor_exports_as_its_value(dynamic):
    # ``t.item()`` of a one-element tensor is a graph value standing for the Python
    # number (runtime.item_values; it was refused, naming the line): the export computes
    # it on every call, not once
    def scaled(x):
        return x * x.sum().item()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExportWarning)
        program = to_torch_export(to_graph(scaled), (rows(3, 1),), dynamic=dynamic)
    for x in (rows(3, 1), rows(3, 1) * -2 + 1):
        assert torch.allclose(program.module()(x), scaled(x))


def test_usage_errors():
    graph = _tf1_graph()[0]
    with pytest.raises(ValueError, match="2 inputs, got 1"):
        to_torch_export(graph, (torch.ones(2, 3),))
    with pytest.raises(ValueError, match="not a tensor argument"):
        to_torch_export(to_graph(ap.weights_argument), (rows(3, 1), torch.eye(4)),
                        dynamic={"k": 0})
    with pytest.raises(TypeError, match="runtime.Graph or a @to_graph function"):
        to_onnx(ap.weights_argument, "never.onnx", (rows(3, 1), torch.eye(4)))


def test_a_write_through_a_view_that_is_used_is_an_export_error_at_its_line():
    line = LINE["view_written_and_used"] + 3
    with pytest.raises(ExportError, match=rf"adversarial_programs.py:{line}: zero_ writes in "
                                          rf"place through a view"):
        to_torch_export(to_graph(ap.view_written_and_used), (rows(3, 1),))


# ----------------------------------------------------------------------------- bugs found
def _both_ways(fn, example, inputs, tmp_path, kind):
    """Export ``fn`` at ``example`` and compare the artifact of ``kind`` with eager."""
    converted = to_graph(fn)
    if kind == "pt2":
        module = to_torch_export(converted, (example,)).module()
        run = module
    else:
        session = onnxruntime.InferenceSession(to_onnx(converted, tmp_path / "f.onnx",
                                                       (example,)))
        run = lambda x: session.run(None, {"x": x.numpy()})   # noqa: E731
    for x in inputs:
        assert_matches(run(x), _eager(fn, call(x)), where=f"{kind} {tuple(x.shape)}")


@pytest.mark.parametrize("fn, kind", [(ap.chained_setitem, "pt2"), (ap.chained_setitem, "onnx"),
                                      (ap.inplace_on_view, "pt2"), (ap.augmented_view, "pt2")],
                         ids=["chained_setitem-pt2", "chained_setitem-onnx", "inplace_on_view",
                              "augmented_view"])
def test_writes_through_views(fn, kind, tmp_path):
    """Exact, or an ExportError at the writing line; never a lost write."""
    x = rows(3, 1)
    torch.testing.assert_close(to_graph(fn)(x), fn(x))      # the executor gets it right
    try:
        _both_ways(fn, x, [x, rows(5, -1)], tmp_path, kind)
    except ExportError as e:
        lines = range(LINE[fn.__name__] + 1, LINE[fn.__name__] + 4)
        assert any(f"adversarial_programs.py:{n}: " in str(e) for n in lines), str(e)


def test_float64_size_arithmetic_keeps_float64_precision():
    """A size stands for a Python int: with floats it computes as a double."""
    x = rows(3, 1, dtype=torch.float64)
    ep = to_torch_export(to_graph(ap.batch_over_three), (x,))
    for n in (3, 5):
        x = rows(n, 1, dtype=torch.float64)
        torch.testing.assert_close(ep.module()(x), ap.batch_over_three(x), rtol=1e-12, atol=0)


def test_nested_for_loops_over_tensors_export():
    w = torch.tensor([[1., 0, 0, 1], [-1, -1, 0, 0]])
    ep = to_torch_export(to_graph(ap.nested_for), (rows(3, 1), w))
    for x in (rows(5, 1), rows(2, -1)):
        assert_matches(ep.module()(x, w), _eager(ap.nested_for, call(x, w)))


@pytest.mark.parametrize("fn", [ap.keep_last_positive, ap.early_return_in_loop],
                         ids=lambda f: f.__name__)
def test_loop_rebinding_a_carried_row_keeps_the_batch_dynamic(fn):
    """A loop whose branch picks a row or the carried value (an early return from the
    loop is one): torch.while_loop must learn that the carried shape does not change."""
    ep = to_torch_export(to_graph(fn), (rows(3, 1),))
    assert dynamic_dims(ep) == [(0,)]
    for x in (rows(5, 1), rows(2, -1), rows(5, 0.1)):
        assert_matches(ep.module()(x), _eager(fn, call(x)), where=str(tuple(x.shape)))


def test_early_return_accepts_batches_of_one_and_zero():
    ep = to_torch_export(to_graph(ap.early_return), (rows(3, 1),))
    assert_matches(ep.module()(rows(5, -1)), _eager(ap.early_return, call(rows(5, -1))))
    for n in (1, 0):
        x = rows(n, -1)
        assert_matches(ep.module()(x), _eager(ap.early_return, call(x)), where=f"batch {n}")
