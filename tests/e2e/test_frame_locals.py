"""``locals()``, ``vars()`` and ``dir()`` in converted code show the user's names only
(transpiler/converters/frame_locals.py, runtime/operators/frame_locals.py): eager's keys,
values and order at the converted function's own level; refused (eager, FallbackWarning
naming the line; strict: ConversionError) where the call would read a generated body
function's frame. Before, `vars()` held the generated code's `tg` and a comprehension over
`locals()` read its body function's frame, silently."""
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_code, to_graph

pytestmark = pytest.mark.filterwarnings("error::transpiler.FallbackWarning")


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b), (list(a), list(b))
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


def _converts(fn, *calls):
    g = to_graph(fn)
    for args in calls:
        _same(g(*args), fn(*args))
    s = to_graph(fn, strict=True)
    for args in calls:
        _same(s(*args), fn(*args))
    return g


def _falls_back(fn, line, *calls):
    g = to_graph(fn)
    msgs = []
    for args in calls:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = g(*args)
        _same(got, fn(*args))
        msgs += [str(w.message) for w in seen if issubclass(w.category, FallbackWarning)]
    with pytest.raises(ConversionError) as err:
        to_graph(fn, strict=True)(*calls[0])
    return msgs, str(err.value)


_CALLS = [(torch.arange(3.), 2), (-torch.arange(4.), 5), (torch.ones(2, 2), 0)]


def args_and_locals(x, n):
    y = x * n
    d = locals()
    return y + 1, d


def keys_in_frame_order(x, n):
    total = x.sum()
    scale = n + 1
    return total * scale, list(locals())


def vars_names_sorted(x, step):
    names = sorted(vars())
    return x * 2, names


def dir_names(x, n):
    a = x + n
    return a, dir()


def hparams_dict_comprehension(x, lr, depth=4):
    hp = {k: v for k, v in locals().items() if not isinstance(v, torch.Tensor)}
    return x * lr, hp


def after_tensor_branch(x, n):
    if x.sum() > 0:
        y = x + 1
    else:
        y = x - 1
    d = dict(locals())
    return y, sorted(d), d["y"]


def not_yet_bound(x, n):
    seen = sorted(locals())
    later = x * n
    return later, seen


_FREE = 3


def make_closure():
    k = torch.tensor(2.0)

    def uses_free(x, n):
        y = x * k + n
        return y, sorted(locals())
    return uses_free


def cell_for_lambda(x, n):
    scale = n * 2
    f = lambda v: v * scale           # noqa: E731 (scale is a cell variable)
    return f(x), list(locals())


@pytest.mark.parametrize("fn", [args_and_locals, keys_in_frame_order, vars_names_sorted,
                                dir_names, hparams_dict_comprehension, after_tensor_branch,
                                not_yet_bound, make_closure(), cell_for_lambda],
                         ids=lambda f: f.__name__)
def test_top_level_frame_readers_match_eager(fn):
    _converts(fn, *_CALLS)


def test_generated_names_are_not_shown():
    g = _converts(vars_names_sorted, *_CALLS)
    assert "tg" not in g(torch.ones(1), 1)[1]
    assert "tg.frame_locals(vars" in to_code(vars_names_sorted)


def test_the_graph_serves_new_values():
    g = to_graph(args_and_locals)
    for x, n in [(torch.ones(3), 2), (torch.full((3,), 4.0), 2), (torch.zeros(3), 2)]:
        _same(g(x, n), args_and_locals(x, n))


class Logs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x, temperature=1.0):
        h = self.lin(x) / temperature
        frame = {k: type(v).__name__ for k, v in vars().items()}
        return h.relu(), frame


def test_in_a_module_forward_with_gradients():
    torch.manual_seed(0)
    m = Logs()
    g = to_graph(m)
    x = torch.randn(4, 3)
    (a, fa), (b, fb) = m(x, 2.0), g(x, 2.0)
    assert fa == fb and list(fa) == list(fb)
    torch.testing.assert_close(b, a, rtol=0, atol=0)
    a.sum().backward()
    ga = m.lin.weight.grad.clone()
    m.zero_grad()
    b.sum().backward()
    torch.testing.assert_close(m.lin.weight.grad, ga)


def locals_in_tensor_branch(x, n):
    if x.sum() > 0:
        y = x + 1
        d = sorted(locals())
    else:
        y = x - 1
        d = sorted(locals())
    return y, d


def locals_in_python_branch(x, n):
    if n > 1:
        d = sorted(locals())
    else:
        d = []
    return x * n, d


def locals_in_list_comprehension(x, n):
    return x * 2, [v for v in locals().values() if isinstance(v, int)]


def locals_in_loop(x, n):
    out = []
    for i in range(n):
        out.append(len(locals()))
    return x + 1, out


def locals_in_nested_def(x, n):
    def inner(v):
        return sorted(locals())
    return x * n, inner(x)


def def_in_loop_reads_locals(x, n):
    out = []
    for i in range(2):
        def inner(v):
            if v.sum() > 0:
                return sorted(locals())  # (in a loop body)
            return []
        out.append(inner(x))
    return x, out


def lambda_reads_locals(x, n):
    names = lambda a, b=1: sorted(locals())
    return x + n, names(n)


def nested_def_with_closure_and_branch(x, n):
    scale = n * 2

    def inner(v, k=3):
        if v.sum() > 0:
            w = v * scale
        else:
            w = v - scale
        return w, sorted(locals())
    return inner(x)


@pytest.mark.parametrize("fn", [locals_in_nested_def, lambda_reads_locals,
                                nested_def_with_closure_and_branch],
                         ids=lambda f: f.__name__)
def test_a_users_nested_function_reads_its_own_frame(fn):
    converted = to_graph(fn, strict=True)
    for x, n in [(torch.ones(2), 2), (-torch.ones(3), 1)]:
        want, got = fn(x, n), converted(x, n)
        assert repr(got) == repr(want)      # (the tensors' values, the names' lists)


def locals_in_ifexp(x, n):
    d = sorted(locals()) if n > 1 else []
    return x, d


@pytest.mark.parametrize("fn,line", [
    (locals_in_tensor_branch, "d = sorted(locals())"),
    (locals_in_python_branch, "d = sorted(locals())"),
    (locals_in_list_comprehension, "return x * 2, [v for v in locals().values()"),
    (locals_in_loop, "out.append(len(locals()))"),
    (def_in_loop_reads_locals, "return sorted(locals())  # (in a loop body)"),
    (locals_in_ifexp, "d = sorted(locals()) if n > 1 else []"),
], ids=lambda v: getattr(v, "__name__", "line"))
@pytest.mark.filterwarnings("default::transpiler.FallbackWarning")
def test_other_frames_fall_back_naming_the_line(fn, line):
    msgs, strict = _falls_back(fn, line, *_CALLS)
    assert msgs and "locals()" in msgs[0] and __file__ in msgs[0], msgs
    assert "locals()" in strict


def shadowing_locals(x, n):
    return x * n, locals()


def test_a_user_function_named_locals_is_called():
    called = []

    def locals():                       # noqa: A001 - the user's own function
        called.append(1)
        return {"mine": True}

    def f(x, n):
        return x * n, locals()
    g = to_graph(f)
    _same(g(torch.ones(2), 3), f(torch.ones(2), 3))
    assert called


def test_vars_of_an_object_is_untouched():
    class Cfg:
        def __init__(self):
            self.a, self.b = 1, 2.0

    def f(x, cfg):
        return x * cfg.a, sorted(vars(cfg))
    _converts(f, (torch.ones(2), Cfg()))
