"""The seed's section 2 ("二、代码表现与实际执行对比"): static graph vs dynamic graph.

The same tiny program, a 2x2 matrix product, written two ways:

1. Static graph (TF1 style, with ``runtime``): declaring ``a``, ``b`` and ``c`` only builds
   a graph. Printing ``c`` shows a node (name, shape, dtype), not numbers. Values appear
   only when a ``Session`` runs the graph with a value fed for the placeholder.
2. Dynamic graph (PyTorch's default, eager): every line computes at once, so printing
   ``c`` shows its values.

Run:  python examples/static_vs_dynamic.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import runtime  # noqa: E402


def header(title: str) -> None:
    print()
    print("=" * 72)
    print(title)
    print("=" * 72)


def static_graph() -> None:
    header("1. Static graph: build first, run later (\"静态图模式\", TF1-style, runtime)")
    with runtime.Graph().as_default() as graph:
        # Step 1: declare the graph. Nothing is computed here.
        a = runtime.placeholder(torch.float32, shape=(2, 2), name="input_a")
        b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
        c = torch.matmul(a, b)

        print("Printing the tensor c directly gives a graph node, not values:")
        print(c)
        print()
        print("The graph that was recorded:")
        print(graph)

        # Step 2: open a Session and feed a value for the placeholder.
        with runtime.Session() as sess:
            result = sess.run(c, feed_dict={a: [[2.0, 0.0], [0.0, 2.0]]})
            print()
            print("Result after Session.run (c = a @ b with a = [[2, 0], [0, 2]]):")
            print(result)

            c_value, b_value = sess.run([c, b], feed_dict={a: [[2.0, 0.0], [0.0, 2.0]]})
            print()
            print("Fetching [c, b] in one run:")
            print("c =", c_value)
            print("b =", b_value)


def dynamic_graph() -> None:
    header("2. Dynamic graph: define and compute at once (\"动态图模式\", PyTorch eager)")
    a = torch.tensor([[2.0, 0.0], [0.0, 2.0]], requires_grad=True)
    b = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    c = torch.matmul(a, b)
    print("Printing the tensor c directly gives its values right away:")
    print(c)


def main() -> None:
    static_graph()
    dynamic_graph()


if __name__ == "__main__":
    main()
