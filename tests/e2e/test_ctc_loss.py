"""``F.ctc_loss`` with tensor lengths converts (its result's shape has a rule: no meta or
fake kernel gives it, its work space being as long as the longest target): the loss of
transformers' ``loss_ctc.py`` (a mask over padded labels, ``masked_select``), compared
with eager in every reduction, with gradients; before, it fell back on every call."""
import pytest
import torch

from e2e_helpers import assert_same
from transpiler import to_graph


def ctc(logits, labels, logit_lengths, reduction: str):
    mask = labels >= 0
    log_probs = torch.nn.functional.log_softmax(logits, dim=-1).transpose(0, 1)
    return torch.nn.functional.ctc_loss(log_probs, labels.masked_select(mask), logit_lengths,
                                        mask.sum(-1), reduction=reduction, zero_infinity=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_with_tensor_lengths(reduction):
    torch.manual_seed(0)
    g = to_graph(ctc, strict=True)
    for labels in (torch.tensor([[1, 2, 3, -100], [4, 5, -100, -100]]),
                   torch.tensor([[1, -100, -100, -100], [4, 5, 2, 1]])):
        logits = torch.randn(2, 12, 6, requires_grad=True)
        lengths = torch.tensor([12, 9])
        exp, got = ctc(logits, labels, lengths, reduction), g(logits, labels, lengths, reduction)
        assert_same(got, exp)
        grad_exp, = torch.autograd.grad(exp.sum(), logits)
        grad_got, = torch.autograd.grad(got.sum(), logits)
        assert_same(grad_got, grad_exp)
    assert g.cache_info().fallbacks == 0
