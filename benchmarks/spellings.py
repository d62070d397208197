"""Other spellings of the benchmark workloads (issue 13): the same computation written the
other ways a user writes it, so a speedup that holds for one spelling only shows.

Each function takes the arguments of the ``workloads.py`` function it respells. (An RNN
over a list of step tensors is ``workloads.rnn_for`` itself, given a list.)
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


# --------------------------------------------------------------------------- the RNN
def rnn_while(xs, h, w_ih, w_hh, bias):
    t = 0
    while t < xs.shape[0]:
        h = torch.tanh(xs[t] @ w_ih + h @ w_hh + bias)
        t += 1
    return h


def rnn_unbind(xs, h, w_ih, w_hh, bias):
    for xt in xs.unbind(0):
        h = torch.tanh(xt @ w_ih + h @ w_hh + bias)
    return h


# --------------------------------------------------------------------------- Newton
def newton_sqrt_fixed(x):
    """Newton's square root with a fixed number of steps (8: within 1e-5 for x <= 100)."""
    y = 0.5 * (x + 1.0)
    for _ in range(8):
        y = 0.5 * (y + x / y)
    return y


# --------------------------------------------------------------------------- GELU
def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_functional(x):
    return F.gelu(x)


# --------------------------------------------------------------------------- normalization
def layernorm_softmax_functional(x, gamma, beta):
    h = F.layer_norm(x, x.shape[-1:], gamma, beta, 1e-5)
    return torch.softmax(h, dim=-1)


def softmax_by_hand(x, gamma, beta):
    h = x * gamma + beta
    e = torch.exp(h - h.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
