"""Sweep: one small timm model per family, eval and train, converted against eager.

    .venv/bin/python -m benchmarks.timm_sweep                    # every family (~1 h on 2 loaded cores)
    .venv/bin/python -m benchmarks.timm_sweep --models resnet10t,levit_128s --jobs 1
    .venv/bin/python -m benchmarks.timm_sweep --one resnet10t    # one model, in this process

For each module of ``timm.list_modules()`` the variant with the fewest parameters (counted on
the meta device; cached in ``benchmarks/results/timm_sweep_models.json``), built with random
weights, ``num_classes=10``, dropout and drop-path 0, is checked in its own subprocess under
a time limit:

* eval: ``to_graph(model)`` under ``no_grad`` at batch 2, then batch 3 (a second
  specialization), at the smallest image size of 64, 96, 128, 160, 224 or the model's own
  that eager accepts (``img_size`` passed where the family takes it); outputs against
  eager's (structure, dtypes, every tensor within 1e-5 of its largest magnitude);
* train (models under ``TRAIN_LIMIT`` parameters): two SGD steps (lr 0.01, momentum 0.9,
  cross-entropy on the first output; at lr 0.05 the second step is chaotic: 1e-5 of noise
  in legacy_seresnet18's first gradients moves its second ones by 5%, eager against eager) of a converted copy against an eager copy: each step's
  outputs, loss and every gradient, then every parameter and buffer (BatchNorm running
  statistics), within the same 1e-5 (gradients and parameters also of 1e-3 of the model's
  largest, for those that are 0 in exact arithmetic).

A value outside that is judged against the same calls in float64: it is rounding when the
converted value is within ten times eager's own float32 error of the float64 result (train
mode with batch statistics over batch 2 amplifies rounding far beyond 1e-5: efficientvim's
eager logits are 15% off their float64 values), otherwise MISMATCH.

Each phase is one of: ``converts+matches``; ``fallback+matches`` (a FallbackWarning, its
reason kept); ``MISMATCH`` (silently different: no warning, or a warning and different
results); ``crash`` (an exception eager does not raise); ``not runnable eagerly``;
``timeout``; ``skipped`` (train, over ``TRAIN_LIMIT``). Writes
``benchmarks/results/timm_sweep.json`` and ``TIMM_SWEEP.md``; ``--rerun JSON`` reruns only
a previous sweep's unsettled rows.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from benchmarks.models import leaves
from benchmarks.survey_zoo import no_dropout

RESULTS = Path(__file__).parent / "results"
PICKS = RESULTS / "timm_sweep_models.json"
SIZES = (64, 96, 128, 160, 224)
RTOL = 1e-5
TRAIN_LIMIT = 100_000_000     # parameters: larger models skip the train phase (CPU, memory)
VERDICTS = ("converts+matches", "fallback+matches", "MISMATCH", "crash",
            "not runnable eagerly", "timeout", "skipped")


def _short(text, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


# ------------------------------------------------------------------ picking the models
def _param_count(name: str):
    import timm
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, num_classes=10)
        return sum(p.numel() for p in model.parameters())
    except Exception:           # noqa: BLE001 - a model that cannot be built is not picked
        return None


def pick_models() -> dict:
    """{module: model name with the fewest parameters}, cached in ``PICKS``."""
    if PICKS.exists():
        return json.loads(PICKS.read_text())
    import timm
    picks = {}
    for module in timm.list_modules():
        counts = {n: _param_count(n) for n in timm.list_models(module=module)}
        counts = {n: c for n, c in counts.items() if c}
        if counts:
            picks[module] = min(counts, key=lambda n: (counts[n], n))
        print(f"{module}: {picks.get(module)} ({counts.get(picks.get(module))})", flush=True)
    PICKS.write_text(json.dumps(picks, indent=1) + "\n")
    return picks


# ------------------------------------------------------------------ one model, in a child
def _create(name: str, size):
    """The model, random weights, 10 classes, no dropout; a keyword the family does not take
    (``drop_path_rate``, ``img_size``, ``num_classes``) is left out."""
    import timm
    kwargs = dict(num_classes=10, drop_rate=0.0, drop_path_rate=0.0)
    if size is not None:
        kwargs["img_size"] = size
    while True:
        try:
            torch.manual_seed(0)
            return no_dropout(timm.create_model(name, pretrained=False, **kwargs))
        except TypeError as error:
            bad = re.search(r"unexpected keyword argument '(\w+)'", str(error))
            if not bad or bad.group(1) not in kwargs:
                raise
            del kwargs[bad.group(1)]


def _image(batch: int, size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, size, size, generator=g)


def build(name: str):
    """(model in eval mode, image size): the smallest size eager accepts."""
    import timm
    cfg_size = timm.get_pretrained_cfg(name).input_size[-1]
    errors = []
    for size in sorted(set(SIZES) | {cfg_size}):
        for img_size in (size, None):
            try:
                model = _create(name, img_size).eval()
                with torch.no_grad():
                    model(_image(2, size, 0))
                return model, size
            except Exception as error:      # noqa: BLE001 - try the next size
                errors.append(f"{size}: {type(error).__name__}: {_short(error, 80)}")
    raise RuntimeError("; ".join(errors[-2:]))


def _caught_reason(caught) -> str:
    from transpiler import FallbackWarning
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            first = str(w.message).strip().splitlines()[0]
            return re.sub(r"/\S*/(site-packages/)?", "", first)
    return ""


def _call(fn, *args, grad=False):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.set_grad_enabled(grad):
            out = fn(*args)
    return out, _caught_reason(caught)


def _close(got, want, floor: float) -> bool:
    scale = want.abs().nan_to_num().max().item() if want.numel() else 0.0
    return bool(torch.allclose(got.double(), want.double(), rtol=0.0,
                               atol=RTOL * max(scale, floor), equal_nan=True))


def check_values(got, want, what: str = "out", floor: float = 1e-6) -> str:
    """'' or why ``got`` differs from ``want``: structure, types, dtypes, values (within
    ``RTOL`` of the larger of the tensor's largest magnitude and ``floor``)."""
    g, w = leaves(got, what), leaves(want, what)
    if [p for p, _ in g] != [p for p, _ in w]:
        return f"structure differs: {sorted({p for p, _ in g} ^ {p for p, _ in w})[:3]}"
    for (path, a), (_, b) in zip(g, w):
        if isinstance(b, torch.Tensor):
            if type(a) is not torch.Tensor or a.shape != b.shape or a.dtype != b.dtype:
                return (f"{path}: {type(a).__name__} {tuple(getattr(a, 'shape', ()))} "
                        f"{getattr(a, 'dtype', '')} vs eager {tuple(b.shape)} {b.dtype}")
            if not _close(a, b, floor):
                return f"{path}: max abs diff {(a.double() - b.double()).abs().max().item():.3g}"
        elif a != b:
            return f"{path}: {a!r} vs eager {b!r}"
    return ""


def _verdict(reason: str, problem: str) -> dict:
    if problem:
        return {"verdict": "MISMATCH", "detail": problem, "fallback": reason}
    if reason:
        return {"verdict": "fallback+matches", "detail": reason}
    return {"verdict": "converts+matches", "detail": ""}


def _crash(error: BaseException) -> dict:
    tb = traceback.extract_tb(error.__traceback__)
    where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                  if "/tograph/" in f.filename or "/work/main/" in f.filename), "")
    return {"verdict": "crash", "detail": f"{type(error).__name__}: {_short(error)} [{where}]"}


def eval_record(fn, size: int, dtype=torch.float32):
    """Calls of ``fn`` under ``no_grad`` at batch 2, then 3: ({name: output tensor}, the
    first FallbackWarning's reason)."""
    record, reason = {}, ""
    for batch, seed in ((2, 1), (3, 2)):
        out, why = _call(fn, _image(batch, size, seed).to(dtype))
        reason = reason or why
        record.update({f"b{batch}.{p}": t for p, t in leaves(out, "out")})
    return record, reason


def check_eval(model, size: int) -> dict:
    from transpiler import to_graph
    want, _ = eval_record(model, size)
    try:
        got, reason = eval_record(to_graph(model), size)
    except Exception as error:             # noqa: BLE001 - a crash is what we sweep for
        return _crash(error)
    return _verdict(reason, _against_exact(got, want, lambda: eval_record(
        copy.deepcopy(model).double(), size, torch.float64)[0]))


def _against_exact(got: dict, want: dict, exact) -> str:
    """``compare_records``, then, when values differ, again against ``exact()``."""
    problem = compare_records(got, want)
    if problem and " max abs diff " in problem:
        problem = compare_records(got, want, exact())
    return problem


def _first_output(out) -> torch.Tensor:
    for _, leaf in leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf
    raise AssertionError("no float output")


def train_record(fn, model, size: int, dtype=torch.float32):
    """Two SGD steps of ``fn`` (``model`` or its converted form) in train mode:
    ({name: tensor} of each step's output, loss and gradients, then every parameter and
    buffer; the first FallbackWarning's reason)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    record, reason = {}, ""
    for step in range(2):
        x, y = _image(2, size, 10 + step).to(dtype), torch.tensor([step, 3])
        torch.manual_seed(step)
        opt.zero_grad()
        out, why = _call(fn, x, grad=True)
        reason = reason or why
        loss = torch.nn.functional.cross_entropy(_first_output(out).flatten(1)[:, :10], y)
        loss.backward()
        record.update({f"step{step}.{p}": t.detach() for p, t in leaves(out, "out")
                       if isinstance(t, torch.Tensor)})
        record[f"step{step}.loss"] = loss.detach()
        record.update({f"step{step}.grad[{n}]": p.grad.clone() if p.grad is not None else None
                       for n, p in model.named_parameters()})
        opt.step()
    record.update({f"param[{n}]": p.detach() for n, p in model.named_parameters()})
    record.update({f"buffer[{n}]": b for n, b in model.named_buffers() if b.is_floating_point()})
    return record, reason


def _worst(record: dict, kind: str) -> float:
    """The largest magnitude of the record's gradients or parameters (``kind``)."""
    return max((t.abs().nan_to_num().max().item() for k, t in record.items()
                if kind in k and t is not None and t.numel()), default=0.0)


def compare_records(got: dict, want: dict, exact: dict = None) -> str:
    """'' or the first entry of ``got`` that differs from ``want`` by more than ``RTOL`` of
    its scale, and, when ``exact`` (the float64 run) is given, is also farther from it than
    ten times eager's own float32 error (a train-mode network with batch statistics over a
    batch of 2 amplifies float32 rounding beyond any fixed tolerance: efficientvim's logits
    carry 15% rounding error in eager itself). A gradient or parameter that is zero in
    exact arithmetic (a conv bias before BatchNorm) is measured against 1e-3 of the largest
    one, and against the float64 run, 1e-2 of it (hgnet's scalar bias before a 1x1 conv and
    BatchNorm: exactly 0 in eager, 1e-7 when BatchNorm's backward sums in another order)."""
    floors = {kind: 1e-3 * _worst(want, kind) for kind in ("grad[", "param[")}
    if list(got) != list(want):
        return f"structure differs: {sorted(set(got) ^ set(want))[:3]}"
    for key, w in want.items():
        g = got.get(key)
        if (g is None) != (w is None):
            return f"{key}: None on one side"
        if w is None:
            continue
        if not isinstance(w, torch.Tensor):
            if g != w:
                return f"{key}: {g!r} vs eager {w!r}"
            continue
        floor = max([f for kind, f in floors.items() if kind in key] + [1e-6])
        problem = check_values(g, w, key, floor)
        if not problem or exact is None or " max abs diff " not in problem:
            if problem:
                return problem
            continue
        ref = exact[key]
        tol = RTOL * max(ref.abs().nan_to_num().max().item(), 10 * floor)
        err_g = (g.double() - ref).abs().max().item()
        err_w = (w.double() - ref).abs().max().item()
        if err_g > 10 * err_w + tol:
            return f"{problem} (float64 error: converted {err_g:.3g}, eager {err_w:.3g})"
    return ""


def check_train(model, size: int) -> dict:
    from transpiler import to_graph
    eager, conv = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    want, _ = train_record(eager, eager, size)
    try:
        got, reason = train_record(to_graph(conv), conv, size)
    except Exception as error:             # noqa: BLE001 - a crash is what we sweep for
        return _crash(error)
    exact = copy.deepcopy(model).double().train()
    problem = _against_exact(got, want, lambda: train_record(exact, exact, size, torch.float64)[0])
    return _verdict(reason, problem)


def check_one(name: str) -> dict:
    torch.set_num_threads(1)
    row = {"model": name}
    t0 = time.perf_counter()
    try:
        model, size = build(name)
    except Exception as error:             # noqa: BLE001
        row.update(size=None, eval={"verdict": "not runnable eagerly", "detail": _short(error)})
        return row
    row["size"] = size
    row["params"] = sum(p.numel() for p in model.parameters())
    for phase, fn in (("eval", check_eval), ("train", check_train)):
        if phase == "train" and row["params"] > TRAIN_LIMIT:
            row[phase] = {"verdict": "skipped", "detail": f"{row['params'] / 1e6:.0f}M params"}
            continue
        try:
            row[phase] = fn(model, size)
        except Exception as error:         # noqa: BLE001 - eager itself failed (e.g. train)
            row[phase] = {"verdict": "not runnable eagerly",
                          "detail": f"{type(error).__name__}: {_short(error)}"}
        print(f"  {name} {phase}: {row[phase]}", file=sys.stderr, flush=True)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


# ------------------------------------------------------------------ the sweep
def run_child(module: str, name: str, limit: float) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.timm_sweep", "--one", name]
    root = Path(__file__).resolve().parent.parent
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=limit,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired:
        row = {"model": name, "eval": {"verdict": "timeout", "detail": f"over {limit:.0f}s"}}
    else:
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        row = json.loads(lines[-1]) if lines else \
            {"model": name, "eval": {"verdict": "crash",
                                     "detail": "child died: " + _short(done.stderr[-300:])}}
    row["module"] = module
    row.setdefault("seconds", round(time.perf_counter() - t0, 1))
    return row


def _cell(r) -> str:
    if not r:
        return "-"
    detail = r.get("detail", "").replace("|", "\\|")
    return r["verdict"] + (f": {detail}" if detail else "")


def counts(rows, phase: str) -> dict:
    out = {v: 0 for v in VERDICTS}
    for row in rows:
        r = row.get(phase) or row["eval"]      # a model that did not build counts in both
        out[r["verdict"]] += 1
    return out


def write_table(rows, path: Path, note: str) -> None:
    lines = [f"# timm sweep: one small model per family, converted vs eager\n", note, ""]
    for phase in ("eval", "train"):
        c = counts(rows, phase)
        lines.append(f"**{phase}** ({len(rows)} models): " +
                     ", ".join(f"{v} {k}" for k, v in c.items() if v))
    lines += ["", "| module | model | size | eval | train | s |", "|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: r["module"]):
        lines.append(f"| {row['module']} | {row['model']} | {row.get('size') or '-'} | "
                     f"{_cell(row.get('eval'))} | {_cell(row.get('train'))} | "
                     f"{row.get('seconds', '')} |")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--one", help="check one model in this process; print its row as JSON")
    p.add_argument("--models", help="comma-separated model names (default: one per module)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--limit", type=float, default=240.0, help="seconds per model")
    p.add_argument("--rerun", help="a previous sweep's JSON: rerun only its rows that did not "
                   "convert and match (in either phase; a skipped train phase under "
                   "TRAIN_LIMIT), keep the others")
    p.add_argument("--out", default=str(RESULTS / "timm_sweep.json"))
    p.add_argument("--table", default=str(RESULTS / "TIMM_SWEEP.md"))
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(check_one(args.one)), flush=True)
        return 0
    picks = pick_models()
    if args.models:
        names = args.models.split(",")
        by_name = {v: k for k, v in picks.items()}
        todo = [(by_name.get(n, n), n) for n in names]
    else:
        todo = sorted(picks.items())

    def one(item):
        row = run_child(*item, args.limit)
        print(f"{row['module']:<28} {row['model']:<32} eval: {_cell(row.get('eval'))[:100]}"
              f" | train: {_cell(row.get('train'))[:100]}", flush=True)
        return row

    kept = []
    if args.rerun:
        previous = json.loads(Path(args.rerun).read_text())
        def settled(r, phase):
            verdict = (r.get(phase) or {"verdict": "skipped"})["verdict"]
            return verdict == "converts+matches" or \
                verdict == "skipped" and r.get("params", 0) > TRAIN_LIMIT
        kept = [r for r in previous if settled(r, "eval") and settled(r, "train")]
        todo = [(r["module"], r["model"]) for r in previous if r not in kept]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = kept + list(pool.map(one, todo))
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    note = (f"`python -m benchmarks.timm_sweep` (timm {__import__('timm').__version__}, "
            f"torch {torch.__version__}), {args.jobs} jobs, {args.limit:.0f}s per model.")
    write_table(rows, Path(args.table), note)
    for phase in ("eval", "train"):
        print(phase, counts(rows, phase))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
