"""The loop programs the loop-kernel tests convert: the RNN ``for xt in xs`` (a counted loop
whose body is one kernel) and Newton's ``while`` (test and body one kernel each), plain and
counting its steps."""
import torch


def rnn(xs, h, W, U, b):
    for xt in xs:
        h = torch.tanh(xt @ W + h @ U + b)
    return h


def newton(x):
    y = 0.5 * (x + 1.0)
    while torch.max(torch.abs(y * y - x) / x) > 1e-5:
        y = 0.5 * (y + x / y)
    return y


def newton_steps(x):
    y = 0.5 * (x + 1.0)
    steps = torch.tensor(0)
    while torch.max(torch.abs(y * y - x) / x) > 1e-5:
        y = 0.5 * (y + x / y)
        steps = steps + 1
    return y, steps
