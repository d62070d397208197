"""The README's first command runs examples/tour.py: every example must run and say so.

The run is the session fixture ``tour`` (tests/examples_tour.py), shared with the tests of
single examples (tests/runtime/test_examples.py, tests/training/test_ddp.py)."""


def test_tour_runs_every_example(tour):
    done = tour
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "tour complete: 6 examples ran" in out, out[-2000:]
    assert 'Tensor("matmul_1", shape=(2, 2), dtype=torch.float32)' in out  # static: a node
    assert "= cond " in out and "= while " in out          # dynamic_branch: the graph
    assert out.count("-> match") == 3, out[-2000:]
    assert "normalize: iterations = 10" in out     # debugging: the in-graph print
    assert "compare normalize: eager and converted agree" in out, out[-3000:]
    assert out.count("in a fresh process without tograph") == 8, out[-3000:]   # deploy
    assert out.count("-> tokens equal") == 2, out[-3000:]   # decode: GPT-2's loop
    assert out.count("-> cached tokens equal") == 2, out[-3000:]    # ... with a KV cache
    assert "= while " in out.split("examples/decode.py")[-1]
    ddp = out.split("examples/train_ddp.py")[-1]
    assert ddp.count("-> equal") == 3, out[-3000:]      # train_ddp: both DDP spellings
    assert "losses, final parameters and buffers equal eager DDP's" in ddp, out[-3000:]
    assert "DIFFERS" not in out
