"""The seed's section 3: debugging a static graph vs debugging eager code, with tograph.

A static graph cannot be stepped through: TF1 users fetch extra nodes in ``sess.run``, put
``tf.print`` into the graph, or read the graph in TensorBoard. Eager users ``print`` and
``pdb.set_trace()``. tograph offers both worlds for one function:

  static route 1, fetch intermediates:  Session.run([c, extra]) / f.probe(x, names=[...])
  static route 2, print inside the graph: print(...) in converted code is a graph op
  static route 3, look at the graph:    graph.render("f.svg"), graph.to_tensorboard(dir)
  eager route, print and pdb:           with run_eagerly(): f(x) runs the original Python
  and to tell the two apart:            compare(f, x), f.explain(x)

Run:  python examples/debugging.py
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import runtime  # noqa: E402
from transpiler import compare, run_eagerly, to_graph  # noqa: E402


@to_graph
def normalize(x, steps):
    """Halve x until its norm is below 1, damping negative sums; print inside the graph."""
    i = 0
    while x.norm() > 1.0:                 # a tensor loop: a `while` node
        if x.sum() > 0:                   # a nested tensor `if`: a `cond` node
            x = x * 0.5
        else:
            x = x * 0.25
        i += 1
    for _ in range(steps):                # a Python loop: unrolled
        x = torch.tanh(x)
    print("normalize: iterations =", i)   # static route 2: a print op in the graph
    return x, i


def static_route_1_fetch():
    print("--- static route 1: fetch intermediate values ---")
    graph = runtime.Graph()
    with graph.as_default():
        a = runtime.placeholder(torch.float32, shape=(2, 2), name="a")
        extra = a * 10                    # an inner node we also want to see
        c = torch.relu(extra - 5)
    with runtime.Session(graph) as sess:
        c_val, extra_val = sess.run([c, extra], feed_dict={a: torch.eye(2)})
    print("TF1 style: sess.run([c, extra]) ->", c_val.tolist(), "and", extra_val.tolist())
    x = torch.tensor([3.0, -4.0, 2.0])
    probes = normalize.probe(x, 1, names=["x", "i"])
    print("tograph: normalize.probe(x, names=['x', 'i']) -> per while-iteration values")
    print("  x per iteration:", [[round(v, 4) for v in row] for row in probes["x"].tolist()])
    print("  i per iteration:", probes["i"].tolist(), " result unchanged:",
          torch.equal(probes.result[0], normalize(x, 1)[0]))


def static_route_2_print():
    print("--- static route 2: print inside the graph (like tf.print) ---")
    x = torch.tensor([3.0, -4.0, 2.0])
    print("the traced graph holds a print op:",
          any(n.op == "print_values" for n in normalize.graph(x, 1).walk()))
    normalize(x, 1)                       # prints from the graph, on every run
    normalize(x * 100, 1)


def static_route_3_look(out_dir):
    print("--- static route 3: look at the graph ---")
    graph = normalize.graph(torch.tensor([3.0, -4.0, 2.0]), 1)
    print(graph)
    try:
        path = graph.render(os.path.join(out_dir, "normalize.svg"))
        print("Graphviz picture (while and cond as clusters):", path)
    except Exception as e:                # Graphviz missing: say so, go on
        print("no picture:", e)
    try:
        events = graph.to_tensorboard(os.path.join(out_dir, "tensorboard"))
        print("TensorBoard event file (tensorboard --logdir ...):", events)
    except ImportError as e:
        print("no TensorBoard file:", e)


def eager_route():
    print("--- eager route: run_eagerly() runs the original Python (print, pdb work) ---")

    @to_graph
    def shapes(x):
        print("  inside, x is a", type(x).__name__, "of shape", tuple(x.shape))
        return x * 2
    x = torch.ones(2, 3)
    print("converted (traced: x is symbolic, yet answers type() as the real tensor):")
    shapes(x)
    with run_eagerly():                   # here one could call pdb.set_trace() inside
        print("with run_eagerly(): every call runs Python with real tensors:")
        shapes(x)
        shapes(x)


def compare_and_explain():
    print("--- telling the two worlds apart: compare and explain ---")
    for x in (torch.tensor([3.0, 4.0]), torch.tensor([-3.0, -4.0])):
        print(compare(normalize, x, 2))
    print(normalize.explain(torch.tensor([3.0, 4.0]), 2))


def main():
    out_dir = tempfile.mkdtemp(prefix="tograph-debugging-")
    try:
        static_route_1_fetch()
        static_route_2_print()
        static_route_3_look(out_dir)
        eager_route()
        compare_and_explain()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
