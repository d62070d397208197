"""Programs with data-dependent control flow to export, and inputs taking each path at
two batch sizes (every input's first dimension is the batch)."""
import torch
from torch import nn


def if_elif(x):
    s = x.sum()
    if s > 1:
        y = x * 2
    elif s < -1:
        y = -x
    else:
        y = x + 1
    return y


def ternary(x):
    return x * 2 if x.mean() > 0 else x - 3


def halving_while(x):
    i = 0
    while x.abs().max() > 1:
        x = x / 2
        i += 1
    return x, i


def for_over_rows(x):
    acc = torch.zeros(x.shape[1])
    for row in x:
        acc = acc + torch.tanh(row)
    return acc


def for_with_break(x):
    total = torch.zeros(())
    for row in x:
        if row.sum() > 2:
            break
        total = total + row.sum()
    return total


def early_return(x):
    if x.sum() > 0:
        return x * 3
    y = x.abs()
    return y + 1


class Gate(nn.Module):
    """A module whose forward branches on its activations and loops until they shrink."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.mean() > 0:
            h = torch.relu(h)
        else:
            h = torch.sigmoid(h) - 1
        while h.abs().sum() > 4:
            h = h * 0.5
        return h


def _rows(n, value):
    return torch.full((n, 4), value) + 0.01 * torch.arange(n * 4.0).reshape(n, 4)


# name -> (function or module factory, {path label: input maker(batch)})
PROGRAMS = {
    "if_elif": (if_elif, {"if": lambda n: (_rows(n, 1.0),), "elif": lambda n: (_rows(n, -1.0),),
                          "else": lambda n: (_rows(n, 0.0) - 0.01 * n,)}),
    "ternary": (ternary, {"then": lambda n: (_rows(n, 1.0),), "else": lambda n: (_rows(n, -1.0),)}),
    "halving_while": (halving_while, {"zero": lambda n: (_rows(n, 0.1),),
                                      "many": lambda n: (_rows(n, 9.0),)}),
    "for_over_rows": (for_over_rows, {"rows": lambda n: (_rows(n, 0.5),)}),
    "for_with_break": (for_with_break, {"breaks": lambda n: (_rows(n, 1.0),),
                                        "runs": lambda n: (_rows(n, 0.1),)}),
    "early_return": (early_return, {"returns": lambda n: (_rows(n, 1.0),),
                                    "falls_through": lambda n: (_rows(n, -1.0),)}),
    "gate_module": (Gate, {"relu": lambda n: (_rows(n, 3.0),), "sigmoid": lambda n: (_rows(n, -3.0),)}),
}
BATCHES = (3, 6)
