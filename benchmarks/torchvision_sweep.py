"""Sweep: every torchvision model builder, eval and train, converted against eager.

    .venv/bin/python -m benchmarks.torchvision_sweep                 # all (~25 min, 2 cores)
    .venv/bin/python -m benchmarks.torchvision_sweep --models resnet18,raft_small --jobs 1
    .venv/bin/python -m benchmarks.torchvision_sweep --one resnet18  # one model, in this process

Every builder of ``torchvision.models.list_models()`` but the quantized ones, random weights
(``weights=None``, ``weights_backbone=None``), CPU-sized: 10 classes (5 for segmentation),
the smallest image size eager accepts of a few tried, detection at 128-192 px with fewer
proposals and a low score threshold (so that NMS and the box heads see real boxes), video
clips of 4-8 frames, RAFT with ``num_flow_updates=2``. Each model runs in its own subprocess
(one thread) under a time limit:

* eval: ``to_graph(model)`` under ``no_grad`` on three inputs (two of one size, different
  values; then a second size where the model accepts one; detection: two images of different
  sizes per call) against eager: structure (dicts, lists, ``OrderedDict`` of detection and
  segmentation outputs, named tuples), dtypes, every tensor within 1e-5 of its largest
  magnitude (and whether all are bit-equal), the ``FallbackWarning`` text, and
  ``cache_info()``'s traces;
* train (classification, segmentation, detection, video and optical flow under
  ``TRAIN_LIMIT`` parameters): three SGD steps (lr 0.01, momentum 0.9) of a converted copy
  against an eager copy from the same weights: each step's outputs, loss and every gradient,
  then every parameter and buffer (BatchNorm running statistics, ``num_batches_tracked``).
  Losses: cross-entropy on class scores and segmentation maps, the sum of the detection
  loss dict (targets: two random boxes per image, masks and keypoints where the model asks),
  L1 against a random flow for each RAFT prediction. Dropout and stochastic depth are set to
  probability 0 (a deterministic step); detection's proposal sampling is seeded per step.

Differences beyond 1e-5 are judged against a float64 run of the same calls, as in
``benchmarks/timm_sweep.py`` (whose judge this reuses): rounding when the converted value is
within ten times eager's own float32 error of the float64 result, otherwise MISMATCH.

torchvision 0.28 here is a CUDA build whose C extension does not load on the CPU torch:
``benchmarks/torchvision_ops.py`` registers ``torchvision::nms`` and ``roi_align`` in plain
torch. Models that fell back are run once more with ``--past``
(``benchmarks/torchvision_past.py``: the causes of the fallbacks found replaced by code of
the same results, on both sides) to see what lies behind them: the table's last column.

Each phase is one of ``VERDICTS`` (``fallback+matches``: a FallbackWarning, its reason
kept; ``MISMATCH``: silently different; ``crash``: an exception eager does not raise).
Writes ``benchmarks/results/torchvision_sweep.json`` and ``TORCHVISION_SWEEP.md``.
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
from benchmarks.timm_sweep import _crash, _short, compare_records
from benchmarks.torchvision_ops import register_cpu_ops
from benchmarks.torchvision_past import work_around_known_fallbacks

RESULTS = Path(__file__).parent / "results"
TRAIN_LIMIT = 150_000_000     # parameters: larger models skip the train phase
EVAL_LIMIT = 300_000_000      # parameters: larger models are skipped (memory, time on 2 cores)
VERDICTS = ("converts+matches", "fallback+matches", "MISMATCH", "crash",
            "not runnable eagerly", "timeout", "skipped")
KINDS = ("classification", "segmentation", "detection", "video", "optical_flow")


# ------------------------------------------------------------------ models and inputs
def kind_of(name: str) -> str:
    M = register_cpu_ops().models
    for kind in KINDS[1:]:
        if name in M.list_models(module=getattr(M, kind)):
            return kind
    return "classification"


def list_builders() -> list:
    """Every builder but the quantized ones."""
    tv = register_cpu_ops()
    return [n for n in tv.models.list_models() if not n.startswith("quantized_")]


_DETECTION_COMMON = dict(weights_backbone=None)
_RCNN = dict(min_size=128, max_size=192, box_score_thresh=0.001, box_detections_per_img=30,
             rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=60,
             rpn_pre_nms_top_n_train=200, rpn_post_nms_top_n_train=60,
             box_batch_size_per_image=32)
_ONE_STAGE = dict(min_size=128, max_size=192, score_thresh=0.001, detections_per_img=30,
                  topk_candidates=100)
_SSD = dict(score_thresh=0.001, detections_per_img=30, topk_candidates=100)


def build_kwargs(name: str, kind: str) -> dict:
    if kind == "classification":
        kwargs = dict(num_classes=10)
        if name.startswith("vit_"):
            kwargs["image_size"] = 56 if "_14" in name else 64
        if name.startswith("maxvit"):
            kwargs["input_size"] = (224, 224)
        return kwargs
    if kind == "segmentation":
        kwargs = dict(num_classes=5, weights_backbone=None)
        if not name.startswith("lraspp"):
            kwargs["aux_loss"] = True
        return kwargs
    if kind == "detection":
        extra = _RCNN if "rcnn" in name else _SSD if name.startswith("ssd") else _ONE_STAGE
        return {**_DETECTION_COMMON, **extra}
    if kind == "video":
        return dict(num_classes=10)
    return {}


MVIT_SIZE = dict(spatial_size=(64, 64), temporal_size=4)


def build(name: str) -> torch.nn.Module:
    """The builder's model, random weights, dropout and stochastic depth 0, in eval mode.
    MViT's builders fix 16x224x224 clips (they pass ``spatial_size`` themselves): their
    helper ``_mvit`` is given ``MVIT_SIZE`` instead while they run."""
    tv = register_cpu_ops()
    kind = kind_of(name)
    torch.manual_seed(0)
    mvit = sys.modules["torchvision.models.video.mvit"]
    helper = mvit._mvit
    if name.startswith("mvit"):
        mvit._mvit = lambda **kwargs: helper(**{**kwargs, **MVIT_SIZE})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # googlenet's init notice
            model = tv.models.get_model(name, weights=None, **build_kwargs(name, kind))
    finally:
        mvit._mvit = helper
    return no_dropout(model).eval()


# sizes tried in order: the first eager accepts is the sweep's, the next accepted its second
SIZES = {"classification": (64, 80, 96, 128, 160, 224, 299),
         "segmentation": (64, 96, 128),
         "video": (32, 48, 64, 112, 224),
         "optical_flow": (128, 160)}
FIXED = {"vit_": 64, "vit_h_14": 56, "maxvit": 224, "mvit": MVIT_SIZE["spatial_size"][0]}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_input(kind: str, size, seed: int, batch: int = 2, dtype=torch.float32):
    """(args, kwargs) of one call: ``size`` is an int (square images), or for detection a
    list of (h, w) per image."""
    g = _gen(seed)
    if kind == "detection":
        return ([torch.rand(3, h, w, generator=g, dtype=dtype) for h, w in size],), {}
    if kind == "video":
        frames = 16 if size >= 224 else MVIT_SIZE["temporal_size"]
        return (torch.randn(batch, 3, frames, size, size, generator=g, dtype=dtype),), {}
    if kind == "optical_flow":
        return (torch.randn(batch, 3, size, size, generator=g, dtype=dtype),
                torch.randn(batch, 3, size, size, generator=g, dtype=dtype)), \
            {"num_flow_updates": 2}
    return (torch.randn(batch, 3, size, size, generator=g, dtype=dtype),), {}


DETECTION_SIZES = ([(128, 160), (160, 128)], [(128, 192), (112, 192)])
SSD_SIZES = ([(160, 128), (128, 160)], [(96, 128), (128, 96)])


def pick_sizes(name: str, model, kind: str) -> list:
    """[first size, second size or None], each accepted by eager (``model`` in eval)."""
    if kind == "detection":
        return list(SSD_SIZES if name.startswith("ssd") else DETECTION_SIZES)
    fixed = [v for k, v in FIXED.items() if name.startswith(k)]
    sizes = fixed[-1:] or SIZES[kind]
    accepted, errors = [], []
    for size in sizes:
        args, kwargs = make_input(kind, size, 0, batch=1)
        try:
            with torch.no_grad():
                model(*args, **kwargs)
        except Exception as error:          # noqa: BLE001 - try the next size
            errors.append(f"{size}: {type(error).__name__}: {_short(error, 80)}")
            continue
        accepted.append(size)
        if len(accepted) == 2:
            break
    if not accepted:
        raise RuntimeError("; ".join(errors[-2:]))
    return accepted + [None] * (2 - len(accepted))


def batch_of(name: str, kind: str, size) -> int:
    """Batch 2, but 1 for the heaviest clips (s3d at 16x224x224)."""
    return 1 if kind == "video" and size >= 224 else 2


def pick_train_size(name: str, model, kind: str, first):
    """The first size from ``first`` on that a train-mode forward accepts (inception's
    auxiliary head needs larger images than its eval path)."""
    if kind == "detection":
        return first
    for size in [first] + [s for s in SIZES[kind] if s > first]:
        args, kwargs = make_input(kind, size, 0, batch=batch_of(name, kind, size))
        try:
            with torch.no_grad():
                copy.deepcopy(model).train()(*args, **kwargs)
            return size
        except Exception:                   # noqa: BLE001 - try the next size
            continue
    return first


# ------------------------------------------------------------------ eval
def _call(fn, args, kwargs, grad=False):
    from transpiler import FallbackWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.set_grad_enabled(grad):
            out = fn(*args, **kwargs)
    others = sorted({w.category.__name__ for w in caught
                     if not issubclass(w.category, FallbackWarning)
                     and "Warning" in w.category.__name__
                     and w.category.__module__.startswith(("transpiler", "runtime"))})
    return out, fallback_reason(caught), others


def eval_calls(name: str, kind: str, sizes: list) -> list:
    """[(label, args, kwargs)] of the eval phase: two calls at the first size (different
    values), one at the second size."""
    first, second = sizes
    calls = []
    for n, (size, seed) in enumerate(((first, 1), (first, 2), (second, 3))):
        if size is None:
            continue
        args, kwargs = make_input(kind, size, seed, batch=batch_of(name, kind, size))
        calls.append((f"c{n}", args, kwargs))
    return calls


def eval_record(fn, calls, dtype=None):
    """({name: output leaf}, first FallbackWarning reason, other tograph warnings)."""
    record, reason, others = {}, "", set()
    for label, args, kwargs in calls:
        if dtype is not None:
            args = tuple([a.to(dtype) for a in x] if isinstance(x, list) else x.to(dtype)
                         for x in args)
        out, why, other = _call(fn, args, kwargs)
        reason = reason or why
        others.update(other)
        record.update({f"{label}.{p}": t for p, t in leaves(out, "out")})
    return record, reason, sorted(others)


def in_float64(run):
    """``run()`` with float64 the default dtype (RAFT makes its sampling offsets with
    ``torch.linspace``) and RAFT's coordinate grids (integers, made ``.float()``) in
    float64."""
    before = torch.get_default_dtype()
    raft = sys.modules["torchvision.models.optical_flow.raft"]
    grid = raft.make_coords_grid
    torch.set_default_dtype(torch.float64)
    raft.make_coords_grid = lambda *args, **kwargs: grid(*args, **kwargs).double()
    try:
        return run()
    finally:
        torch.set_default_dtype(before)
        raft.make_coords_grid = grid


def _same(g, w) -> bool:
    if isinstance(w, torch.Tensor):
        return isinstance(g, torch.Tensor) and g.dtype == w.dtype and g.shape == w.shape \
            and torch.equal(g, w)
    return type(g) is type(w) and g == w


def _bit_equal(got: dict, want: dict) -> bool:
    return list(got) == list(want) and all(_same(got[k], w) for k, w in want.items())


def _max_rel(got: dict, want: dict) -> float:
    """The largest difference of a float tensor, relative to its largest magnitude."""
    worst = 0.0
    for key, w in want.items():
        g = got.get(key)
        if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor) and \
                g.shape == w.shape and w.is_floating_point() and w.numel() and \
                not torch.equal(g, w):
            scale = max(w.abs().nan_to_num().max().item(), 1e-6)
            worst = max(worst, (g.double() - w.double()).abs().nan_to_num().max().item() / scale)
    return worst


def _judged(got: dict, want: dict, exact) -> str:
    """'' when every entry is bit-equal; else ``compare_records``, and again against the
    float64 run when values differ (a bit-equal check first: the judge's float64 copies of
    vgg's 100M-parameter gradients took minutes)."""
    if _bit_equal(got, want):
        return ""
    problem = compare_records(got, want)
    if problem and " max abs diff " in problem:
        problem = compare_records(got, want, exact())
    return problem


def verdict(reason: str, problem: str, **extra) -> dict:
    if problem:
        out = {"verdict": "MISMATCH", "detail": problem, "fallback": reason}
    elif reason:
        out = {"verdict": "fallback+matches", "detail": reason}
    else:
        out = {"verdict": "converts+matches", "detail": ""}
    out.update(extra)
    return out


def fallback_reason(caught) -> str:
    """The first FallbackWarning's first line, file paths cut to their file names."""
    from transpiler import FallbackWarning
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            first = str(w.message).strip().splitlines()[0]
            return re.sub(r"(?:/[^\s/:]+)+/([^\s/:]+\.py)", r"\1", first)
    return ""


def check_eval(name: str, model, kind: str, sizes: list) -> dict:
    from transpiler import to_graph
    calls = eval_calls(name, kind, sizes)
    want, _, _ = eval_record(model, calls)
    converted = to_graph(model)
    try:
        got, reason, others = eval_record(converted, calls)
    except Exception as error:              # noqa: BLE001 - a crash is what we sweep for
        return _crash(error)
    info = converted.cache_info()
    problem = _judged(got, want, lambda: in_float64(
        lambda: eval_record(copy.deepcopy(model).double(), calls, torch.float64)[0]))
    return verdict(reason, problem, bit_equal=_bit_equal(got, want),
                   max_rel=_max_rel(got, want), traces=info.traces, calls=len(calls),
                   fallbacks=info.fallbacks, warnings=others)


# ------------------------------------------------------------------ train
def _targets(name: str, kind: str, args, seed: int, dtype):
    """The train call's extra arguments: detection targets (two boxes a image, with masks
    and keypoints), else nothing."""
    if kind != "detection":
        return ()
    g = _gen(100 + seed)
    targets = []
    for image in args[0]:
        h, w = image.shape[-2:]
        xy = torch.rand(2, 2, generator=g, dtype=dtype) * torch.tensor([w / 2, h / 2], dtype=dtype)
        wh = 16 + torch.rand(2, 2, generator=g, dtype=dtype) * torch.tensor([w / 2, h / 2],
                                                                            dtype=dtype)
        boxes = torch.cat([xy, xy + wh], 1)
        masks = torch.zeros(2, h, w, dtype=torch.uint8)
        for i, (x1, y1, x2, y2) in enumerate(boxes.long().tolist()):
            masks[i, y1:y2, x1:x2] = 1
        kx, ky = (boxes[:, None, k] + torch.rand(2, 17, generator=g, dtype=dtype) *
                  (boxes[:, None, k + 2] - boxes[:, None, k]) for k in (0, 1))
        keypoints = torch.stack([kx, ky, torch.ones_like(kx)], -1)
        labels = torch.tensor([1, 1] if "keypoint" in name else [1, 5])
        targets.append({"boxes": boxes, "labels": labels, "masks": masks,
                        "keypoints": keypoints})
    return (targets,)


def loss_of(kind: str, out, seed: int) -> torch.Tensor:
    """Cross-entropy of class scores (each (B, 10) output, each (B, 5, H, W) map), the
    detection losses' sum, L1 of each flow prediction against a random flow."""
    g = _gen(200 + seed)
    total = 0
    for _, leaf in leaves(out, "out"):
        if not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
            continue
        if kind == "detection":
            total = total + leaf
        elif kind == "optical_flow":
            flow = torch.randn(leaf.shape, generator=g, dtype=leaf.dtype)
            total = total + (leaf - flow).abs().mean()
        elif leaf.dim() == 2:
            y = torch.randint(0, leaf.shape[1], (leaf.shape[0],), generator=g)
            total = total + torch.nn.functional.cross_entropy(leaf, y)
        elif kind == "segmentation" and leaf.dim() == 4:
            y = torch.randint(0, leaf.shape[1], (leaf.shape[0],) + leaf.shape[2:], generator=g)
            total = total + torch.nn.functional.cross_entropy(leaf, y)
    return total


def train_record(fn, model, kind: str, size, name: str, dtype=torch.float32):
    """Three SGD steps of ``fn`` (``model`` or its converted form) in train mode:
    ({name: tensor} of each step's outputs, loss and gradients, then every parameter and
    buffer; the first FallbackWarning's reason; other tograph warnings)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    record, reason, others = {}, "", set()
    for step in range(3):
        args, kwargs = make_input(kind, size, 10 + step, batch=batch_of(name, kind, size),
                                  dtype=dtype)
        args = args + _targets(name, kind, args, step, dtype)
        torch.manual_seed(step)
        opt.zero_grad()
        out, why, other = _call(fn, args, kwargs, grad=True)
        reason = reason or why
        others.update(other)
        loss = loss_of(kind, out, step)
        loss.backward()
        record.update({f"step{step}.{p}": t.detach() for p, t in leaves(out, "out")
                       if isinstance(t, torch.Tensor)})
        record[f"step{step}.loss"] = loss.detach()
        record.update({f"step{step}.grad[{n}]": p.grad.clone() if p.grad is not None else None
                       for n, p in model.named_parameters()})
        opt.step()
    record.update({f"param[{n}]": p.detach() for n, p in model.named_parameters()})
    record.update({f"buffer[{n}]": b for n, b in model.named_buffers()})
    return record, reason, sorted(others)


def check_train(name: str, model, kind: str, size) -> dict:
    from transpiler import to_graph
    eager, conv = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    want, _, _ = train_record(eager, eager, kind, size, name)
    del eager
    converted = to_graph(conv)
    try:
        got, reason, others = train_record(converted, conv, kind, size, name)
    except Exception as error:              # noqa: BLE001 - a crash is what we sweep for
        return _crash(error)
    info = converted.cache_info()

    def exact():
        model64 = copy.deepcopy(model).double().train()
        return in_float64(lambda: train_record(model64, model64, kind, size, name,
                                               torch.float64)[0])
    problem = _judged(got, want, exact)
    return verdict(reason, problem, bit_equal=_bit_equal(got, want),
                   max_rel=_max_rel(got, want), traces=info.traces, warnings=others)


# ------------------------------------------------------------------ one model, in a child
def param_count(name: str) -> int:
    """Counted on the meta device (regnet's builder computes its widths with tensor ops:
    on the CPU)."""
    try:
        with torch.device("meta"):
            model = build(name)
    except NotImplementedError:
        model = build(name)
    return sum(p.numel() for p in model.parameters())


def check_one(name: str, phases=("eval", "train")) -> dict:
    torch.set_num_threads(1)
    kind = kind_of(name)
    row = {"model": name, "kind": kind}
    t0 = time.perf_counter()
    row["params"] = param_count(name)
    if row["params"] > EVAL_LIMIT:
        row["eval"] = {"verdict": "skipped", "detail": f"{row['params'] / 1e6:.0f}M params"}
        return row
    try:
        model = build(name)
        sizes = pick_sizes(name, model, kind)
    except Exception as error:              # noqa: BLE001
        row["eval"] = {"verdict": "not runnable eagerly",
                       "detail": f"{type(error).__name__}: {_short(error)}"}
        return row
    row["sizes"] = sizes
    for phase in phases:
        if phase == "train" and row["params"] > TRAIN_LIMIT:
            row[phase] = {"verdict": "skipped", "detail": f"{row['params'] / 1e6:.0f}M params"}
            continue
        t1 = time.perf_counter()
        try:
            if phase == "eval":
                row[phase] = check_eval(name, model, kind, sizes)
            else:
                row["train_size"] = pick_train_size(name, model, kind, sizes[0])
                row[phase] = check_train(name, model, kind, row["train_size"])
        except Exception as error:          # noqa: BLE001 - eager itself failed
            row[phase] = {"verdict": "not runnable eagerly",
                          "detail": f"{type(error).__name__}: {_short(error)}",
                          "trace": _short(traceback.format_exc()[-600:], 600)}
        row[phase]["seconds"] = round(time.perf_counter() - t1, 1)
        print(f"  {name} {phase}: {row[phase]}", file=sys.stderr, flush=True)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


# ------------------------------------------------------------------ the sweep
def run_child(name: str, limit: float, past: bool = False) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.torchvision_sweep", "--one", name] + \
        (["--past"] if past else [])
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
        if not lines:
            row["stderr"] = done.stderr[-2000:]
    row.setdefault("kind", kind_of(name))
    row.setdefault("seconds", round(time.perf_counter() - t0, 1))
    return row


def counts(rows, phase: str) -> dict:
    """{verdict: models}; a model that stopped before ``phase`` (not built, too big, timed
    out, crashed) counts under its eval verdict, one not asked for the phase as skipped."""
    out = {v: 0 for v in VERDICTS}
    for row in rows:
        r = row.get(phase)
        if r is None:
            ran = row["eval"]["verdict"] in ("converts+matches", "fallback+matches", "MISMATCH")
            r = {"verdict": "skipped"} if ran else row["eval"]
        out[r["verdict"]] += 1
    return out


def _cell(r) -> str:
    if not r:
        return "-"
    detail = _short(r.get("detail", ""), 150).replace("|", "\\|")
    text = r["verdict"] + (f": {detail}" if detail else "")
    if r["verdict"] in ("converts+matches", "fallback+matches", "MISMATCH"):
        text += " (bit-equal)" if r.get("bit_equal") else f" (max rel {r.get('max_rel', 0):.1e})"
    return text


def _past_cell(past) -> str:
    if not past:
        return ""
    return f"{_cell(past.get('eval'))} / {_cell(past.get('train'))}"


def _sizes(row) -> str:
    sizes = row.get("sizes") or []
    return ", ".join(str(s) if not isinstance(s, list) else
                     "+".join(f"{h}x{w}" for h, w in s) for s in sizes if s is not None) or "-"


def write_table(rows, path: Path, note: str) -> None:
    lines = ["# torchvision sweep: every model builder, converted vs eager\n", note, ""]
    for phase in ("eval", "train"):
        c = counts(rows, phase)
        lines.append(f"**{phase}** ({len(rows)} models): " +
                     ", ".join(f"{v} {k}" for k, v in c.items() if v) + "  ")
    past = [r for r in rows if r.get("past")]
    if past:
        for phase in ("eval", "train"):
            c = counts([r["past"] for r in past], phase)
            lines.append(f"**{phase}, past the known fallbacks** ({len(past)} models that fell "
                         "back, rerun with `--past`): " +
                         ", ".join(f"{v} {k}" for k, v in c.items() if v) + "  ")
    lines += ["", "| kind | model | params | sizes | eval | traces | train | s | "
              "past the known fallbacks: eval / train |", "|---|---|---|---|---|---|---|---|---|"]
    order = {k: i for i, k in enumerate(KINDS)}
    for row in sorted(rows, key=lambda r: (order.get(r.get("kind"), 9), r["model"])):
        ev = row.get("eval") or {}
        traces = f"{ev['traces']}/{ev['calls']}" if "traces" in ev else "-"
        params = f"{row['params'] / 1e6:.1f}M" if row.get("params") else "-"
        lines.append(f"| {row.get('kind', '')} | {row['model']} | {params} | {_sizes(row)} | "
                     f"{_cell(ev)} | {traces} | {_cell(row.get('train'))} | "
                     f"{row.get('seconds', '')} | {_past_cell(row.get('past'))} |")
    path.write_text("\n".join(lines) + "\n")


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--one", help="check one model in this process; print its row as JSON")
    p.add_argument("--phases", default="eval,train")
    p.add_argument("--past", action="store_true", help="work around the known causes of "
                   "fallbacks first (see work_around_known_fallbacks)")
    p.add_argument("--models", help="comma-separated builder names (default: all)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--limit", type=float, default=300.0, help="seconds per model")
    p.add_argument("--no-past-rerun", action="store_true", help="do not rerun the models "
                   "that fell back with --past")
    p.add_argument("--keep", help="a previous sweep's JSON: its rows of models not run now "
                   "are kept (a partial rerun)")
    p.add_argument("--commit", default=_commit(), help="the tograph commit, for the rows")
    p.add_argument("--out", default=str(RESULTS / "torchvision_sweep.json"))
    p.add_argument("--table", default=str(RESULTS / "TORCHVISION_SWEEP.md"))
    args = p.parse_args(argv)
    if args.one:
        if args.past:
            work_around_known_fallbacks()
        print(json.dumps(check_one(args.one, tuple(args.phases.split(",")))), flush=True)
        return 0
    names = args.models.split(",") if args.models else list_builders()

    def one(name):
        row = run_child(name, args.limit, args.past)
        print(f"{name:<40} eval: {_cell(row.get('eval'))[:110]} | "
              f"train: {_cell(row.get('train'))[:110]} [{row.get('seconds')}s]", flush=True)
        return row

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, names))
        fell_back = [r for r in rows if "fallback" in (r.get("eval") or {}).get("verdict", "")
                     or "fallback" in (r.get("train") or {}).get("verdict", "")]
        if not args.past and not args.no_past_rerun and fell_back:
            print(f"-- past the known fallbacks: {len(fell_back)} models", flush=True)
            for row, again in zip(fell_back, pool.map(
                    lambda r: run_child(r["model"], args.limit, past=True), fell_back)):
                row["past"] = {k: again[k] for k in ("eval", "train") if k in again}
                print(f"{row['model']:<40} past: {_past_cell(row['past'])[:230]}", flush=True)
    wall = time.perf_counter() - t0
    for row in rows:
        row["commit"] = args.commit
    kept = []
    if args.keep:
        kept = [r for r in json.loads(Path(args.keep).read_text()) if r["model"] not in names]
        rows = kept + rows
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    tv = register_cpu_ops()
    note = (f"`python -m benchmarks.torchvision_sweep` (torchvision {tv.__version__}, torch "
            f"{torch.__version__}, tograph {args.commit}), {args.jobs} jobs of 1 thread, "
            f"{args.limit:.0f}s per model, {wall / 60:.1f} min wall, load "
            f"{os.getloadavg()[0]:.1f} at the end.")
    if kept:
        commits = sorted({r.get("commit", "?") for r in kept})
        note += (f" {len(rows) - len(kept)} models rerun so; {len(kept)} rows kept from "
                 f"`{Path(args.keep).name}` (tograph {', '.join(commits)}).")
    write_table(rows, Path(args.table), note)
    for phase in ("eval", "train"):
        print(phase, counts(rows, phase))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
