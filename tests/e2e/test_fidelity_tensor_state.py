"""A traced tensor answers what a program asks of it as the real tensor would, or refuses.

Issue 12 item 2: layout (strides, contiguity, storage offset: of arguments, of views, of
values merged by tensor control flow, of returned tensors), version counter, storage and
identity, autograd state and calls, Python attributes, tensor subclasses, and the global
modes a trace depends on (autocast, default dtype, inference mode, deterministic
algorithms). Each program runs eagerly and converted (strict and default mode) on inputs
that take different paths; a case either converts (strict mode runs the graph and every
call equals eager, strides included) or falls back loudly (strict: ConversionError;
default: one FallbackWarning naming the program's line, and eager's results).
See runtime/tensor_state.py.
"""
import warnings

import pytest
import torch
import torch.nn as nn

from tests.e2e.autograd_programs import backward_inside
from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import assert_same

CONVERTS, FALLS_BACK = "converts", "falls back"


def layout(v, like=None):
    """The layout of every tensor in ``v`` where ``like`` (eager's result) has a tensor:
    (shape, strides, storage offset). (A 0-d tensor standing for a number has none.)"""
    like = v if like is None else like
    if isinstance(like, torch.Tensor):
        return (tuple(v.shape), v.stride(), v.storage_offset())
    if isinstance(like, (tuple, list)):
        return [layout(x, y) for x, y in zip(v, like)]
    return None


def _copy(args):
    return tuple(a.clone() if type(a) is torch.Tensor and a.is_contiguous() and not a.__dict__
                 else a for a in args)


def differential(fn, inputs, expect, *, modes=None):
    """Run ``fn`` eagerly and converted (strict, then default) on each argument tuple of
    ``inputs`` (one converted object per mode, so cached graphs are reused); ``expect``:
    CONVERTS or FALLS_BACK. ``modes()``: a context manager to call inside."""
    import contextlib
    context = modes or contextlib.nullcontext
    strict = to_graph(fn, strict=True)
    default = to_graph(fn)
    for args in inputs:
        with context():
            exp = fn(*_copy(args))
        if expect == CONVERTS:
            with context():
                got = strict(*_copy(args))
            assert_same(got, exp)
            assert layout(got, exp) == layout(exp), f"layout {layout(got, exp)} != {layout(exp)}"
        else:
            with pytest.raises(ConversionError) as info, context():
                strict(*_copy(args))
            assert fn.__code__.co_filename in str(info.value)
        with warnings.catch_warnings(record=True) as caught, context():
            warnings.simplefilter("always")
            got = default(*_copy(args))
        fell = [w for w in caught if issubclass(w.category, FallbackWarning)]
        assert bool(fell) == (expect == FALLS_BACK and args is inputs[0]), \
            [str(w.message) for w in fell]
        if fell:
            assert fn.__code__.co_filename in str(fell[0].message)
        assert_same(got, exp)
        assert layout(got, exp) == layout(exp), f"layout {layout(got, exp)} != {layout(exp)}"


POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, 0.5])
MAT = torch.arange(6.0).reshape(2, 3) - 2.5


def layouts_of(m):
    """One (3, 4) matrix in four layouts: contiguous, transposed, sliced with an offset,
    strided."""
    return [(m,), (m.t().contiguous().t(),), (torch.cat([m, m])[3:],), (m.repeat(1, 2)[:, ::2],)]


M34 = torch.arange(12.0).reshape(3, 4) - 5


# ------------------------------------------------------------------ layout of arguments
def arg_layout_queries(x):
    y = x[1:]
    return x.is_contiguous(), x.stride(), x.storage_offset(), y.stride(), y.storage_offset(), \
        x.t().is_contiguous()


def arg_layout_decides(x):
    if x.is_contiguous():           # a Python decision on the argument's layout
        y = x * 2
    else:
        y = x.contiguous() * 3
    if y.sum() > 0:
        y = y + 1
    return y


def arg_layout_stride_math(x):
    rows = x.stride(0) // max(x.stride(1), 1)
    if x.sum() > 0:
        x = x - 1
    return x * rows


@pytest.mark.parametrize("fn", [arg_layout_queries, arg_layout_decides, arg_layout_stride_math])
def test_argument_layout_is_exact(fn):
    differential(fn, layouts_of(M34) + layouts_of(-M34), CONVERTS)


# ------------------------------------------------------------------ layout inside a region
def layout_in_branch(x):
    m = torch.stack([x, x]).t()         # made outside, asked inside
    if x.sum() > 0:
        k = m.stride(0) + m.is_contiguous()
    else:
        k = m.stride(1) * 10
    return m * k


def layout_same_on_both_paths(x):
    m = torch.stack([x, x])
    if x.sum() > 0:
        y = m.t() * 2
    else:
        y = m.t() - 1
    return y.is_contiguous(), y.stride(), y


@pytest.mark.parametrize("fn", [layout_in_branch, layout_same_on_both_paths])
def test_layout_known_on_every_path_converts(fn):
    differential(fn, [(POS,), (NEG,), (POS * 3,)], CONVERTS)


def layout_per_path(x):
    m = torch.stack([x, x])
    if x.sum() > 0:
        y = m.t()
    else:
        y = m
    return y.is_contiguous(), y.stride(), y


def layout_per_path_derived(x):
    m = torch.stack([x, x, x])
    if x.sum() > 0:
        y = m.t()
    else:
        y = m + 1
    z = y * 2                           # follows y's layout, whichever it is
    return z.stride()


def offset_per_path(x):
    if x.sum() > 0:
        y = x[1:]
    else:
        y = x[:2]
    return y.storage_offset()


def layout_per_iteration(x):
    m = torch.stack([x, x, x])
    while m.sum() < 100:
        m = m.t() * 2                   # transposed on odd iterations
    return m.is_contiguous(), m


@pytest.mark.parametrize("fn", [layout_per_path, layout_per_path_derived, offset_per_path,
                                layout_per_iteration])
def test_layout_known_only_at_run_time_falls_back(fn):
    differential(fn, [(POS,), (NEG,)], FALLS_BACK)


# ------------------------------------------------------------------ layout of results
def returned_transpose(x):
    return x.t()


def returned_fused_on_transpose(x):
    return (x.t() * 2 + 1).relu()       # a fused group on a transposed view


def returned_elementwise_of_argument(x):
    return x.sin() + 1


def returned_per_path(x):
    m = x.reshape(3, 4)
    if m.sum() > 0:
        y = m.t()
    else:
        y = m
    return y * 2 + 1


def returned_from_loop(x):
    m = x.reshape(3, 4).t()
    while m.abs().sum() < 200:
        m = m * 2 + 1
    return m


def planned_chain_on_transpose(x, w):
    with torch.no_grad():
        h = torch.tanh(x.t() @ w)
        h = h * 2 + x.t()[:, :1]
        return torch.sigmoid(h) + h


@pytest.mark.parametrize("fn", [returned_transpose, returned_fused_on_transpose,
                                returned_elementwise_of_argument])
def test_results_have_eager_layout(fn):
    differential(fn, layouts_of(M34) + layouts_of(-M34), CONVERTS)


@pytest.mark.parametrize("fn", [returned_per_path, returned_from_loop])
def test_results_of_control_flow_have_eager_layout(fn):
    x = torch.arange(12.0) - 3
    differential(fn, [(x,), (-x,), (x * 0.01,)], CONVERTS)


def test_planned_memory_keeps_eager_layout():
    w = torch.randn(3, 3)
    differential(planned_chain_on_transpose, [(torch.randn(3, 4), w), (torch.randn(3, 4), w)],
                 CONVERTS)


# ------------------------------------------------------------------ version, storage, identity
def version_after_write(x):
    y = x.clone()
    v0 = y._version
    if x.sum() > 0:
        y.add_(1)
    return y._version - v0


def version_of_argument(x):
    return x * x._version


def data_pointer_compare(x):
    y = x.view(3)
    same = y.data_ptr() == x.data_ptr()
    return x * 2 if same else x


def storage_size(x):
    return x * x.untyped_storage().nbytes()


def base_of_view(x):
    y = (x * 2)[1:]
    if y._base is None:
        return y
    return y + 1


def shared_memory(x):
    return x + x.is_shared()


def inference_tensor(x):
    y = x * 2
    return y + y.is_inference()


@pytest.mark.parametrize("fn", [version_after_write, version_of_argument, data_pointer_compare,
                                storage_size, base_of_view, shared_memory])
def test_version_storage_identity_fall_back(fn):
    differential(fn, [(POS,), (NEG,)], FALLS_BACK)


def test_is_inference_of_a_value_made_in_the_trace_is_answered():
    """``is_inference()`` of a value the trace made is known: the caller's inference mode
    is part of the signature, and ops in ``inference_mode`` are recorded (inference_ops)."""
    differential(inference_tensor, [(POS,), (NEG,)], CONVERTS)
    with torch.inference_mode():
        differential(inference_tensor, [(POS,), (NEG,)], CONVERTS)


# ------------------------------------------------------------------ autograd state and calls
def leaf_and_grad_fn(x):
    y = x * 1
    if x.sum() > 0:
        y = y + 1
    return y.is_leaf, y.grad_fn is None, x.is_leaf, y.grad is None


def leaf_of_grad_result(x, w):
    y = x * w
    if y.sum() > 0:
        y = y * 2
    else:
        y = y - 1
    return y.is_leaf, w.detach().is_leaf, y


def local_leaf(x):
    w = torch.ones(3, requires_grad=True)
    if x.sum() > 0:
        x = x * 2
    return w.is_leaf, (x * w).is_leaf, w.grad is None


def test_autograd_state_converts_where_exact():
    differential(leaf_and_grad_fn, [(POS,), (NEG,)], CONVERTS)
    w = torch.ones(3, requires_grad=True)
    differential(leaf_of_grad_result, [(POS, w), (NEG, w)], CONVERTS)
    differential(local_leaf, [(POS,), (NEG,)], CONVERTS)


def grad_of_argument(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    return y, x.grad


def grad_fn_of_result(x):
    y = x * 2
    return y, type(y.grad_fn).__name__


def grad_flag_per_path(x):
    y = x.detach()
    if x.sum() > 0:
        y = x * 2
    return y.is_leaf


@pytest.mark.parametrize("fn", [grad_of_argument, grad_fn_of_result, grad_flag_per_path])
def test_autograd_state_of_caller_or_path_falls_back(fn):
    differential(fn, [(POS.clone().requires_grad_(),), (NEG.clone().requires_grad_(),)],
                 FALLS_BACK)


def autograd_grad_inside(x):
    x = x.detach().requires_grad_()
    y = (x ** 2).sum()
    if y > 5:
        y = y * 2
    (g,) = torch.autograd.grad(y, x)
    return g


def autograd_backward_inside(x):
    w = torch.ones(3, requires_grad=True)
    torch.autograd.backward([(x * w).sum()])
    return w.grad


def hook_inside(x):
    w = torch.ones(3, requires_grad=True)
    y = x * w
    y.register_hook(lambda g: g * 2)
    return y.detach()


def retain_grad_inside(x):
    w = torch.ones(3, requires_grad=True)
    y = x * w
    y.retain_grad()
    return y.detach()


@pytest.mark.parametrize("fn", [autograd_grad_inside, backward_inside, autograd_backward_inside])
def test_autograd_inside_converts(fn):
    """backward / autograd.grad inside converted code are effect nodes that run autograd
    when the graph runs (runtime/autograd_effects.py): equal to eager, gradients included."""
    differential(fn, [(POS,), (NEG,)], CONVERTS)


@pytest.mark.parametrize("fn", [hook_inside, retain_grad_inside])
def test_autograd_inside_falls_back(fn):
    differential(fn, [(POS,), (NEG,)], FALLS_BACK)


def test_gradients_through_converted_code_still_equal_eager():
    def f(x, w):
        y = x * w
        if y.sum() > 0:
            y = y.t() * 2 if y.dim() == 2 else y * 2
        return y.sum()
    g = to_graph(f, strict=True)
    for x in (POS, NEG):
        w1, w2 = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
        f(x, w1).backward()
        g(x, w2).backward()
        assert torch.equal(w1.grad, w2.grad)


# ------------------------------------------------------------------ Python attributes
def attribute_then_branch(x):
    y = x * 2
    y.tag = "t"
    if y.sum() > 0:
        y = y + 1
    return y, getattr(y, "tag", None)


def attribute_in_branches(x):
    y = x * 2
    if x.sum() > 0:
        y.tag = "pos"
    else:
        y.tag = "neg"
    return y, y.tag


def attribute_setattr_builtin(x):
    y = x + 1
    setattr(y, "scale", 2.0)
    return y * y.scale


@pytest.mark.parametrize("fn", [attribute_then_branch, attribute_in_branches,
                                attribute_setattr_builtin])
def test_python_attribute_on_traced_tensor_falls_back(fn):
    differential(fn, [(POS,), (NEG,)], FALLS_BACK)


def read_argument_attribute(x):
    if x.sum() > 0:
        x = x * 2
    return x * getattr(x, "scale", 1.0)


def test_argument_with_python_attributes_falls_back_and_plain_converts():
    tagged, tagged_neg = POS.clone(), NEG.clone()
    tagged.scale, tagged_neg.scale = 3.0, 5.0
    differential(read_argument_attribute, [(tagged,), (tagged_neg,)], FALLS_BACK)
    g = to_graph(read_argument_attribute, strict=True)
    assert_same(g(NEG), read_argument_attribute(NEG))     # a plain tensor converts
    with pytest.raises(ConversionError):                  # then a tagged one: not its graph
        g(tagged)


def requires_grad_attribute_still_works(x):
    y = x * 2
    y.requires_grad = True              # torch's own attribute, not a Python one
    if x.sum() > 0:
        y = y + 1
    return y.requires_grad


def test_torch_attributes_are_not_python_attributes():
    differential(requires_grad_attribute_still_works, [(POS,), (NEG,)], CONVERTS)


# ------------------------------------------------------------------ tensor subclasses
class TaggedTensor(torch.Tensor):
    """A plain torch.Tensor subclass: its results are TaggedTensors too."""


def subclass_dispatch(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 1
    return isinstance(y, TaggedTensor), type(x).__name__, y.as_subclass(torch.Tensor)


def test_tensor_subclass_argument_falls_back_and_plain_converts():
    differential(subclass_dispatch, [(POS.as_subclass(TaggedTensor),),
                                     (NEG.as_subclass(TaggedTensor),)], FALLS_BACK)
    differential(subclass_dispatch, [(POS,), (NEG,)], CONVERTS)
    g = to_graph(subclass_dispatch, strict=True)
    g(POS)
    with pytest.raises(ConversionError):                  # same shape, another class
        g(POS.as_subclass(TaggedTensor))


def parameter_introspection(p):
    is_param = isinstance(p, nn.Parameter)
    with torch.no_grad():
        if p.sum() > 0:
            q = p * 2
        else:
            q = p - 1
    return is_param, type(p).__name__, type(q).__name__, isinstance(q, nn.Parameter), q


def test_parameter_argument_keeps_its_class():
    differential(parameter_introspection,
                 [(nn.Parameter(POS.clone()),), (nn.Parameter(NEG.clone()),)], CONVERTS)
    differential(parameter_introspection, [(POS,), (NEG,)], CONVERTS)
    g = to_graph(parameter_introspection, strict=True)
    assert g(POS)[0] is False and g(nn.Parameter(POS.clone()))[0] is True


# ------------------------------------------------------------------ global modes
def autocast_inside(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(x.reshape(1, 3), x.reshape(3, 1))
    return y


def autocast_in_branch(x):
    if x.sum() > 0:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.mm(x.reshape(1, 3), x.reshape(3, 1))
    else:
        y = torch.mm(x.reshape(1, 3), x.reshape(3, 1))
    return y


def autocast_disabled_inside(x):
    with torch.autocast("cpu", enabled=False):
        y = x.reshape(1, 3) @ x.reshape(3, 1)
    return y


def default_dtype_switched_inside(x):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        y = torch.zeros(3) + x
    finally:
        torch.set_default_dtype(old)
    return y


def inference_mode_inside(x):
    with torch.inference_mode():
        y = x * 2
    return y + 1


def deterministic_switched_inside(x):
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(not was)
    try:
        y = torch.zeros(3).index_add_(0, torch.tensor([0, 0, 1]), x)
    finally:
        torch.use_deterministic_algorithms(was)
    return y


@pytest.mark.parametrize("fn", [default_dtype_switched_inside, deterministic_switched_inside,
                                autocast_in_branch])    # (bf16 on one path, f32 on the other)
def test_mode_switched_inside_falls_back(fn):
    differential(fn, [(POS,), (NEG,)], FALLS_BACK)
    assert torch.get_default_dtype() == torch.float32
    assert not torch.is_autocast_enabled("cpu")


def test_inference_mode_inside_converts():
    """Inference mode is carried: the ops recorded in it run in it (inference_ops), so
    ``y + 1`` outside reads an inference tensor as eager's does."""
    differential(inference_mode_inside, [(POS,), (NEG,)], CONVERTS)
    assert not torch.is_inference_mode_enabled()


@pytest.mark.parametrize("fn", [autocast_inside, autocast_disabled_inside])
def test_autocast_inside_converts(fn):
    """CPU autocast is carried: the ops recorded under it run under it (autocast_ops)."""
    differential(fn, [(POS,), (NEG,)], CONVERTS)
    assert not torch.is_autocast_enabled("cpu")


def mm_after_branch(x):
    if x.sum() > 0:
        x = x * 2
    return torch.mm(x.reshape(1, 3), x.reshape(3, 1)), torch.zeros(2)


def test_caller_autocast_is_part_of_the_signature():
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    for fn in (mm_after_branch, autocast_inside):
        differential(fn, [(POS,), (NEG,)], CONVERTS)      # traced outside autocast
        differential(fn, [(POS,), (NEG,)], CONVERTS, modes=autocast)
    g = to_graph(mm_after_branch, strict=True)
    assert g(POS)[0].dtype == torch.float32
    with autocast():                                        # not the cached graph
        assert g(POS)[0].dtype == torch.bfloat16
    assert g(NEG)[0].dtype == torch.float32                # and the graph again after
    assert g.cache_info().traces == 2


def factories_and_promotion(x, n):
    if x.sum() > 0:
        x = x * 2
    return torch.zeros(2), x * 1.5, n * 0.5, torch.tensor([1.0, 2.0])


def test_caller_default_dtype_is_part_of_the_signature():
    import contextlib

    @contextlib.contextmanager
    def float64():
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(old)
    ints = torch.tensor([1, 2, 3])
    g = to_graph(factories_and_promotion, strict=True)
    for context in (contextlib.nullcontext, float64, contextlib.nullcontext, float64):
        for x in (ints, -ints):
            with context():
                exp = factories_and_promotion(x, torch.tensor(3))
                got = g(x, torch.tensor(3))
            assert_same(got, exp)
    assert torch.get_default_dtype() == torch.float32


def grad_switched_by_call(x):
    torch.set_grad_enabled(False)
    y = x * 2
    torch.set_grad_enabled(True)
    if y.sum() > 0:
        y = y + x
    return y, y.requires_grad


def test_set_grad_enabled_call_inside_converts():
    differential(grad_switched_by_call, [(POS.clone().requires_grad_(),),
                                         (NEG.clone().requires_grad_(),)], CONVERTS)
