"""Training sweep: transformers architectures in train mode, eager vs ``to_graph(model)``.

    .venv/bin/python -m benchmarks.train_sweep                       # every architecture
    .venv/bin/python -m benchmarks.train_sweep --models gpt2,bert --jobs 1 --out /tmp/ts

For every model type of transformers' causal-LM, seq2seq-LM, masked-LM and
sequence-classification mappings: its config class's defaults shrunk (2 layers, hidden 64,
4 heads, vocab 99, dropout probabilities 0, a hybrid's layer kinds each once, sub-configs
alike; ``shrink``), the head model built from it (in that order of preference; random
weights, no downloads), in train mode, two copies with the same weights. Three SGD steps
(lr 0.01), eager against ``to_graph`` of the second copy, at two batch/sequence sizes
((2, 8), (3, 5), (2, 8)): the loss from ``labels=`` (else the sum of the first float
output), every parameter's gradient and, after the steps, every parameter, each within
1e-5 of that tensor's max abs value on eager's side (or of 1e-4 of the step's largest
gradient, for gradients that are zero but for rounding). A difference above that is judged
against a float64 eager run: within twice eager's own float32 error it is rounding.

Verdicts: ``ok`` (converts and matches), ``fallback`` (a FallbackWarning, its reason; eager's
results), ``MISMATCH`` (silently different, or unjudged where float64 does not run),
``crash`` (the converted model raised where eager did not), ``not built`` (building or the
eager steps raised), ``timeout``, ``killed`` (the child died: -9 is the OOM killer). Each
architecture runs in a forked child (torch and transformers are imported once) with a time
limit. Writes ``<out>/train_sweep.json`` and ``<out>/TRAIN_SWEEP.md`` after each row
(``--out`` defaults to ``benchmarks/results``).
"""
from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing as mp
import os
import time
import traceback
import warnings

import torch

from benchmarks.torchvision_cpu import import_torchvision

SIZES = ((2, 8), (3, 5), (2, 8))
RTOL = 1e-5
LR = 0.01
VOCAB = 99
SMALL = {
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "embed_dim": 64, "dim": 64,
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2,
    "encoder_layers": 2, "decoder_layers": 2, "num_decoder_layers": 2,
    "num_encoder_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "d_kv": 16, "attention_head_size": 16,
    "intermediate_size": 128, "ffn_dim": 128, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "d_ff": 128, "n_inner": 128, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": VOCAB, "max_position_embeddings": 128, "type_vocab_size": 2,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1,
    "num_labels": 2, "tie_word_embeddings": False,
}
TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
HEADS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
         "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
         "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES")


def _short(text, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _zero_dropout(kwargs: dict, defaults: dict) -> None:
    for key, value in defaults.items():
        if isinstance(value, float) and not isinstance(value, bool) and value > 0 and \
                ("drop" in key or key.endswith("pdrop")):
            kwargs[key] = 0.0


def _mixed_layers(kwargs: dict, defaults: dict, most: int = 8) -> None:
    """A hybrid's per-layer pattern (``layer_types``: linear attention, sliding window...)
    cut to 2 layers can hold one kind only (Qwen3-Next's first layers are linear: its
    cache then has no attention layer): the pattern's shortest prefix holding every kind
    of every such list, up to ``most`` layers (else 2 layers, as the constructor makes)."""
    layers = defaults.get("num_hidden_layers")
    lists = {k: v for k, v in defaults.items() if isinstance(v, list) and layers and
             len(v) == layers and all(isinstance(x, str) for x in v) and len(set(v)) > 1}
    for n in range(2, most + 1):
        if lists and all(set(v[:n]) == set(v) for v in lists.values()):
            kwargs.update({k: v[:n] for k, v in lists.items()}, num_hidden_layers=n)
            return


def _sub_config(config_cls, key: str, value: dict):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    sub = getattr(config_cls, "sub_configs", {}).get(key)
    if sub is None or not hasattr(sub, "to_dict") or not isinstance(sub, type) or \
            sub.__name__ == "AutoConfig":
        sub = CONFIG_MAPPING.get(value.get("model_type"))
    return sub


def shrink(config_cls, decoder: bool = False):
    """The config class's defaults with the sizes of ``SMALL`` (where the class has the
    attribute), every dropout probability 0, a hybrid's layer kinds each once
    (``_mixed_layers``), ``is_decoder`` for a causal LM head; sub-configs (``text_config``)
    shrunk alike; built through the constructor so that derived fields follow."""
    defaults = config_cls().to_dict()
    kwargs = {k: v for k, v in SMALL.items() if k in defaults}
    _zero_dropout(kwargs, defaults)
    _mixed_layers(kwargs, defaults)
    if decoder and "is_decoder" in defaults:
        kwargs["is_decoder"] = True
    for key, value in defaults.items():     # sub-configs (text_config...): shrink them too
        if isinstance(value, dict) and "model_type" in value:
            sub = _sub_config(config_cls, key, value)
            if sub is not None:
                kwargs[key] = shrink(sub)
    try:
        config = config_cls(**kwargs)
    except Exception:                       # noqa: BLE001 - keep the sizes it accepts
        config = config_cls()
        for k, v in kwargs.items():
            setattr(config, k, v)
    for key in TOKENS:                      # (T5's config keeps no decoder_start_token_id)
        if getattr(config, key, None) is None:
            setattr(config, key, SMALL[key])
    return config


def head_class(model_type: str):
    from transformers.models.auto import modeling_auto
    import transformers
    for mapping in HEADS:
        name = getattr(modeling_auto, mapping).get(model_type)
        if name:
            return getattr(transformers, name)
    return None


def inputs(model, batch: int, seq: int, step: int) -> dict:
    """Token ids (ending in eos, as T5's classifier needs) and labels where the model takes
    them: the ids (causal and masked LM), other ids (seq2seq: the decoder's targets, shifted
    into its inputs by the model), a class per row (sequence classification)."""
    g = torch.Generator().manual_seed(1000 * step + 7 * batch + seq)
    ids = torch.randint(3, VOCAB, (batch, seq), generator=g)
    ids[:, -1] = SMALL["eos_token_id"]
    params = inspect.signature(model.forward).parameters
    kw = {"input_ids": ids}
    seq2seq = getattr(model.config, "is_encoder_decoder", False)
    if "labels" in params:
        if "SequenceClassification" in type(model).__name__:
            kw["labels"] = torch.randint(0, 2, (batch,), generator=g)
        else:
            kw["labels"] = torch.randint(3, VOCAB, (batch, seq), generator=g) if seq2seq \
                else ids
    elif seq2seq and "decoder_input_ids" in params:
        kw["decoder_input_ids"] = torch.randint(3, VOCAB, (batch, seq), generator=g)
    return kw


def loss_of(out) -> torch.Tensor:
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    items = out.values() if isinstance(out, dict) else out if isinstance(out, tuple) else [out]
    for leaf in items:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf.sum()
    raise TypeError(f"no float output in {type(out).__name__}")


def _diff(got, exp, floor: float = 0.0) -> float:
    """max |got - exp| over eager's max abs value, or over ``floor`` where that is larger:
    a gradient that is zero in exact arithmetic (a key projection's bias, which softmax
    ignores) is rounding noise of ~1e-9 on both sides, and is compared against the step's
    largest gradient times 1e-4 instead."""
    if not exp.numel():
        return 0.0
    scale = max(exp.abs().max().item(), floor)
    d = (got.double() - exp.double()).abs().max().item()
    return d / scale if scale else d


def train(model, params, per_step) -> dict:
    """SGD steps of ``model`` (``params``: the parameters it trains, by name): each step's
    loss and gradients, and the parameters after the last step."""
    opt = torch.optim.SGD(params.values(), lr=LR)
    run = {"steps": []}
    for kw in per_step:
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(0)            # (random draws in train mode, e.g. MoE jitter)
        loss = loss_of(model(**kw))
        loss.backward()
        run["steps"].append((loss.detach().clone(), {
            n: p.grad.clone() for n, p in params.items() if p.grad is not None}))
        opt.step()
    run["final"] = {n: p.detach().clone() for n, p in params.items()}
    return run


def compare(got: dict, exp: dict):
    """(worst relative difference, where) of ``got``'s losses, gradients and final
    parameters against ``exp``'s."""
    worst, where = 0.0, ""
    for i, ((el, eg), (gl, gg)) in enumerate(zip(exp["steps"], got["steps"])):
        floor = 1e-4 * max((e.abs().max().item() for e in eg.values() if e.numel()),
                           default=0.0)
        if set(gg) != set(eg):
            return float("inf"), f"step {i}: grad of {sorted(set(gg) ^ set(eg))[0]} " \
                "on one side only"
        for name, g, e in [("loss", gl, el)] + [(f"grad {n}", gg[n], e)
                                               for n, e in eg.items()]:
            d = _diff(g, e, floor)
            if not d <= worst:
                worst, where = d, f"step {i}: {name}"
    floor = 1e-4 * max(p.abs().max().item() for p in exp["final"].values())
    for n, p in exp["final"].items():
        d = _diff(got["final"][n], p, floor)
        if not d <= worst:
            worst, where = d, f"final {n}"
    return worst, where


def check(model_type: str) -> dict:
    """One architecture's verdict. A difference over ``RTOL`` is judged against float64
    eager: within twice eager's own float32 error, it is rounding (CPMAnt's gradients
    differ from float64's by 5e-3 after two steps: both sides' float32 error grows)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transpiler import FallbackWarning, to_graph
    transformers.logging.set_verbosity_error()
    row = {"model": model_type, "head": "", "verdict": "not built", "detail": "",
           "worst": None}
    try:
        cls = head_class(model_type)
        row["head"] = cls.__name__
        config = shrink(CONFIG_MAPPING[model_type], decoder=cls.__name__.endswith(
            ("ForCausalLM", "LMHeadModel")))
        torch.manual_seed(0)
        eager = cls(config).train()
        start = {k: v.clone() for k, v in eager.state_dict().items()}
        conv = cls(config).train()
        conv.load_state_dict(start)
        per_step = [inputs(eager, b, s, i) for i, (b, s) in enumerate(SIZES)]
        exp = train(eager, dict(eager.named_parameters()), per_step)
    except Exception as error:              # noqa: BLE001 - eager's own failure
        row["detail"] = f"{type(error).__name__}: {_short(error)}"
        return row
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = train(to_graph(conv), dict(conv.named_parameters()), per_step)
        except Exception as error:          # noqa: BLE001 - what the sweep looks for
            row["verdict"] = "crash"
            row["detail"] = f"{type(error).__name__}: {_short(error)}"
            row["trace"] = traceback.format_exc()[-3000:]
            return row
    reasons = [str(w.message).strip().splitlines()[0] for w in caught
               if issubclass(w.category, FallbackWarning)]
    worst, where = compare(got, exp)
    row["worst"] = worst
    if worst > RTOL and worst != float("inf"):
        try:
            ref = cls(config).train().double()
            ref.load_state_dict(start)
            try:                            # (grouped_mm has no float64 kernel: the
                ref.set_experts_implementation("eager")     # experts' loop, same maths)
            except Exception:               # noqa: BLE001 - a model without experts
                pass
            f64 = train(ref, dict(ref.named_parameters()), per_step)
            own, conv_err = compare(exp, f64)[0], compare(got, f64)[0]
        except Exception as error:          # noqa: BLE001 - (grouped_mm has no float64)
            own, conv_err = 0.0, 1.0
            where += f" (no float64 referee: {type(error).__name__})"
        row["f64"] = [own, conv_err]
        if conv_err <= 2 * own:
            row["detail"] = f"rounding: {where} {worst:.2g}; vs float64 " \
                f"eager {own:.2g}, converted {conv_err:.2g}. "
            worst = RTOL
    if worst > RTOL:
        row["verdict"] = "MISMATCH"
        row["detail"] = f"{where}: {worst:.3g} of max abs" + (
            f" (after fallback: {_short(reasons[0])})" if reasons else "")
    elif reasons:
        row["verdict"] = "fallback"
        row["detail"] += _short(reasons[0], 240)
    else:
        row["verdict"] = "ok"
    return row


def _child(model_type: str, conn) -> None:
    torch.set_num_threads(1)
    try:
        row = check(model_type)
    except BaseException as error:          # noqa: BLE001
        row = {"model": model_type, "head": "", "verdict": "crash",
               "detail": f"sweep: {type(error).__name__}: {_short(error)}", "worst": None}
    conn.send(row)
    conn.close()


def run_all(types, jobs: int, limit: float, log):
    ctx = mp.get_context("fork")
    pending, running, rows = list(types), {}, []
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(name, child), daemon=True)
            proc.start()
            child.close()
            running[name] = (proc, parent, time.monotonic())
        time.sleep(0.2)
        for name, (proc, conn, t0) in list(running.items()):
            row = None
            if conn.poll():
                try:
                    row = conn.recv()
                except EOFError:
                    row = {"model": name, "head": "", "verdict": "killed",
                           "detail": f"child exited {proc.exitcode}", "worst": None}
            elif not proc.is_alive():       # (-9: the kernel's OOM killer, on a loaded
                row = {"model": name, "head": "", "verdict": "killed",   # machine)
                       "detail": f"child died (exit {proc.exitcode})", "worst": None}
            elif time.monotonic() - t0 > limit:
                proc.kill()
                row = {"model": name, "head": "", "verdict": "timeout",
                       "detail": f"over {limit:.0f} s", "worst": None}
            if row is not None:
                proc.join(5)
                row["seconds"] = round(time.monotonic() - t0, 1)
                rows.append(row)
                del running[name]
                log(row)
    return sorted(rows, key=lambda r: r["model"])


VERDICTS = ("ok", "fallback", "MISMATCH", "crash", "timeout", "killed", "not built")


def counts(rows) -> dict:
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


def markdown(rows, note: str) -> str:
    c = counts(rows)
    built = len(rows) - c["not built"]
    lines = [
        "# Training sweep: transformers architectures, eager vs `to_graph(model)`",
        "", "Written by `benchmarks/train_sweep.py` (its docstring says what is run). " + note,
        "", f"Tried {len(rows)}, built and trained eagerly {built}: converts and matches "
        f"{c['ok']}, falls back (eager's results) {c['fallback']}, MISMATCH {c['MISMATCH']},"
        f" crash {c['crash']}, timeout {c['timeout']}, killed {c['killed']}. Not built: "
        f"{c['not built']}.", "",
        "| model type | head | verdict | worst rel. diff | detail | s |",
        "|---|---|---|---|---|---|"]
    for r in rows:
        worst = "" if r["worst"] is None else f"{r['worst']:.2g}"
        detail = r["detail"].replace("|", "\\|")
        lines.append(f"| {r['model']} | {r['head']} | {r['verdict']} | {worst} | {detail} |"
                     f" {r.get('seconds', '')} |")
    return "\n".join(lines) + "\n"


def all_types():
    from transformers.models.auto import modeling_auto
    names = set()
    for mapping in HEADS:
        names |= set(getattr(modeling_auto, mapping))
    return sorted(names)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="", help="model types, comma-separated (default all)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--limit", type=float, default=120.0, help="seconds per architecture")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    import_torchvision()        # transformers imports it; see benchmarks/torchvision_cpu.py
    import transformers  # noqa: F401 - imported once, before the children fork
    import transpiler  # noqa: F401
    types = [m.strip() for m in args.models.split(",") if m.strip()] or all_types()
    os.makedirs(args.out, exist_ok=True)
    done = []

    def log(row):               # (written after each row: a run cut short keeps its rows)
        print(f"{row['model']:<28} {row['verdict']:<9} {row.get('seconds', '')}s "
              f"{row['detail'][:150]}", flush=True)
        done.append(row)
        write(sorted(done, key=lambda r: r["model"]), args.out, args.note)
    rows = run_all(types, args.jobs, args.limit, log)
    write(rows, args.out, args.note)
    print(counts(rows))
    return 0


def write(rows, out: str, note: str) -> None:
    with open(os.path.join(out, "train_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out, "TRAIN_SWEEP.md"), "w") as f:
        f.write(markdown(rows, note))


if __name__ == "__main__":
    raise SystemExit(main())
