"""Greedy decoding with GPT-2, written as a Python loop, as one graph.

The loop grows ``ids`` by one token per iteration until every row has emitted ``eos`` (or
``max_new`` tokens). ``@to_graph`` turns it into ONE ``while`` node: ``ids`` is carried
with its length known only at run time, and the model's reads of that length (positions
``arange(seq_len)``, the causal mask, ``view(-1, ...)``, sdpa's ``is_causal``) become run-time
sizes in the loop body. The same loop with a KV cache (``past_key_values`` fed back, one
token per step) is one ``while`` node too: the cache object's layers' keys and values are
its loop variables, their length known only at run time. GPT-2 is a tiny config with
random weights (no download).

Run:  python examples/decode.py
"""
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from benchmarks.model_zoo import MODELS  # noqa: E402
from transpiler import to_graph  # noqa: E402

EOS = 3


def make_greedy(model):
    def greedy(ids, max_new: int, eos: int):
        done = torch.zeros(ids.shape[0], dtype=torch.bool)
        step = 0
        while not done.all() and step < max_new:
            logits = model(ids).logits[:, -1, :]
            nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
            ids = torch.cat([ids, nxt[:, None]], 1)
            done = done | (nxt == eos)
            step += 1
        return ids
    return greedy


def make_cached_greedy(model):
    """The same loop with a KV cache: the prompt runs once, then one token per step,
    feeding ``past_key_values`` back. The cache object's tensors (each layer's keys and
    values, growing by one position per step) are carried by the ``while`` node."""
    def greedy(ids, max_new: int, eos: int):
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        done = nxt == eos
        ids = torch.cat([ids, nxt[:, None]], 1)
        step = 1
        while not done.all() and step < max_new:
            out = model(nxt[:, None], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            nxt = torch.where(done, torch.full_like(nxt, eos), out.logits[:, -1].argmax(-1))
            ids = torch.cat([ids, nxt[:, None]], 1)
            done = done | (nxt == eos)
            step += 1
        return ids
    return greedy


def loop_summary(graph) -> str:
    """The graph's top level and the while node's loop variables (the body is the whole
    model: only its size is shown)."""
    def shown(line):
        depth = len(line) - len(line.lstrip())
        return (depth <= 4 or (depth == 6 and line.lstrip().startswith("return"))) and \
            line.strip() != "}"
    lines = [line for line in str(graph).splitlines() if shown(line)]
    body = next(n for n in graph.nodes if n.op == "while").subgraphs[1]
    lines.append(f"(the body holds {len(body.nodes)} nodes: the whole model, on the "
                 f"run-time length)")
    return "\n".join(lines)


def interleaved_ms(fns, args, rounds=5, calls=2):
    """Median ms per call of each of ``fns``, timed in turns (the machine is shared)."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, acc in zip(fns, times):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            acc.append((time.perf_counter() - t0) / calls * 1e3)
    return [statistics.median(t) for t in times]


def main():
    warnings.filterwarnings("ignore", message=".*token_id must be.*")
    warnings.filterwarnings("ignore", message=".*past_key_values.* is deprecated.*")
    model, _ = MODELS["gpt2"]()
    greedy = make_greedy(model)
    converted = to_graph(greedy, strict=True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        print("=== eager vs converted tokens (prompt of 5, up to 8 new tokens) ===")
        for batch in (1, 3):
            ids = torch.randint(4, 256, (batch, 5), generator=g)
            eager, graphed = greedy(ids, 8, EOS), converted(ids, 8, EOS)
            same = torch.equal(eager, graphed)
            print(f"batch {batch}: eager     {eager[0].tolist()}")
            print(f"         converted {graphed[0].tolist()}  -> "
                  f"{'tokens equal' if same else 'DIFFERS'}")
            assert same

        graph = converted.graph(ids, 8, EOS)
        whiles = [n for n in graph.nodes if n.op == "while"]
        print(f"\n=== the graph: {len(whiles)} while node; ids is carried with a run-time "
              f"length (?) ===")
        print(loop_summary(graph))

        print("\n=== with a KV cache (prefill, then one token per step): the cache's "
              "keys/values are loop variables ===")
        cached_model, _ = MODELS["gpt2"](use_cache=True)
        cached = make_cached_greedy(cached_model)
        converted_cached = to_graph(cached, strict=True)
        for batch in (1, 3):
            ids = torch.randint(4, 256, (batch, 5), generator=g)
            eager, graphed = cached(ids, 8, EOS), converted_cached(ids, 8, EOS)
            same = torch.equal(eager, graphed) and torch.equal(eager, greedy(ids, 8, EOS))
            print(f"batch {batch}: converted {graphed[0].tolist()}  -> "
                  f"{'cached tokens equal' if same else 'DIFFERS'} (eager, with and "
                  f"without the cache)")
            assert same
        graph = converted_cached.graph(ids, 8, EOS)
        loop = next(n for n in graph.nodes if n.op == "while")
        keys = [m for m in loop.meta if m.shape is not None and len(m.shape) == 4]
        print(f"{[n.op for n in graph.nodes].count('while')} while node; it carries "
              f"{len(keys)} cache tensors of shape "
              f"{tuple('?' if d is None else d for d in keys[0].shape)}")

        print("\n=== time per decode (16 new tokens, prompt 8; medians, interleaved, "
              "1 thread) ===")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)        # (a shared machine: 2 threads stall under load)
        for batch in (1, 4):
            ids = torch.randint(4, 256, (batch, 8), generator=g)
            converted(ids, 16, -1)
            e, c = interleaved_ms([greedy, converted], (ids, 16, -1))
            print(f"batch {batch}: eager {e:7.2f} ms   to_graph {c:7.2f} ms   "
                  f"({e / c:.2f}x)")
            converted_cached(ids, 16, -1)
            e, c = interleaved_ms([cached, converted_cached], (ids, 16, -1))
            print(f"  with the KV cache: eager {e:7.2f} ms   to_graph {c:7.2f} ms   "
                  f"({e / c:.2f}x)")
        torch.set_num_threads(threads)

if __name__ == "__main__":
    main()
