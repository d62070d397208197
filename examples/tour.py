"""A tour of tograph: runs every example in order, each under its own banner.

Run:  python examples/tour.py      (the README's first Quick start command does this)
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# (file, what it shows) in the order of the seed document's sections
STOPS = [
    ("static_vs_dynamic.py", "section 2: a TF1-style static graph (placeholder, Session.run) "
                             "next to eager PyTorch"),
    ("dynamic_branch.py", "figure 2: a data-dependent branch, eager vs @to_graph (cond/while "
                          "nodes)"),
    ("debugging.py", "section 3: the static graph's debugging routes (fetch, in-graph print, "
                     "pictures/TensorBoard) next to eager print/pdb, compare and explain"),
    ("deploy.py", "section 4: export with control flow to torch.export (.pt2) and ONNX, run "
                  "without Python source or tograph"),
    ("decode.py", "a real model in a loop: GPT-2's greedy decoding, ids growing per token, "
                  "as one while node"),
    ("train_ddp.py", "data-parallel training: DistributedDataParallel (2 processes, gloo) "
                     "around a converted module, equal to eager DDP"),
]


def main() -> int:
    for number, (name, what) in enumerate(STOPS, 1):
        print("=" * 78)
        print(f"[{number}/{len(STOPS)}] examples/{name}: {what}")
        print("=" * 78, flush=True)
        runpy.run_path(os.path.join(HERE, name), run_name="__main__")
        print(flush=True)
    print(f"tour complete: {len(STOPS)} examples ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
