"""A C function that only answers a question about the interpreter (``torch._C.
_get_tracing_state()``, torchvision's ``_is_tracing()``) may be asked in tensor-dependent
control flow: it is the same on every path, so the branch converts (it fell back as a call
"on an object whose state the graph cannot follow": every torchvision detection model's
``batched_nms``)."""
import torch

from transpiler import to_graph


def gate(x):
    kept = x[x > 0]
    if kept.numel() > 2 and not torch._C._get_tracing_state():
        return kept * 2
    return kept + 1


def test_tracing_state_in_a_tensor_branch_converts():
    converted = to_graph(gate, strict=True)
    for x in [torch.tensor([3.0, -1.0, 2.0, 5.0]), torch.tensor([-1.0, 2.0])]:
        torch.testing.assert_close(converted(x), gate(x), rtol=0, atol=0)
