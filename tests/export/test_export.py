"""Export converted programs to .pt2 (torch.export) and ONNX, run every artifact in a fresh
process that cannot import tograph, and compare with eager on inputs taking each path, at
two batch sizes (the artifacts are exported once, at the first size)."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

from programs import BATCHES, PROGRAMS
from runtime.export import ExportError, ExportWarning, dynamic_dims, to_onnx, to_torch_export
from transpiler import to_graph

HERE = os.path.dirname(os.path.abspath(__file__))
onnx = pytest.importorskip("onnx", reason="the optional extra 'onnx' is not installed")
pytest.importorskip("onnxruntime", reason="the optional extra 'onnx' is not installed")
pytest.importorskip("onnxscript", reason="the optional extra 'onnx' is not installed")


def _program(name):
    fn, paths = PROGRAMS[name]
    return (fn() if isinstance(fn, type) else fn), paths


def _eager(obj, args):
    out = obj(*args)
    return [torch.as_tensor(v) for v in (out if isinstance(out, (tuple, list)) else (out,))]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Export every program both ways; run all artifacts in one fresh process."""
    root = tmp_path_factory.mktemp("artifacts")
    cases, expected, programs = {}, {}, {}
    for name in PROGRAMS:
        obj, paths = _program(name)
        converted = to_graph(obj)
        example = next(iter(paths.values()))(BATCHES[0])
        inputs = [make(n) for make in paths.values() for n in BATCHES]
        expected[name] = [_eager(obj, args) for args in inputs]
        ep = to_torch_export(converted, example)
        torch.export.save(ep, root / f"{name}.pt2")
        to_onnx(converted, root / f"{name}.onnx", example)
        programs[name] = ep
        cases[f"{name}.pt2"] = {"kind": "pt2", "path": str(root / f"{name}.pt2"),
                                "inputs": inputs}
        cases[f"{name}.onnx"] = {"kind": "onnx", "path": str(root / f"{name}.onnx"),
                                 "inputs": inputs}
    torch.save(cases, root / "cases.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "run_artifacts.py"),
                           str(root / "cases.pt"), str(root / "results.pt")],
                          capture_output=True, text=True, timeout=600, cwd=str(root), env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    run = torch.load(root / "results.pt")
    return {"root": root, "expected": expected, "results": run["results"],
            "modules": run["tograph_modules"], "programs": programs}


@pytest.mark.parametrize("kind", ["pt2", "onnx"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_artifact_matches_eager_on_every_path_and_batch_size(exported, name, kind):
    got = exported["results"][f"{name}.{kind}"]
    want = exported["expected"][name]
    assert len(got) == len(want) == len(PROGRAMS[name][1]) * len(BATCHES)
    for case, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), (name, case)
        for a, b in zip(g, w):
            assert a.shape == b.shape, (name, case, a.shape, b.shape)
            torch.testing.assert_close(a.to(b.dtype), b, rtol=1e-5, atol=1e-5,
                                       msg=f"{name} {kind} input #{case}")


def test_artifacts_ran_without_tograph(exported):
    assert exported["modules"] == []


def test_pt2_holds_torch_cond_and_while_loop(exported):
    def targets(ep):
        found = set()
        for module in ep.graph_module.modules():
            for node in getattr(getattr(module, "graph", None), "nodes", ()):
                found.add(str(node.target))
        return found
    assert any("cond" in t for t in targets(exported["programs"]["if_elif"]))
    assert any("while_loop" in t for t in targets(exported["programs"]["halving_while"]))
    assert any("while_loop" in t for t in targets(exported["programs"]["for_over_rows"]))


def _onnx_ops(nodes, found):
    """Op types of ``nodes`` and of every graph nested in their attributes."""
    for node in nodes:
        found.add(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _onnx_ops(attr.g.node, found)
    return found


def _model_ops(model):
    found = _onnx_ops(model.graph.node, set())
    for function in model.functions:
        _onnx_ops(function.node, found)
    return found


def test_onnx_models_have_if_and_loop_and_pass_the_checker(exported):
    root = exported["root"]
    for name in PROGRAMS:
        onnx.checker.check_model(str(root / f"{name}.onnx"), full_check=True)
    assert "If" in _model_ops(onnx.load(str(root / "if_elif.onnx")))
    assert "Loop" in _model_ops(onnx.load(str(root / "halving_while.onnx")))
    assert {"If", "Loop"} <= _model_ops(onnx.load(str(root / "for_with_break.onnx")))


def test_batch_dimension_is_dynamic(exported):
    for name, ep in exported["programs"].items():
        assert dynamic_dims(ep) == [(0,)], name
    model = onnx.load(str(exported["root"] / "if_elif.onnx"))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].dim_value and dims[1].dim_value == 4


# ----------------------------------------------------------------------------- choices
def test_static_export_rejects_another_batch_size():
    ep = to_torch_export(to_graph(PROGRAMS["ternary"][0]), (torch.ones(3, 4),), dynamic=None)
    assert dynamic_dims(ep) == [()]
    with pytest.raises(Exception):
        ep.module()(torch.ones(5, 4))


def test_dynamic_dims_by_name():
    def f(x, y):
        if (x @ y).sum() > 0:
            return x @ y
        return x @ y * 2
    ep = to_torch_export(to_graph(f), (torch.ones(3, 4), torch.ones(4, 5)),
                         dynamic={"x": 0, "y": (1,)})
    assert dynamic_dims(ep) == [(0,), (1,)]
    x, y = torch.randn(7, 4), torch.randn(4, 2)
    torch.testing.assert_close(ep.module()(x, y), f(x, y))
    with pytest.raises(ValueError, match="no dimension 3"):
        to_torch_export(to_graph(f), (torch.ones(3, 4), torch.ones(4, 5)), dynamic={"x": 3})
    with pytest.raises(ValueError, match="not a tensor argument"):
        to_torch_export(to_graph(f), (torch.ones(3, 4), torch.ones(4, 5)), dynamic={"z": 0})


def test_python_arguments_are_specialized():
    def f(x, n):
        for _ in range(n):
            x = x * 2
        return x
    ep = to_torch_export(to_graph(f), (torch.ones(2, 3), 3))
    x = torch.randn(5, 3)
    torch.testing.assert_close(ep.module()(x), x * 8)


def test_graph_from_the_tf1_api_keeps_its_dynamic_placeholder():
    import runtime
    graph = runtime.Graph()
    with graph.as_default():
        a = runtime.placeholder(torch.float32, shape=(None, 3), name="a")
        out = runtime.cond(a.sum() > 0, lambda: a * 2, lambda: -a)
    graph.outputs = out._node
    ep = to_torch_export(graph, (torch.ones(2, 3),))
    assert dynamic_dims(ep) == [(0,)]
    for x in (torch.ones(4, 3), -torch.ones(6, 3)):
        torch.testing.assert_close(ep.module()(x), x * 2 if x.sum() > 0 else -x)


# ----------------------------------------------------------------------------- errors
def _polygamma(x):
    if x.sum() > 0:
        return torch.polygamma(2, x)
    return x


def test_op_without_onnx_mapping_names_the_op_and_the_user_line(tmp_path):
    converted = to_graph(_polygamma)
    to_torch_export(converted, (torch.rand(3) + 1,))        # .pt2 carries it
    line = _polygamma.__code__.co_firstlineno + 2
    with pytest.raises(ExportError) as info:
        to_onnx(converted, tmp_path / "p.onnx", (torch.rand(3) + 1,))
    text = str(info.value)
    assert f"test_export.py:{line}:" in text and "polygamma" in text and "ONNX" in text


def _reshapes_by_size(x):
    return x.reshape(x.shape[0] * x.shape[1])     # a size as a shape argument


def _prints(x):
    print("value", x)
    return x + 1


def test_print_is_left_out_with_a_warning():
    with pytest.warns(ExportWarning, match="print_values"):
        ep = to_torch_export(to_graph(_prints), (torch.ones(2, 2),))
    torch.testing.assert_close(ep.module()(torch.ones(3, 2)), torch.full((3, 2), 2.0))


def test_sizes_flowing_into_shape_arguments_stay_dynamic():
    """A size passed on as a shape argument is a graph value (the executor passes the
    real size), so the export keeps the dimension dynamic and serves other sizes."""
    ep = to_torch_export(to_graph(_reshapes_by_size), (torch.ones(2, 3),))
    for shape in ((2, 3), (5, 3)):
        x = torch.randn(*shape)
        torch.testing.assert_close(ep.module()(x), _reshapes_by_size(x))


def test_a_size_read_as_a_python_number_makes_the_export_static():
    def needs_int(x):
        return torch.zeros(int(x.shape[0]) + 1)
    with pytest.warns(ExportWarning, match="cannot stay dynamic"):
        ep = to_torch_export(to_graph(needs_int), (torch.ones(3, 2),))
    assert dynamic_dims(ep) == [()]
    torch.testing.assert_close(ep.module()(torch.ones(3, 2)), torch.zeros(4))


def test_explicit_dynamic_dims_through_shape_arguments_are_kept():
    ep = to_torch_export(to_graph(_reshapes_by_size), (torch.ones(2, 3),), dynamic={"x": 0})
    x = torch.randn(7, 3)
    torch.testing.assert_close(ep.module()(x), _reshapes_by_size(x))


def test_not_a_graph_or_converted_function():
    with pytest.raises(TypeError, match="runtime.Graph or a @to_graph function"):
        to_torch_export(lambda x: x, (torch.ones(2),))


def _grows(x):
    while x.shape[0] < 10 and x.sum() > -100:
        x = torch.cat([x, x])
    return x


def _collects(x):
    out = []
    for r in x:
        if r.sum() > 0:
            out.append(r * 2)
    return out


@pytest.mark.parametrize("fn, offset", [(_grows, 1), (_collects, 2)])
def test_loops_whose_carried_shapes_change_name_the_loop_line(fn, offset):
    line = fn.__code__.co_firstlineno + offset
    with pytest.raises(ExportError, match=rf"test_export.py:{line}: torch.export failed at "
                                          rf"op 'while'"):
        to_torch_export(to_graph(fn), (torch.ones(2, 3),))


def test_mutating_an_argument_is_refused():
    def bumps(x):
        x.add_(1)
        return x * 2
    with pytest.raises(Exception, match="mutates argument"):
        to_torch_export(to_graph(bumps), (torch.ones(2, 3),))


def test_data_dependent_output_sizes_export():
    def positives(x):
        return torch.nonzero(x > 0)
    ep = to_torch_export(to_graph(positives), (torch.ones(2, 3),))
    x = torch.tensor([[1.0, -1.0, 2.0], [0.0, 3.0, -4.0], [5.0, 0.0, 0.0]])
    torch.testing.assert_close(ep.module()(x), torch.nonzero(x > 0))


def test_python_numbers_and_containers_among_the_outputs(tmp_path):
    import onnxruntime

    def f(x):
        return {"scaled": x * 2, "parts": [x.sum(), 3]}
    ep = to_torch_export(to_graph(f), (torch.ones(2, 3),))
    out = ep.module()(torch.ones(4, 3))
    assert out["parts"][1] == 3 and torch.equal(out["scaled"], torch.full((4, 3), 2.0))
    path = to_onnx(to_graph(f), tmp_path / "f.onnx", (torch.ones(2, 3),))
    got = onnxruntime.InferenceSession(path).run(None, {"x": torch.ones(4, 3).numpy()})
    assert [torch.as_tensor(v).tolist() for v in got] == [[[2.0] * 3] * 4, 12.0, 3]


def test_mutating_an_argument_in_a_branch_is_refused():
    def bumps_if_positive(x):
        if x.sum() > 0:
            x[0] = 0.0
        return x * 2
    with pytest.raises(Exception, match="mutates argument 'x'"):
        to_torch_export(to_graph(bumps_if_positive), (torch.ones(2, 3),))
