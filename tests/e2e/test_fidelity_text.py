"""Text at run time: print, f-strings, str.format, %, str/repr/format of tensors inside
tensor branches and loops print exactly what eager prints, on every call; a Python number
standing as a 0-d graph value prints as the number; a tensor's text used as a Python str
falls back (strict: ConversionError) with a message about text, not control flow."""
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

INPUTS = [(torch.tensor([1.0, 2.0, 3.0]), 2), (torch.tensor([-1.0, -2.5, 0.5]), 3),
          (torch.tensor([4.0, -0.125, 9.0]), 1)]


def same_text(capsys, fn, inputs=INPUTS, strict_modes=(True, False)):
    """Eager and converted print the same lines and return the same values, per call."""
    for strict in strict_modes:
        g = to_graph(fn, strict=strict)
        for args in inputs:
            exp = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            eager_out = capsys.readouterr().out
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = g(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            assert capsys.readouterr().out == eager_out
            assert_same(got, exp)
    return to_graph(fn, strict=True)


def falls_back(fn, args, match):
    with pytest.warns(FallbackWarning, match=match):
        assert_same(to_graph(fn)(*args), fn(*args))
    with pytest.raises(ConversionError, match=match):
        to_graph(fn, strict=True)(*args)


# ------------------------------------------------------------------ f-strings
def fstr_in_branch(x, n):
    s = x.sum()
    if s > 0:
        print(f"s={s:.3f} pos {x} n={n}")
        y = x * 2.0
    else:
        print(f"neg {s!r} {x.abs().max():8.2f}|{n:>3}|")
        y = -x
    return y


def fstr_in_loop(x, n):
    i = 0
    while x.abs().sum() < 40.0:
        x = x * 2.0
        print(f"step {i}: x={x} mean={x.mean():+.4f} {x.sum():e}")
        i += 1
    return x


def fstr_nested_spec(x, n):
    width = 6 + n
    if x.sum() > 0:
        print(f"[{x.sum():{width}.2f}] [{x.max()!s:>20}] {x.min()=}")
    return x + 1.0


@pytest.mark.parametrize("fn", [fstr_in_branch, fstr_in_loop, fstr_nested_spec])
def test_fstrings_print_eagers_text(capsys, fn):
    same_text(capsys, fn)


def test_fstring_print_is_a_graph_op_not_trace_time_text(capsys):
    g = same_text(capsys, fstr_in_branch)
    graph = g.graph(*INPUTS[0])
    prints = [n for n in graph.walk() if n.op == "print_values"]
    assert len(prints) == 2 and all("layout" in n.kwargs for n in prints)


# ------------------------------------------------------------------ format, %, str, repr
def format_and_percent(x, n):
    if x.sum() > 0:
        s = x.sum()
        print("fmt {0} {1:.2f} {k} {0!r}".format(x, s, k=n), "{}|{:>4}".format(n, n))
        print("pct %.3f %s %d %r %5.1f%%" % (s, x, n, x.max(), s))
        print("one %s" % x)
        print("map %(a)s %(b).1f" % {"a": x, "b": s})
        print(str.format("{}-{}", s, n))
    return x


def str_repr_format(x, n):
    for k in range(n):
        if x[k] > 0:
            print("str", str(x[k]), repr(x), format(x.sum(), ".1f"), ascii(x[k]))
            print("cat " + str(x.max()) + " | " + repr(k) + ", ".join(["a", str(x[0])]))
    return x


@pytest.mark.parametrize("fn", [format_and_percent, str_repr_format])
def test_format_methods_print_eagers_text(capsys, fn):
    same_text(capsys, fn)


def test_assert_message_made_at_run_time():
    def f(x):
        s = x.sum()
        assert s > 0, f"sum was {s:.2f} for {x}"
        return x * 2.0
    g = to_graph(f, strict=True)
    assert_same(g(torch.ones(2)), f(torch.ones(2)))
    for fn in (f, g):
        with pytest.raises(AssertionError) as info:
            fn(-torch.ones(2))
        # (pytest rewrites this module's asserts: it appends the test to eager's message;
        # the graph's error names the op and the user's line before it)
        assert str(info.value).splitlines()[0].endswith(": sum was -2.00 for tensor([-1., -1.])") \
            or str(info.value).splitlines()[0] == "sum was -2.00 for tensor([-1., -1.])"


# ------------------------------------------------------------------ Python-number stand-ins
def range_index_after_break(x, n):
    for j in range(4):
        if x.sum() > 20.0:
            break
        print("step", j)
        print(f"j={j} {j:03d} {j!r}", j * 2, j + 1)
        x = x * 3.0
    return x


def counter_and_size(x, n):
    k = x[x > 0].shape[0]            # a size known only at run time: an int
    print("k", k, f"{k}", k * 2, k // 2)
    return x * k


@pytest.mark.parametrize("fn", [range_index_after_break, counter_and_size])
def test_python_number_stand_ins_print_as_numbers(capsys, fn):
    same_text(capsys, fn)


# ------------------------------------------------------------------ Python values
def python_values(x, n):
    name = "w"
    print(f"{name}={n:>4} {n!r} {3.5:.2f} {'q'!a} {n=}", "%s|%d" % (name, n),
          "{0}{1}".format(name, n))
    return x + n


def test_python_values_format_as_python(capsys):
    same_text(capsys, python_values)


def test_text_helpers_return_python_strs_for_python_values():
    def f(x, n):
        return x, f"{n:>3}", "%d!" % n, "{}?".format(n), str(n), repr("a")
    g = to_graph(f, strict=True)
    assert g(torch.ones(1), 4)[1:] == ("  4", "4!", "4?", "4", "'a'")


# ------------------------------------------------------------------ refusals
def test_tensor_text_used_as_a_str_falls_back():
    def as_key(x):
        d = {}
        if x.sum() > 0:
            d[f"{x.sum()}"] = 1
        return x, len(d)
    falls_back(as_key, (torch.ones(2),), match="text")

    def compared(x):
        return x * 2.0 if str(x.sum()) == "tensor(2.)" else x
    falls_back(compared, (torch.ones(2),), match="text")

    def returned(x):
        return f"{x}"
    falls_back(returned, (torch.ones(2),), match="text")


def test_library_text_of_a_tensor_falls_back_without_control_flow_talk():
    import pprint       # (a logger's record is a graph op: its text is made when it runs)

    def f(x):
        pprint.pformat(x)
        return x

    with pytest.warns(FallbackWarning) as record:
        to_graph(f)(torch.ones(2))
    message = str(record[0].message)
    assert "text" in message and "control flow" not in message


def numbers_through_branches(x, n):
    k = 0
    acc = 0.0
    for j in range(3):
        if x.sum() > j:
            k += 1
            acc = acc + 0.1
        x = x - 1.0
        print("step", j, k, f"{k}:{acc:.3f} {acc * 2:8.4f}", k > 1, -k, f"{k / 4:.2f}", "%.2f" % acc)
    print("end", k, int(x.sum()), float(x.max()), bool(x.min() > 0), "%d %e" % (k, acc))
    return x


def test_numbers_through_tensor_control_flow_print_as_numbers(capsys):
    same_text(capsys, numbers_through_branches)


def test_all_digits_of_a_float_carried_through_tensor_ifs_print_as_pythons(capsys):
    def f(x):
        acc = 0.0
        for j in range(3):
            if x.sum() > j:
                acc = acc + 0.1
        print("acc", acc)            # Python: 0.30000000000000004 (the graph's float64)
        return x
    same_text(capsys, f, [(torch.ones(3) * 5,), (torch.ones(3) * 0.4,)])


def test_printing_a_value_whose_type_depends_on_the_path_falls_back():
    def f(x):
        acc = 0.0
        if x.sum() > 0:
            acc = acc + x.sum()
        print("acc", acc)
        return x
    falls_back(f, (torch.ones(2),), match="depends on the path taken")


def test_containers_of_python_number_stand_ins_print_as_python_containers(capsys):
    def f(x, n):
        k = 0
        if x.sum() > 0:
            k = k + 1
        print("held", [k, n], (k,), {"k": k}, f"{[k]!r}", [(k, [k > 0])])
        return x
    same_text(capsys, f)
