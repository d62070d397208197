"""The issue's acceptance case for the debugging tools: a data-dependent ``while`` with a
nested ``if`` (shared by the compare and explain/probe tests)."""


def acceptance(x):
    n = 0
    while x.sum() > 1:
        if x.max() > 3:
            x = x - 2
        else:
            x = x * 0.5
        n = n + 1
    return x, n
