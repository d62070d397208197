"""Autograd run inside converted code, shared by the fidelity and training-step tests: a
leaf made inside the function gets its gradient from a backward behind a tensor if."""
import torch


def backward_inside(x):
    w = torch.ones(3, requires_grad=True)
    loss = (x * w).sum()
    if loss > 0:
        loss = loss * 2
    loss.backward()
    return w.grad
