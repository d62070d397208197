"""Survey: do real models from other projects convert, match eager, and fail only cleanly?

    .venv/bin/python -m benchmarks.model_survey                      # every model (~20 min on 2 loaded cores)
    .venv/bin/python -m benchmarks.model_survey --models mistral,tv_vgg11 --no-train

For each model of ``benchmarks/survey_zoo.py`` (tiny configs, random weights): ``to_graph``
in default mode on eval + ``no_grad`` calls (batch 1, other inputs, batch 3; text models
also with an ``attention_mask``, and asking for every output: hidden states, attention
weights, the loss, the cache): any FallbackWarning (its first line is the reason), and
the outputs against eager (types: ``benchmarks.models.compare``; every tensor within 1e-4,
absolute or relative to its size);
strict mode's first call: nothing or ``ConversionError``, anything else is a crash; a train
step (batch 2, the sum of the first float output): loss and every gradient against eager's.
Prints one table row per model as it goes, and a summary.
"""
from __future__ import annotations

import argparse
import copy
import time
import traceback
import warnings

import torch

from benchmarks.models import compare, leaves
from benchmarks.survey_zoo import SURVEY, TEXT
from transpiler import ConversionError, FallbackWarning, to_graph

CALLS = ((1, 1), (1, 2), (3, 3))
KEYS = ("eval", "mask", "outputs", "strict", "train")
ATOL = 1e-4


def _short(text: str, n: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _check(got, exp) -> str:
    """``compare``'s verdict (types, structure, dtypes), with values within 1e-4 relative
    to their size as well as absolute (a CNN's logits of 1e8 differ by rounding alone)."""
    verdict = compare(got, exp)
    if verdict["check"] == "ok" or verdict["max_abs_diff"] is None:
        return verdict["check"]
    for (path, g), (_, w) in zip(leaves(got), leaves(exp)):
        if isinstance(w, torch.Tensor) and w.numel() and \
                not torch.allclose(g, w, rtol=ATOL, atol=ATOL, equal_nan=True):
            return f"MISMATCH: {path}: max abs diff {(g - w).abs().max().item():.3g}"
    return "ok"


def _fallback_reason(caught) -> str:
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            return str(w.message).strip().splitlines()[0]
    return ""


def _run(fn, args, kwargs, grad=False):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.set_grad_enabled(grad):
            out = fn(*args, **kwargs)
    return out, _fallback_reason(caught)


def with_outputs(model, args, kwargs) -> dict:
    """The call's keywords asking for more outputs, as a user fine-tuning or inspecting a
    model would: the loss (``labels``; CLIP's ``return_loss``), every layer's hidden states
    and attention weights (eager attention), and the cache (decoders)."""
    kwargs = dict(kwargs, output_hidden_states=True, output_attentions=True)
    if "decoder_input_ids" in kwargs:
        kwargs["labels"] = kwargs["decoder_input_ids"]
    elif type(model).__name__.endswith("ForCausalLM"):
        kwargs["labels"] = args[0]
    elif "pixel_values" in kwargs:
        kwargs["return_loss"] = True
    if type(model).__name__.endswith(("ForCausalLM", "ForConditionalGeneration")):
        kwargs["use_cache"] = True
    return kwargs


def check_eval(build, mask: bool, outputs: bool = False) -> dict:
    """Default-mode calls: {'fallback': reason or '', 'match': 'ok' or why not}."""
    model, make = build(mask=mask)
    if outputs:
        model.set_attn_implementation("eager")
    g = to_graph(model)
    result = {"fallback": "", "match": "ok"}
    for batch, seed in CALLS:
        args, kwargs = make(batch, seed)
        if outputs:
            kwargs = with_outputs(model, args, kwargs)
        exp, _ = _run(model, args, kwargs)
        try:
            got, reason = _run(g, args, kwargs)
        except Exception as error:       # noqa: BLE001 - a crash is what we survey
            result["match"] = f"CRASH {type(error).__name__}: {_short(error)}"
            return result
        result["fallback"] = result["fallback"] or reason
        check = _check(got, exp)
        if check != "ok" and result["match"] == "ok":
            result["match"] = f"b{batch}s{seed}: {check}"
    return result


def check_strict(build, mask: bool) -> str:
    model, make = build(mask=mask)
    args, kwargs = make(1, 1)
    try:
        _run(to_graph(model, strict=True), args, kwargs)
    except ConversionError as error:
        return "ConversionError: " + _short(str(error).splitlines()[0] if str(error) else "")
    except Exception as error:      # noqa: BLE001
        return f"CRASH {type(error).__name__}: {_short(error)}"
    return "ok"


def _loss(out) -> torch.Tensor:
    for _, leaf in leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            return leaf.float().square().mean()
    raise AssertionError("no differentiable output")


def check_train(build) -> dict:
    """One train step, batch 2: loss and gradients against eager's."""
    model, make = build(mask=False)
    eager, conv = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    g = to_graph(conv)
    args, kwargs = make(2, 5)
    torch.manual_seed(0)            # (random draws in train mode: wav2vec2's LayerDrop)
    exp, _ = _run(eager, args, kwargs, grad=True)
    try:
        torch.manual_seed(0)
        got, reason = _run(g, args, kwargs, grad=True)
        _loss(exp).backward()
        _loss(got).backward()
    except Exception as error:     # noqa: BLE001
        return {"fallback": "", "match": f"CRASH {type(error).__name__}: {_short(error)}"}
    worst = 0.0
    for (name, p), q in zip(eager.named_parameters(), conv.parameters()):
        if (p.grad is None) != (q.grad is None):
            return {"fallback": reason, "match": f"grad of {name} missing on one side"}
        if p.grad is not None:
            diff = (p.grad - q.grad).abs().max().item()     # within 1e-4 of the gradient's
            if diff > ATOL * max(1.0, p.grad.abs().max().item()):   # size: dla34's first
                worst = max(worst, diff)    # conv has gradients of 600, rounding gives 1e-3
    for (name, b), c in zip(eager.named_buffers(), conv.buffers()):
        if b.is_floating_point() and not torch.allclose(b, c, rtol=ATOL, atol=ATOL):
            return {"fallback": reason, "match": f"buffer {name} differs"}
    check = _check(got, exp)
    match = check if check != "ok" else \
        ("ok" if not worst else f"grad max abs diff {worst:.3g}")
    return {"fallback": reason, "match": match}


def survey(name: str, train: bool) -> dict:
    build = SURVEY[name]
    row = {"model": name}
    t0 = time.perf_counter()
    for key, fn in (("eval", lambda: check_eval(build, False)),
                    ("mask", (lambda: check_eval(build, True)) if name in TEXT else None),
                    ("outputs", (lambda: check_eval(build, True, outputs=True))
                     if name in TEXT else None),
                    ("strict", lambda: check_strict(build, name in TEXT)),
                    ("train", (lambda: check_train(build)) if train else None)):
        if fn is None:
            continue
        try:
            row[key] = fn()
        except Exception as error:     # noqa: BLE001 - the builder or eager itself failed
            row[key] = {"match": f"SETUP {type(error).__name__}: {_short(error)}",
                        "fallback": ""}
            traceback.print_exc()
    row["seconds"] = time.perf_counter() - t0
    return row


def _cell(r) -> str:
    if r is None:
        return "-"
    if isinstance(r, str):
        return r
    if r["fallback"]:
        return "FALLBACK " + _short(r["fallback"], 110)
    return "converts, " + ("matches" if r["match"] == "ok" else r["match"])


def format_row(row: dict) -> str:
    cells = [f"{row['model']:<18}"]
    for key in KEYS:
        cells.append(f"{key}: {_cell(row.get(key))}")
    return " | ".join(cells) + f" | {row['seconds']:.0f}s"


def good(row: dict) -> bool:
    return all(row[k] == "ok" if isinstance(row[k], str) else
               (not row[k]["fallback"] and row[k]["match"] == "ok")
               for k in KEYS if k in row)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(SURVEY))
    p.add_argument("--no-train", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        rows.append(survey(name, not args.no_train))
        print(format_row(rows[-1]), flush=True)
    print(f"\n{sum(map(good, rows))}/{len(rows)} convert and match in every mode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
