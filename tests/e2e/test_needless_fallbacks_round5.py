"""Needless fallbacks of fresh eyes round 5 (h96), differential: eager vs ``to_graph``
(default and strict) over several calls, comparing results, Python state with exact types,
gradients and trace counts (round 4's harness), with each case's neighbours (in a loop, in
a method, with a tensor and a Python value) and the cases that must still fall back,
naming the user's line.

Fixed here: ``torch.where`` with a uint8 condition (pytorch-crf's default mask:
``runtime/shape_inference.py`` takes it as bool for the meta kernel); NMS's
``torch.tensor(keep, dtype=...)`` / ``torch.LongTensor(keep)`` of a list grown in a tensor
``while`` (``runtime/tensor_of_items.py``); a list of lists (or other values no stack
holds) appended in a ``for`` over a tensor of static length: the loop unrolls
(``runtime/operators/loops.py``); a list held in a dict made in the call appended in a
tensor loop (POT's ``log['err'].append(err)``: ``transpiler/analysis/activity.py`` makes
``log`` loop state, ``runtime/operators/loops.py`` its grown lists TensorLists).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.e2e.test_needless_fallbacks_round4 import converts, run, same
from transpiler import ConversionError

THIS_FILE = __file__.rsplit("/", 1)[-1]


def falls_back(make, tag, tol=0.0):
    """A FallbackWarning naming this file's line ending ``# <tag>``, eager's records;
    strict: ConversionError."""
    with open(__file__) as f:
        lines = [i + 1 for i, line in enumerate(f.read().splitlines())
                 if line.endswith(f"# {tag}")]
    assert len(lines) == 1, lines
    torch.manual_seed(0)
    want, _, _ = run(make, "eager")
    torch.manual_seed(0)
    got, fell, _ = run(make, "default")
    assert fell and f"{THIS_FILE}:{lines[0]}:" in fell[0], (fell, lines)
    same(got, want, tol)
    with pytest.raises(ConversionError):
        torch.manual_seed(0)
        run(make, "strict")


def _none():
    return None


# ------------------------------------------------------------ torch.where, uint8 condition
def _masks():
    return [torch.tensor([1, 0, 1], dtype=torch.uint8), torch.tensor([0, 0, 1], dtype=torch.uint8),
            torch.tensor([1, 1, 1], dtype=torch.uint8)]


def test_where_uint8_condition():
    def make():
        def f(m, a, b):
            return torch.where(m, a, b)
        calls = [(m, torch.randn(3), torch.arange(3.0)) for m in _masks()]
        return f, calls, _none
    want = converts(make, traces=1)
    assert want[0][0][1][1].dtype == torch.float32


def test_where_uint8_condition_method_broadcast_and_number():
    def make():
        def f(m, a):
            return a.where(m.unsqueeze(1), 0.5), torch.where(m.unsqueeze(1), a, -a).sum(1)
        calls = [(m, torch.randn(3, 2)) for m in _masks()]
        return f, calls, _none
    converts(make, traces=1)


def test_where_uint8_condition_in_loop_with_grads():
    """pytorch-crf's forward algorithm: the uint8 mask row picks the new score per step."""
    def make():
        torch.manual_seed(0)
        lin = nn.Linear(3, 3)

        def f(x, mask):
            score = x[0]
            for i in range(1, x.shape[0]):
                nxt = torch.logsumexp(score.unsqueeze(2) + lin(x[i]).unsqueeze(1), dim=1)
                score = torch.where(mask[i].unsqueeze(1), nxt, score)
            lin.zero_grad()
            out = score.logsumexp(1).sum()
            out.backward()
            return out.detach()
        g = torch.Generator().manual_seed(3)
        calls = [(torch.randn(4, 2, 3, generator=g),
                  (torch.rand(4, 2, generator=g) > 0.3).to(torch.uint8)) for _ in range(3)]
        return f, calls, lambda: [p.grad for p in lin.parameters()]
    converts(make, traces=1, tol=1e-5)


def test_where_uint8_condition_under_tensor_if():
    def make():
        def f(m, a):
            if a.sum() > 0:
                out = torch.where(m, a, a * 2)
            else:
                out = torch.where(m, -a, a)
            return out
        calls = [(m, torch.randn(3) + s) for m, s in zip(_masks(), (3, -3, 3))]
        return f, calls, _none
    converts(make, traces=1)


def test_where_single_argument_uint8_is_nonzero():
    def make():
        def f(m, a):
            idx = torch.where(m)
            return a[idx]
        calls = [(m, torch.randn(3)) for m in _masks()]
        return f, calls, _none
    converts(make, traces=2)


# ---------------------------------------------- torch.tensor / LongTensor of a loop's list
def _orders():
    return [(torch.tensor([3, 1, 4, 1, 5]),), (torch.tensor([9, 2, 6]),), (torch.tensor([7]),),
            (torch.zeros(0, dtype=torch.long),)]


def test_tensor_of_items_grown_in_tensor_while():
    """NMS's `keep.append(order[0].item())` then `torch.tensor(keep, dtype=torch.long)`
    (an empty order too: an empty int64 tensor, as eager)."""
    def make():
        def f(order):
            keep = []
            while order.numel() > 0:
                keep.append(order[0].item())
                order = order[1:][order[1:] > order[0]]
            return torch.tensor(keep, dtype=torch.long, device=order.device)
        return f, _orders(), _none
    want = converts(make, traces=4)     # (lengths 5, 3, 1, 0: 0 and 1 are specialized)
    assert [r[0][1][1].tolist() for r in want] == [[3, 4, 5], [9], [7], []]


def test_legacy_constructors_of_tensors_grown_in_tensor_while():
    """yolov2's `keep.append(i)` of 0-d tensors, `torch.LongTensor(keep)`; and
    FloatTensor/DoubleTensor of `.item()` floats with a Python threshold."""
    def make():
        def f(order, scale):
            keep, vals = [], []
            while order.numel() > 0:
                keep.append(order[0])
                vals.append(order[0].float().item() * scale)
                order = order[1:][order[1:] > order[0]]
            return torch.LongTensor(keep), torch.FloatTensor(vals), torch.DoubleTensor(vals)
        return f, [o + (s,) for o, s in zip(_orders(), (0.5, 1.5, 2.0, 0.1))], _none
    converts(make, traces=4)


def test_tensor_of_list_in_method_and_nested_loop():
    class Suppressor:
        def __init__(self):
            self.calls = 0

        def nms(self, scores, thresh):
            self.calls += 1
            out = []
            for row in range(scores.shape[0]):
                order = scores[row].argsort(descending=True)
                keep = []
                while order.numel() > 0:
                    keep.append(order[0].item())
                    order = order[1:][scores[row][order[1:]] < scores[row][order[0]] - thresh]
                out.append(torch.tensor(keep, dtype=torch.int32))
            return out

    def make():
        s = Suppressor()
        g = torch.Generator().manual_seed(5)
        calls = [(torch.rand(2, 6, generator=g), t) for t in (0.1, 0.3, 0.05)]
        return s.nms, calls, lambda: s.calls
    converts(make, traces=3)


def test_tensor_of_list_detached_from_grads():
    """Eager reads the numbers: the result is a new leaf even when the elements require
    grad; the loss still flows through the list's own stack."""
    def make():
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(4))

        def f(x):
            vals = []
            y = x * w
            while y.numel() > 0:
                vals.append(y[0])
                y = y[1:][y[1:] > y[0]]
            t = torch.tensor(vals, dtype=torch.float64)
            w.grad = None
            torch.stack(vals).sum().backward()
            return t, t.requires_grad
        g = torch.Generator().manual_seed(2)
        return f, [(torch.randn(4, generator=g),) for _ in range(3)], lambda: w.grad
    converts(make)


def test_legacy_long_tensor_of_one_item():
    """The detection notebook's one box: `keep.append(order.item())`, break,
    `torch.LongTensor(keep)` of a plain list holding one traced int."""
    def make():
        def f(scores):
            _, order = scores.sort(0, descending=True)
            keep = []
            while order.numel() > 0:
                if order.numel() == 1:
                    keep.append(order.item())
                    break
                keep.append(order[0].item())
                order = order[1:]
            return torch.LongTensor(keep)
        return f, [(torch.tensor([0.3]),), (torch.tensor([0.9]),)], _none
    converts(make, traces=1)


def test_tensor_of_list_without_dtype_falls_back():
    """`torch.tensor(keep)` without dtype: eager's dtype is float32 for an empty list."""
    def make():
        def f(order):
            keep = []
            while order.numel() > 0:
                keep.append(order[0].item())
                order = order[1:][order[1:] > order[0]]
            return torch.tensor(keep)  # no-dtype
        return f, _orders(), _none
    falls_back(make, "no-dtype")


def test_long_of_float_items_falls_back():
    """`torch.tensor(floats, dtype=torch.long)` truncates Python floats, refuses float
    tensors: not made from the stack (the old refusal stands)."""
    def make():
        def f(x):
            vals = []
            while x.numel() > 0:
                vals.append(x[0])
                x = x[1:][x[1:] > x[0]]
            return torch.tensor(vals, dtype=torch.long)  # float-to-long
        return f, [(torch.tensor([0.5, 2.5, 1.0]),)], _none
    falls_back(make, "float-to-long")


# ------------------------------------------- a list of lists in a for of static length
def _rows():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(n, 4, generator=g),) for n in (3, 3, 5, 1)]


def test_list_of_item_lists_in_for_over_tensor():
    """BiLSTM-CRF's backpointers: `out.append([r.argmax().item(), r.argmin().item()])`."""
    def make():
        def f(x):
            out = []
            for r in x:
                out.append([r.argmax().item(), r.argmin().item()])
            return out
        return f, _rows(), _none
    want = converts(make, traces=3)
    assert type(want[0][0][1][0][0]) is int


def test_list_of_mixed_lists_and_dicts_with_state():
    """Lists mixing a tensor and an int, dicts, an enumerate, a Python scale and a
    tensor carried across iterations, in a method counting its calls."""
    class Decoder:
        def __init__(self):
            self.calls = 0

        def decode(self, x, scale):
            self.calls += 1
            hist, seen, acc = [], [], torch.zeros(4)
            for k, r in enumerate(x):
                acc = acc * scale + r
                hist.append([acc.sum(), r.argmax().item()])
                seen.append({"k": k, "best": acc.argmax().item()})
            return hist, seen, acc

    def make():
        d = Decoder()
        return d.decode, [a + (s,) for a, s in zip(_rows(), (0.5, 0.5, 2.0, 1.0))], \
            lambda: d.calls
    converts(make, traces=4, tol=1e-6)


def test_list_of_lists_with_gradients():
    def make():
        torch.manual_seed(0)
        lin = nn.Linear(4, 2)

        def f(x):
            rows = []
            for r in x:
                y = lin(r)
                rows.append([y, y.argmax().item()])
            lin.zero_grad()
            loss = sum(p[0].sum() for p in rows)
            loss.backward()
            return loss.detach(), [p[1] for p in rows]
        return f, _rows(), lambda: [p.grad for p in lin.parameters()]
    converts(make, traces=3, tol=1e-6)


def test_list_of_lists_in_a_loop_of_run_time_length_falls_back():
    """A `while` on a tensor has no static length to unroll: the refusal stands."""
    def make():
        def f(x):
            out = []
            while x.numel() > 0:  # while-lists
                out.append([x[0].item()])
                x = x[1:][x[1:] > x[0]]
            return out
        return f, [(torch.tensor([1.0, 3.0, 2.0]),)], _none
    falls_back(make, "while-lists")


# ---------------------------------------------------- a list held in a dict, tensor loop
def _halvings():
    return [(torch.tensor([8.0, 8.0]),), (torch.tensor([3.0, 1.0]),), (torch.tensor([0.2, 0.1]),)]


def test_dict_held_list_appended_in_tensor_while():
    """POT's `log = {'err': []}` ... `log['err'].append(err)`; other keys kept."""
    def make():
        def f(x):
            log = {'err': [], 'name': 'sinkhorn', 'n': 0}
            while x.sum() > 1:
                x = x * 0.5
                log['err'].append(x.sum())
            return x, log
        return f, _halvings(), _none
    want = converts(make, traces=3)
    assert [len(r[0][1][1]["err"]) for r in want] == [4, 2, 0]


def test_dict_held_lists_of_items_in_for_and_method():
    class Solver:
        def __init__(self):
            self.calls = 0

        def run(self, x, thr):
            self.calls += 1
            log = {'err': [], 'step': []}
            for k in range(int(x.numel())):
                if x[k] > thr:
                    x = x * 0.9
                log['err'].append(x.sum().item())
                log['step'].append(x[k])
            return log

    def make():
        s = Solver()
        g = torch.Generator().manual_seed(1)
        return s.run, [(torch.rand(4, generator=g), t) for t in (0.5, 0.2)], lambda: s.calls
    converts(make)


def test_dict_held_list_with_gradients():
    def make():
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.tensor([0.9, 0.8]))

        def f(x):
            log = {'vals': []}
            y = x
            while y.sum() > 1:
                y = y * w
                log['vals'].append(y.sum())
            w.grad = None
            y.sum().backward()
            return y.detach(), log['vals']
        return f, _halvings(), lambda: w.grad
    converts(make, traces=3, tol=1e-6)


def test_dict_held_list_the_caller_sees_falls_back():
    """A closure's dict: the caller's list must grow, so the call runs eagerly."""
    def make():
        log = {'err': []}

        def f(x):
            while x.sum() > 1:
                x = x * 0.5
                log['err'].append(x.sum())  # caller-dict
            return x
        return f, _halvings()[:1], lambda: log
    falls_back(make, "caller-dict")


def test_dict_held_list_also_named_falls_back():
    """`errs` names the dict's list too: a new container would leave it empty."""
    def make():
        def f(x):
            errs = []
            log = {'err': errs}
            while x.sum() > 1:  # aliased-list
                x = x * 0.5
                log['err'].append(x.sum())
            return errs, log
        return f, _halvings()[:1], _none
    falls_back(make, "aliased-list")
