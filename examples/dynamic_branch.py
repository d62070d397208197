"""The seed's figure 2: a data-dependent branch, eager vs converted.

Eager PyTorch runs one branch per call, chosen by Python at run time. A static graph must
hold both branches and choose inside the graph. ``@to_graph`` rewrites the Python ``if``
into a call that, for a tensor condition, traces both branches into one ``cond`` node.

Run:  python examples/dynamic_branch.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from transpiler import to_code, to_graph  # noqa: E402


def scale_or_flip(x, w):
    """Grow positive activations, flip and damp negative ones; clip repeatedly if big."""
    h = torch.matmul(x, w)
    if h.sum() > 0:
        y = torch.relu(h) * 2.0
    else:
        y = -h * 0.5
    while y.abs().max() > 4.0:
        y = y / 2.0
    return y


def main():
    torch.manual_seed(0)
    w = torch.randn(4, 4)
    inputs = {"ones": torch.ones(2, 4), "-ones": -torch.ones(2, 4),
              "tens": 10 * torch.ones(2, 4)}

    print("=== eager: Python decides, one branch per call ===")
    for label, x in inputs.items():
        taken = "then" if torch.matmul(x, w).sum() > 0 else "else"
        print(f"{label:>8}: runs the {taken!r} branch only")

    converted = to_graph(scale_or_flip, strict=True)
    print("\n=== converted: the generated code (to_code) ===")
    print(to_code(scale_or_flip))

    print("=== converted: the graph holds both branches in a cond node ===")
    graph = converted.graph(inputs["ones"], w)
    print(graph)
    ops = [n.op for n in graph.nodes]
    print(f"\ntop-level ops: {ops}")

    print("\n=== eager and converted agree on inputs taking either branch ===")
    for label, x in inputs.items():
        eager, graphed = scale_or_flip(x, w), converted(x, w)
        same = torch.allclose(eager, graphed, rtol=1e-5, atol=1e-6)
        print(f"{label:>8}: max |eager - graph| = {(eager - graphed).abs().max().item():.2e}"
              f"  -> {'match' if same else 'MISMATCH'}")
        assert same
    print(f"\none graph served all {len(inputs)} inputs: "
          f"{len(converted._entries)} trace(s) for one input signature")


if __name__ == "__main__":
    main()
