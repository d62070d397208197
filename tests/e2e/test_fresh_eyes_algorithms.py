"""Numerical and algorithmic programs with data-dependent control flow, as public projects
write them, run through ``to_graph`` by a new user (fresh eyes: only README.md and the
public API were read).

Each ``@program`` names the project/file its structure follows (torchdiffeq, diffusers /
the DDPM and DDIM papers' samplers, pytorch-crf, torchvision's ops/boxes.py, POT's
Sinkhorn, scipy.optimize, textbook DP/graph algorithms, ...); none is copied. Every
program is called on several inputs (sizes, values that change the number of iterations,
zero iterations, NaN/Inf) eagerly and through ``to_graph`` in default and strict mode, and
the results are compared: values, dtypes, shapes, Python types of outputs, printed text,
exceptions, the arguments after the call (in-place writes), the global RNG state, and
gradients of the float outputs where ``grad=`` names arguments.

Verdicts (the ``verdict=`` of each program):
- ``converts``: no FallbackWarning, equal to eager; strict mode equal too.
- ``falls_back``: a FallbackWarning naming this file's line holding ``line=``, eager's
  results; strict mode raises ``ConversionError`` naming the same line.
- an ``xfail=`` reason starting ``BUG:`` or ``needless fallback:``: a strict xfail of the
  ``converts`` check.
"""
from __future__ import annotations

import contextlib
import io
import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from fresh_eyes_programs2 import same
from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]
PROGRAMS = []


def program(*inputs, grad=()):
    """Register ``fn`` with its argument tuples; ``grad``: positions of float tensor
    arguments whose gradients (of the sum of the float outputs) are compared. Its verdict
    is in FALLS_BACK / XFAIL at the end of the file (default: converts)."""
    def deco(fn):
        PROGRAMS.append((fn, inputs, grad))
        return fn
    return deco


# ----------------------------------------------------------------------------- runner
def _clone(v, grad=False):
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        return c.requires_grad_(True) if grad else c
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    if isinstance(v, dict):
        return {k: _clone(x) for k, x in v.items()}
    return v


def _float_leaves(v):
    if isinstance(v, torch.Tensor):
        return [v] if v.is_floating_point() and v.requires_grad else []
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _float_leaves(x)]
    if isinstance(v, dict):
        return [t for x in v.values() for t in _float_leaves(x)]
    return []


def _call(fn, args, grad):
    """Result (or exception), printed text, FallbackWarnings, ConversionError, gradients."""
    args = tuple(_clone(a, i in grad) for i, a in enumerate(args))
    text = io.StringIO()
    err = None
    with warnings.catch_warnings(record=True) as rec, contextlib.redirect_stdout(text):
        warnings.simplefilter("always")
        try:
            out = fn(*args)
        except ConversionError as e:
            out, err = None, e
        except Exception as e:  # noqa: BLE001 - compared with eager's exception
            out = e
    fallbacks = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    grads = None
    if grad and err is None and not isinstance(out, Exception):
        leaves = [t for t in _float_leaves(out) if torch.isfinite(t).all()]
        try:
            if leaves:
                sum(t.sum() for t in leaves).backward()
            grads = [args[i].grad for i in grad]
        except RuntimeError as e:  # compared with eager's: its type
            grads = e
    return out, text.getvalue(), fallbacks, err, grads, (_clone(args), torch.get_rng_state())


def _compare(got, exp, where):
    out, text, _, _, grads, args = got
    e_out, e_text, _, _, e_grads, e_args = exp
    if isinstance(e_out, Exception):
        assert isinstance(out, type(e_out)), f"{where}: eager raised {e_out!r}, got {out!r}"
        return
    if isinstance(out, Exception):
        raise AssertionError(f"{where}: eager returned, converted raised {out!r}") from out
    same(out, e_out, f"{where} out")
    assert text == e_text, f"{where}: printed {text!r}, eager printed {e_text!r}"
    same(args[0], e_args[0], f"{where} arguments after the call")
    assert torch.equal(args[1], e_args[1]), f"{where}: the global RNG state differs from eager's"
    if isinstance(e_grads, Exception) or isinstance(grads, Exception):
        assert type(grads) is type(e_grads), f"{where}: backward gave {grads!r}, eager's {e_grads!r}"
    elif e_grads is not None:
        for i, (g, e) in enumerate(zip(grads, e_grads)):
            if e is None:
                assert g is None, f"{where}: grad {i} is {g}, eager's is None"
            else:
                assert g is not None, f"{where}: grad {i} is None"
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5, equal_nan=True,
                                           msg=lambda m: f"{where} grad {i}: {m}")


def _names_line(message, text):
    m = re.search(re.escape(THIS_FILE) + r":(\d+)", message)
    assert m, f"the fallback names no line of {THIS_FILE}: {message}"
    with open(__file__) as f:
        src = f.read().splitlines()[int(m.group(1)) - 1]
    assert text in src, f"named line {m.group(1)} is {src.strip()!r}, not one holding {text!r}"


def _perturbed(args):
    """The same signature with other values (float tensors scaled and shifted), so a
    graph traced for one call runs again on values that change its control flow."""
    def one(v):
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
            return v * 1.5 + 0.25
        if isinstance(v, (list, tuple)):
            return type(v)(one(x) for x in v)
        return v
    new = tuple(one(a) for a in args)
    changed = any(isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() for a in args)
    return new if changed else None


def _seeded_call(fn, args, grad):
    torch.manual_seed(1234)
    return _call(fn, args, grad)


# ----------------------------------------------------------------------------- helpers
def _g(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=_g(seed), dtype=dtype)


def _rand(*shape, seed=0):
    return torch.rand(*shape, generator=_g(seed))


NAN = float("nan")
INF = float("inf")


# ----------------------------------------------------------------------------- ODE solvers
def _decay(t, y):
    return -0.5 * y + torch.sin(t)


@program((torch.tensor([1.0, 2.0]), 0.0, 1.0), (torch.tensor([0.5, -1.0, 3.0]), 0.0, 3.0),
         (torch.tensor([1.0]), 1.0, 1.0), grad=(0,))
def dopri5_adaptive(y0, t0, t1):
    """torchdiffeq/_impl/rk_common.py + dopri5: Dormand-Prince 5(4) with a PI-free step
    controller, `while t < t1`, rejected steps shrink h, Python float times."""
    a = [[], [1 / 5], [3 / 40, 9 / 40], [44 / 45, -56 / 15, 32 / 9],
         [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
         [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
         [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]]
    c = [0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0]
    b5 = a[6] + [0.0]
    b4 = [5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40]
    t = torch.tensor(t0)
    h = torch.tensor(0.1)
    y = y0
    rtol, atol = 1e-5, 1e-7
    n_accept = 0
    n_reject = 0
    while t < t1:
        h = torch.minimum(h, t1 - t)
        ks = []
        for i in range(7):
            yi = y
            for j in range(i):
                yi = yi + h * a[i][j] * ks[j]
            ks.append(_decay(t + c[i] * h, yi))
        y5 = y + h * sum(b * k for b, k in zip(b5, ks))
        y4 = y + h * sum(b * k for b, k in zip(b4, ks))
        scale = atol + rtol * torch.maximum(y.abs(), y5.abs())
        err = ((y5 - y4) / scale).pow(2).mean().sqrt()
        if err <= 1.0:
            t = t + h
            y = y5
            n_accept += 1
        else:
            n_reject += 1
        h = h * torch.clamp(0.9 * err.clamp_min(1e-10) ** -0.2, 0.2, 10.0)
    return y, t, n_accept, n_reject


@program((torch.tensor([1.0, 0.0]), torch.linspace(0, 2, 9)), (torch.tensor([0.3, 0.2]), torch.linspace(0, 1, 3)),
         grad=(0,))
def rk4_odeint_grid(y0, ts):
    """torchdiffeq's fixed-grid odeint (method='rk4'): a for over the time grid's pairs,
    solutions stacked."""
    def f(t, y):
        return torch.stack([y[1], -y[0] - 0.1 * y[1]])
    ys = [y0]
    y = y0
    for t0, t1 in zip(ts[:-1], ts[1:]):
        h = t1 - t0
        k1 = f(t0, y)
        k2 = f(t0 + h / 2, y + h / 2 * k1)
        k3 = f(t0 + h / 2, y + h / 2 * k2)
        k4 = f(t1, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ys.append(y)
    return torch.stack(ys)


@program((torch.tensor([1.0, 2.0]), 0.05), (torch.tensor([10.0, -3.0]), 0.2), (torch.tensor([NAN, 1.0]), 0.1))
def euler_until_small(y, dt):
    """A fixed-step Euler integration run until the state settles (Python dt, tensor test)."""
    steps = 0
    while y.abs().max() > 1e-2 and steps < 500:
        y = y - dt * y
        steps += 1
    return y, steps


# ----------------------------------------------------------------------------- diffusion
def _eps_model(x, t):
    return 0.1 * x * torch.cos(t.float() / 10.0) + 0.01


@program((torch.zeros(2, 3), 10, 0), (torch.zeros(1, 4), 4, 7), (torch.zeros(2, 3), 0, 1))
def ddpm_sample(shape_like, T, seed):
    """diffusers' DDPMScheduler.step / the DDPM paper's Algorithm 2: a linear beta
    schedule, a reversed timestep loop, noise added except at t == 0, a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    betas = torch.linspace(1e-4, 0.02, max(T, 1))
    alphas = 1.0 - betas
    alpha_bar = torch.cumprod(alphas, 0)
    x = torch.randn(shape_like.shape, generator=g)
    for t in reversed(range(T)):
        tt = torch.tensor(t)
        eps = _eps_model(x, tt)
        mean = (x - betas[t] / torch.sqrt(1 - alpha_bar[t]) * eps) / torch.sqrt(alphas[t])
        if t > 0:
            x = mean + torch.sqrt(betas[t]) * torch.randn(x.shape, generator=g)
        else:
            x = mean
    return x


@program((_randn(2, 4), 3.0, 5), (_randn(1, 4, seed=1), 1.0, 3), (_randn(2, 4, seed=2), 7.5, 1))
def ddim_cfg(x, guidance, steps):
    """diffusers' DDIMScheduler (eta=0) with classifier-free guidance as in
    StableDiffusionPipeline: uncond/cond predictions from one batched call, guidance only
    when the scale is > 1, clip of x0 when it leaves [-1, 1]."""
    alpha_bar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 50), 0)
    ts = torch.linspace(49, 0, steps).long()
    for i, t in enumerate(ts):
        both = torch.cat([x, x])
        eps = _eps_model(both, t) + torch.cat([torch.zeros_like(x), 0.05 * torch.ones_like(x)])
        eps_u, eps_c = eps.chunk(2)
        if guidance > 1.0:
            eps = eps_u + guidance * (eps_c - eps_u)
        else:
            eps = eps_c
        a_t = alpha_bar[t]
        a_prev = alpha_bar[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0)
        x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        if x0.abs().max() > 1.0:
            x0 = x0.clamp(-1, 1)
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    return x


# ----------------------------------------------------------------------------- decoding
def _lm_logits(tok, vocab):
    """A fixed 'language model': next-token logits from the last token."""
    base = torch.arange(vocab, dtype=torch.float32)
    return -((base - (tok.float().unsqueeze(-1) * 3 + 1) % vocab) ** 2) / 4.0


@program((torch.tensor([1]), 3, 6, 7), (torch.tensor([2]), 2, 4, 5), (torch.tensor([0]), 1, 3, 5))
def beam_search(start, beams, max_len, vocab):
    """fairseq/HF-style beam search by hand: scores summed, topk over beams*vocab, beam and
    token from `//` and `%`, finished hypotheses (eos = 0) stop the search."""
    seqs = start.view(1, 1)
    scores = torch.zeros(1)
    for step in range(max_len):
        logp = F.log_softmax(_lm_logits(seqs[:, -1], vocab), -1)
        cand = (scores.unsqueeze(1) + logp).view(-1)
        top, idx = cand.topk(min(beams, cand.numel()))
        beam_idx = idx // vocab
        tok = idx % vocab
        seqs = torch.cat([seqs[beam_idx], tok.unsqueeze(1)], 1)
        scores = top
        if (tok == 0).all():
            break
    return seqs, scores


@program((_randn(2, 10), 3, 0.9, 0.7, 5, 0), (_randn(1, 10, seed=1), 0, 0.5, 1.0, 3, 1),
         (_randn(3, 6, seed=2), 2, 1.0, 1.3, 4, 2))
def top_k_top_p_sample(logits, top_k, top_p, temperature, n, seed):
    """HF's TopKLogitsWarper + TopPLogitsWarper and a sampling loop with a seeded generator
    feeding each draw back into the logits."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        scores = logits / temperature
        if top_k > 0:
            kth = torch.topk(scores, top_k)[0][..., -1, None]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if top_p < 1.0:
            sorted_logits, sorted_idx = torch.sort(scores, descending=False)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            remove = cum <= (1 - top_p)
            remove[..., -1:] = False
            remove = remove.scatter(1, sorted_idx, remove)
            scores = scores.masked_fill(remove, -float("inf"))
        nxt = torch.multinomial(scores.softmax(-1), 1, generator=g)
        out.append(nxt)
        logits = logits.scatter_add(1, nxt, torch.full(nxt.shape, -1.0))
    return torch.cat(out, 1)


@program((torch.tensor([3]), 10), (torch.tensor([2]), 10), (torch.tensor([0]), 0))
def greedy_until_eos(tok, max_new):
    """nanoGPT-style greedy generate with an `if idx_next == eos: break`."""
    out = tok
    for _ in range(max_new):
        nxt = _lm_logits(out[-1:], 8).argmax(-1)
        out = torch.cat([out, nxt])
        if nxt.item() == 1:
            break
    return out


@program((_randn(2, 3, 5), torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool), _randn(5, 5, seed=1)),
         (_randn(1, 4, 3, seed=2), torch.ones(1, 4, dtype=torch.bool), _randn(3, 3, seed=3)))
def viterbi_decode_crf(emissions, mask, trans):
    """pytorch-crf's CRF._viterbi_decode: scores and backpointers over time with the mask's
    `torch.where`, then a Python backtrace per sequence into lists of ints."""
    B, T, K = emissions.shape
    score = emissions[:, 0]
    history = []
    for i in range(1, T):
        nxt = score.unsqueeze(2) + trans + emissions[:, i].unsqueeze(1)
        nxt, idx = nxt.max(1)
        score = torch.where(mask[:, i].unsqueeze(1), nxt, score)
        history.append(idx)
    ends = mask.long().sum(1) - 1
    best = []
    for b in range(B):
        _, last = score[b].max(0)
        tags = [last.item()]
        for hist in reversed(history[:ends[b]]):
            last = hist[b][tags[-1]]
            tags.append(last.item())
        tags.reverse()
        best.append(tags)
    return best


@program((_randn(2, 4, 3), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool), _randn(3, 3, seed=1)),
         (_randn(3, 2, 4, seed=2), torch.ones(3, 2, dtype=torch.bool), _randn(4, 4, seed=3)), grad=(0, 2))
def crf_forward_algorithm(emissions, mask, trans):
    """pytorch-crf's CRF._compute_normalizer: logsumexp recursion with `torch.where` on the
    mask; the log partition function and its gradients."""
    score = emissions[:, 0]
    for i in range(1, emissions.shape[1]):
        nxt = torch.logsumexp(score.unsqueeze(2) + trans + emissions[:, i].unsqueeze(1), 1)
        score = torch.where(mask[:, i].unsqueeze(1), nxt, score)
    return torch.logsumexp(score, 1)


@program((torch.tensor([[0, 1, 1, 0, 2, 2, 0, 1]]),), (torch.tensor([[0, 0, 0]]),),
         (torch.tensor([[3, 3, 1, 0, 1, 2, 2, 2], [1, 0, 0, 1, 1, 0, 2, 0]]),))
def ctc_greedy_decode(best_path):
    """The usual CTC greedy decoder (e.g. in speech recipes): collapse repeats, drop
    blanks (0), one Python list of ints per utterance, with `continue`."""
    hyps = []
    for row in best_path:
        prev = -1
        hyp = []
        for t in range(row.shape[0]):
            s = int(row[t])
            if s == prev:
                continue
            prev = s
            if s != 0:
                hyp.append(s)
        hyps.append(hyp)
    return hyps


@program((torch.tensor([[0, 1, 1, 0, 2, 2, 0, 1]]),), (torch.tensor([[0, 0, 0]]),),
         (torch.tensor([[3, 3, 1, 0, 1, 2, 2, 2], [1, 0, 0, 1, 1, 0, 2, 0]]),))
def ctc_greedy_decode_masks(best_path):
    """The vectorized CTC collapse (torchaudio tutorial's GreedyCTCDecoder with
    unique_consecutive), per row, tensors out."""
    out = []
    for row in best_path:
        u = torch.unique_consecutive(row)
        out.append(u[u != 0])
    return out


@program((_randn(2, 5, 4).softmax(-1), 0.9), (_randn(3, 5, 4, seed=1).softmax(-1), 0.4),
         (torch.full((1, 5, 4), 0.25), 0.5))
def early_exit_inference(layer_probs, thr):
    """DeeBERT/PABEE-style early exit: return at the first layer whose confidence passes
    the threshold, with the exit layer as a Python int."""
    for i in range(layer_probs.shape[1]):
        probs = layer_probs[:, i]
        conf = probs.max(-1).values.min()
        if conf > thr:
            return probs.argmax(-1), i
    return layer_probs[:, -1].argmax(-1), layer_probs.shape[1] - 1


# ----------------------------------------------------------------------------- detection
def _box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b - inter)


def _boxes(n, seed):
    xy = _rand(n, 2, seed=seed) * 10
    wh = _rand(n, 2, seed=seed + 100) * 4 + 1
    return torch.cat([xy, xy + wh], 1)


@program((_boxes(8, 0), _rand(8, seed=1), 0.5), (_boxes(3, 2), _rand(3, seed=3), 0.1),
         (_boxes(0, 4), _rand(0, seed=5), 0.5), (_boxes(6, 6), torch.ones(6), 0.0))
def nms_while_order(boxes, scores, iou_thr):
    """Pure-torch NMS as in many detection repos (and torchvision's reference semantics):
    sort by score, `while order.numel() > 0`, keep the first, drop overlaps."""
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        ious = _box_iou(boxes[i].unsqueeze(0), boxes[order[1:]])[0]
        order = order[1:][ious <= iou_thr]
    return torch.stack(keep) if keep else torch.empty(0, dtype=torch.long)


@program((_boxes(8, 0), _rand(8, seed=1), torch.tensor([0, 1, 0, 1, 2, 2, 0, 1]), 0.3),
         (_boxes(5, 2), _rand(5, seed=3), torch.zeros(5, dtype=torch.long), 0.5))
def batched_nms_vanilla(boxes, scores, idxs, iou_thr):
    """torchvision/ops/boxes.py `_batched_nms_vanilla`: a keep mask filled per class from
    `torch.unique(idxs)`, NMS by hand per class (a suppression matrix walk), kept indices
    sorted by score."""
    keep_mask = torch.zeros_like(scores, dtype=torch.bool)
    for class_id in torch.unique(idxs):
        curr = torch.where(idxs == class_id)[0]
        b, s = boxes[curr], scores[curr]
        order = s.argsort(descending=True)
        iou = _box_iou(b[order], b[order])
        suppressed = torch.zeros(order.numel(), dtype=torch.bool)
        for a in range(order.numel()):
            if suppressed[a]:
                continue
            suppressed = suppressed | ((iou[a] > iou_thr) & (torch.arange(order.numel()) > a))
        keep_mask[curr[order[~suppressed]]] = True
    keep = torch.where(keep_mask)[0]
    return keep[scores[keep].sort(descending=True)[1]]


@program((_boxes(8, 0), _rand(8, seed=1), 0.4), (_boxes(4, 2), _rand(4, seed=3), 0.9))
def nms_coordinate_trick_matrix(boxes, scores, thr):
    """Matrix NMS-style keep mask (SOLO's matrix_nms simplified): IoU upper triangle, a
    box kept when no higher-scored kept box overlaps it, a Python `for` over a tensor's
    first dimension with a tensor `if`."""
    order = scores.argsort(descending=True)
    b = boxes[order]
    iou = _box_iou(b, b).triu(1)
    keep = torch.ones(b.shape[0], dtype=torch.bool)
    for j in range(b.shape[0]):
        if not keep[j]:
            continue
        keep = keep & ~(iou[j] > thr)
    return order[keep]


# ----------------------------------------------------------------------------- clustering
@program((_randn(20, 2), 3, 1e-4), (_randn(10, 3, seed=1), 2, 1e-2), (_randn(5, 2, seed=2), 5, 0.0))
def kmeans_lloyd(x, k, tol):
    """kmeans_pytorch / sklearn's Lloyd loop: assign by cdist argmin, recompute centers
    (empty clusters keep theirs), `while shift > tol`, iteration cap."""
    centers = x[:k].clone()
    it = 0
    shift = torch.tensor(float("inf"))
    while shift > tol and it < 100:
        assign = torch.cdist(x, centers).argmin(1)
        new = centers.clone()
        for c in range(k):
            members = x[assign == c]
            if members.shape[0] > 0:
                new[c] = members.mean(0)
        shift = (new - centers).norm(dim=1).max()
        centers = new
        it += 1
    return centers, assign, it


@program((_randn(30, 2), 3, 8), (_randn(12, 2, seed=1), 2, 3))
def kmeans_onehot_fixed_iters(x, k, iters):
    """A vectorized k-means (one-hot scatter of assignments) with `torch.where` for empty
    clusters and a fixed number of iterations."""
    c = x[:k].clone()
    for _ in range(iters):
        a = torch.cdist(x, c).argmin(1)
        onehot = F.one_hot(a, k).float()
        counts = onehot.sum(0)
        sums = onehot.t() @ x
        c = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], c)
    return c, a


# ----------------------------------------------------------------------------- linear algebra
def _spd(n, seed):
    a = _randn(n, n, seed=seed)
    return a @ a.t() + n * torch.eye(n)


@program((_spd(4, 0), 1e-6, 500), (_spd(6, 1), 1e-3, 500), (torch.eye(3), 1e-6, 50),
         (torch.diag(torch.tensor([1.0, -1.0])), 1e-6, 20), grad=(0,))
def power_iteration_tol(A, tol, max_iter):
    """torch.nn.utils.spectral_norm's power method run to a tolerance (as in scipy's
    eigs users): `while` on the eigenvalue change, Python int iteration count."""
    v = torch.ones(A.shape[0]) / A.shape[0] ** 0.5
    lam = torch.tensor(0.0)
    for it in range(max_iter):
        w = A @ v
        v = w / w.norm()
        new = v @ A @ v
        if (new - lam).abs() < tol:
            lam = new
            break
        lam = new
    return lam, v, it


@program((_spd(5, 0), 4), (_spd(3, 1), 3), (torch.eye(4), 3))
def lanczos_breakdown(A, m):
    """Textbook Lanczos (as in scipy.sparse.linalg / GPyTorch's lanczos_tridiag): build
    the tridiagonal alphas/betas, break on beta breakdown (an identity breaks at once)."""
    n = A.shape[0]
    q = torch.ones(n) / n ** 0.5
    q_prev = torch.zeros(n)
    beta = torch.tensor(0.0)
    alphas = []
    betas = []
    for j in range(m):
        w = A @ q - beta * q_prev
        alpha = w @ q
        w = w - alpha * q
        alphas.append(alpha)
        beta = w.norm()
        if beta < 1e-6:
            break
        betas.append(beta)
        q_prev, q = q, w / beta
    T = torch.diag(torch.stack(alphas))
    if len(betas) >= len(alphas):
        betas = betas[:len(alphas) - 1]
    if betas:
        off = torch.stack(betas)
        T = T + torch.diag(off, 1) + torch.diag(off, -1)
    return T


@program((_spd(5, 0), _randn(5, seed=9), 1e-8), (_spd(3, 1), torch.zeros(3), 1e-8),
         (_spd(8, 2), _randn(8, seed=8), 1e-2), grad=(1,))
def conjugate_gradient(A, b, tol):
    """scipy.sparse.linalg.cg / the textbook CG: early return when b is zero, `while`
    on the residual norm with an iteration cap, Python counter returned."""
    x = torch.zeros_like(b)
    r = b - A @ x
    if r.norm() == 0:
        return x, 0
    p = r.clone()
    rs = r @ r
    k = 0
    while rs.sqrt() > tol and k < 2 * b.numel():
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        k += 1
    return x, k


@program((_randn(3, 3), 1.0), (_randn(3, 3, seed=1) * 10, 0.5), (torch.zeros(2, 2), 1.0))
def expm_scaling_squaring(A, thr):
    """scipy.linalg.expm's idea: halve until the norm is small (tensor `while`), a Taylor
    series, square back `s` times."""
    s = 0
    while A.abs().sum(1).max() > thr:
        A = A / 2
        s += 1
    E = torch.eye(A.shape[0])
    term = torch.eye(A.shape[0])
    for k in range(1, 12):
        term = term @ A / k
        E = E + term
    for _ in range(s):
        E = E @ E
    return E, s


@program((_spd(3, 0), 1e-5), (torch.tensor([[2.0, 1.0], [1.0, 3.0]]), 1e-8), (torch.eye(3), 1e-3))
def qr_algorithm(A, tol):
    """The unshifted QR algorithm (numerical recipes): iterate A = RQ until the strict
    lower triangle is below tol."""
    it = 0
    while A.tril(-1).abs().max() > tol and it < 200:
        Q, R = torch.linalg.qr(A)
        A = R @ Q
        it += 1
    return A.diagonal(), it


# ----------------------------------------------------------------------------- root finding
@program((torch.tensor(0.0), torch.tensor(2.0), 1e-6), (torch.tensor(1.0), torch.tensor(1.5), 1e-3),
         (torch.tensor(2.0), torch.tensor(3.0), 1e-6))
def bisection(lo, hi, tol):
    """scipy.optimize.bisect: a sign check raising ValueError, `while hi - lo > tol`,
    halving with `if f(mid) * f(lo) < 0`."""
    def f(x):
        return x ** 3 - 2 * x - 1
    if f(lo) * f(hi) > 0:
        raise ValueError("f(a) and f(b) must have different signs")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if f(mid) * f(lo) <= 0:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


@program((torch.tensor([1.0, 4.0, 9.0, 0.25]), 1e-7), (torch.tensor([2.0]), 1e-2),
         (torch.tensor([NAN, 4.0]), 1e-7), (torch.tensor([INF]), 1e-7), grad=(0,))
def newton_sqrt(a, tol):
    """Newton's method for sqrt with a convergence test on `.item()` of the step and a
    NaN guard (`if torch.isnan(x).any(): break`)."""
    x = torch.where(a > 1, a, torch.ones_like(a))
    for i in range(50):
        step = (x * x - a) / (2 * x)
        x = x - step
        if torch.isnan(x).any():
            break
        if step.abs().max().item() < tol:
            break
    return x, i


@program((torch.tensor(1.0), torch.tensor(2.0)), (torch.tensor(0.0), torch.tensor(3.0)),
         (torch.tensor(1.5), torch.tensor(1.7)))
def brent_root(a, b):
    """scipy.optimize.brentq's structure (Brent-Dekker): bracketing, inverse quadratic
    interpolation vs secant vs bisection chosen by tensor tests, a `mflag` bool."""
    def f(x):
        return torch.cos(x) - x / 2
    fa, fb = f(a), f(b)
    if fa * fb > 0:
        return torch.tensor(float("nan")), 0
    if fa.abs() < fb.abs():
        a, b, fa, fb = b, a, fb, fa
    c, fc = a, fa
    d = c
    mflag = True
    it = 0
    while fb.abs() > 1e-10 and (b - a).abs() > 1e-10 and it < 100:
        if fa != fc and fb != fc:
            s = (a * fb * fc / ((fa - fb) * (fa - fc)) + b * fa * fc / ((fb - fa) * (fb - fc))
                 + c * fa * fb / ((fc - fa) * (fc - fb)))
        else:
            s = b - fb * (b - a) / (fb - fa)
        cond1 = not (((3 * a + b) / 4 < s < b) or (b < s < (3 * a + b) / 4))
        cond2 = mflag and (s - b).abs() >= (b - c).abs() / 2
        cond3 = (not mflag) and (s - b).abs() >= (c - d).abs() / 2
        if cond1 or cond2 or cond3:
            s = (a + b) / 2
            mflag = True
        else:
            mflag = False
        fs = f(s)
        d, c, fc = c, b, fb
        if fa * fs < 0:
            b, fb = s, fs
        else:
            a, fa = s, fs
        if fa.abs() < fb.abs():
            a, b, fa, fb = b, a, fb, fa
        it += 1
    return b, it


@program((torch.tensor(0.0), torch.tensor(4.0), 1e-5), (torch.tensor(-1.0), torch.tensor(1.0), 1e-2))
def golden_section(a, b, tol):
    """scipy.optimize.golden: shrink the bracket by the golden ratio while it is wider
    than tol."""
    def f(x):
        return (x - 1.3) ** 2 + 0.5
    invphi = (math.sqrt(5) - 1) / 2
    c = b - invphi * (b - a)
    d = a + invphi * (b - a)
    while (b - a).abs() > tol:
        if f(c) < f(d):
            b = d
        else:
            a = c
        c = b - invphi * (b - a)
        d = a + invphi * (b - a)
    return (a + b) / 2


# ----------------------------------------------------------------------------- optimal transport
@program((_rand(4, 5), 0.1, 1e-6), (_rand(3, 3, seed=1), 1.0, 1e-9), (_rand(2, 6, seed=2), 0.05, 1e-3),
         grad=(0,))
def sinkhorn_pot(M, reg, stop_thr):
    """POT's ot.bregman.sinkhorn_knopp: u/v updates, a NaN/Inf check that restores the
    previous iterate and breaks, the marginal error checked every 10 iterations."""
    a = torch.full((M.shape[0],), 1.0 / M.shape[0])
    b = torch.full((M.shape[1],), 1.0 / M.shape[1])
    K = torch.exp(-M / reg)
    u = torch.ones_like(a) / a.shape[0]
    v = torch.ones_like(b) / b.shape[0]
    err = 1.0
    for ii in range(1000):
        uprev, vprev = u, v
        v = b / (K.t() @ u)
        u = a / (K @ v)
        if torch.any(~torch.isfinite(u)) or torch.any(~torch.isfinite(v)):
            u, v = uprev, vprev
            break
        if ii % 10 == 0:
            tmp = torch.einsum("i,ij,j->j", u, K, v)
            err = torch.norm(tmp - b)
            if err < stop_thr:
                break
    return u[:, None] * K * v[None, :], ii


# ----------------------------------------------------------------------------- Monte Carlo
@program((torch.zeros(2), 50, 0.5, 0), (torch.tensor([3.0, -3.0]), 20, 2.0, 1), (torch.zeros(1), 0, 1.0, 2))
def metropolis_hastings(x0, n, step, seed):
    """Random-walk Metropolis (as in Pyro/numpyro examples by hand): propose, accept with
    `if torch.rand(...) < exp(logp_new - logp)`, count acceptances in a Python int."""
    g = torch.Generator().manual_seed(seed)

    def logp(x):
        return -0.5 * (x ** 2).sum() - 0.1 * (x ** 4).sum()
    x = x0
    lp = logp(x)
    accepted = 0
    samples = []
    for _ in range(n):
        prop = x + step * torch.randn(x.shape, generator=g)
        lp_prop = logp(prop)
        if torch.rand((), generator=g) < torch.exp(lp_prop - lp):
            x, lp = prop, lp_prop
            accepted += 1
        samples.append(x)
    chain = torch.stack(samples) if samples else x0.new_zeros((0,) + x0.shape)
    return chain, accepted / max(n, 1)


@program((_randn(10), 64, 0), (_randn(4, seed=1) * 3, 16, 1))
def particle_filter_resample(obs, n_particles, seed):
    """A bootstrap particle filter (filterpy / pyro tutorials by hand): propagate, weight,
    systematic resampling only when the effective sample size drops below N/2."""
    g = torch.Generator().manual_seed(seed)
    parts = torch.randn(n_particles, generator=g)
    logw = torch.full((n_particles,), -math.log(n_particles))
    means = []
    n_resample = 0
    for z in obs:
        parts = 0.9 * parts + 0.5 * torch.randn(n_particles, generator=g)
        logw = logw - 0.5 * (z - parts) ** 2
        logw = logw - torch.logsumexp(logw, 0)
        w = logw.exp()
        means.append((w * parts).sum())
        ess = 1.0 / (w ** 2).sum()
        if ess < n_particles / 2:
            u = (torch.rand((), generator=g) + torch.arange(n_particles)) / n_particles
            idx = torch.searchsorted(torch.cumsum(w, 0), u).clamp(max=n_particles - 1)
            parts = parts[idx]
            logw = torch.full((n_particles,), -math.log(n_particles))
            n_resample += 1
    return torch.stack(means), n_resample


@program((torch.tensor([50, 0]), 5.0, 0), (torch.tensor([10, 3]), 0.5, 1), (torch.tensor([0, 0]), 10.0, 2))
def gillespie_ssa(state, t_end, seed):
    """Gillespie's direct method (as in the GillesPy / tutorial SIR-like codes): while
    t < t_end, propensities, exponential waiting time, reaction picked by cumulative sum,
    stop when nothing can fire."""
    g = torch.Generator().manual_seed(seed)
    stoich = torch.tensor([[-1, 1], [0, -1]])
    rates = torch.tensor([0.3, 0.1])
    t = torch.tensor(0.0)
    x = state.clone()
    n = 0
    while t < t_end:
        props = rates * x.float()
        total = props.sum()
        if total <= 0:
            break
        u1, u2 = torch.rand(2, generator=g)
        t = t - torch.log(u1) / total
        j = torch.searchsorted(torch.cumsum(props, 0), u2 * total)
        x = x + stoich[j]
        n += 1
    return x, t, n


@program((0.7, 200, 0), (0.2, 10, 1))
def rejection_sampling(p, n, seed):
    """Rejection sampling of a truncated normal: `while True` drawing until accepted,
    collected in a list."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n if n < 20 else 20):
        while True:
            s = torch.randn((), generator=g)
            if s.abs() < p:
                break
        out.append(s)
    return torch.stack(out)


@program((_randn(4), 30, 1.0, 0), (_randn(2, seed=1), 5, 0.1, 3))
def simulated_annealing(x, n, temp0, seed):
    """Simulated annealing with a geometric schedule; the best state kept in a tensor `if`."""
    g = torch.Generator().manual_seed(seed)

    def energy(v):
        return ((v - 1) ** 2).sum() + torch.sin(3 * v).sum()
    e = energy(x)
    best, best_e = x, e
    temp = temp0
    for _ in range(n):
        cand = x + 0.3 * torch.randn(x.shape, generator=g)
        ec = energy(cand)
        if ec < e or torch.rand((), generator=g) < torch.exp((e - ec) / temp):
            x, e = cand, ec
            if e < best_e:
                best, best_e = x, e
        temp *= 0.9
    return best, best_e


# ----------------------------------------------------------------------------- dynamic programming
@program((_randn(5), _randn(4, seed=1)), (_randn(3, seed=2), _randn(6, seed=3)), grad=(0, 1))
def dtw_distance(x, y):
    """Dynamic time warping (tslearn's dtw written over tensors): a cost table filled with
    a min of three neighbours, inf borders, gradients through the chosen path."""
    n, m = x.shape[0], y.shape[0]
    D = [[torch.tensor(float("inf"))] * (m + 1) for _ in range(n + 1)]
    D[0][0] = torch.tensor(0.0)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost = (x[i - 1] - y[j - 1]) ** 2
            D[i][j] = cost + torch.min(torch.stack([D[i - 1][j], D[i][j - 1], D[i - 1][j - 1]]))
    return D[n][m].sqrt()


@program((torch.tensor([1, 2, 3, 2, 1]), torch.tensor([2, 3, 1, 1])), (torch.tensor([4, 4]), torch.tensor([5])))
def lcs_length_and_backtrack(a, b):
    """LCS with a DP table and a `while i > 0 and j > 0` backtrace choosing by tensor
    comparisons (textbook CLRS)."""
    n, m = a.shape[0], b.shape[0]
    L = torch.zeros(n + 1, m + 1, dtype=torch.long)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            if a[i - 1] == b[j - 1]:
                L[i, j] = L[i - 1, j - 1] + 1
            else:
                L[i, j] = torch.maximum(L[i - 1, j], L[i, j - 1])
    i, j = n, m
    seq = []
    while i > 0 and j > 0:
        if a[i - 1] == b[j - 1]:
            seq.append(a[i - 1])
            i -= 1
            j -= 1
        elif L[i - 1, j] >= L[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return L[n, m], seq[::-1]


@program((torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0]), 7), (torch.tensor([2.0, 2.0]), 3), (torch.tensor([5.0]), 4))
def knapsack_01(weights, cap):
    """0/1 knapsack over a value row (values = weights squared), a Python loop over items
    and a reversed capacity loop with a tensor `if`."""
    dp = torch.zeros(cap + 1)
    for k in range(weights.shape[0]):
        w = int(weights[k])
        v = weights[k] ** 2
        for c in range(cap, w - 1, -1):
            if dp[c - w] + v > dp[c]:
                dp[c] = dp[c - w] + v
    return dp[cap]


# ----------------------------------------------------------------------------- sorting
@program((torch.tensor([5.0, 1.0, 4.0, 2.0, 8.0, 0.0, 3.0, 7.0]),), (torch.tensor([1.0, 2.0, 3.0, 4.0]),),
         (torch.tensor([2.0, NAN, 1.0, 0.0]),))
def bitonic_sort(x):
    """A bitonic sorting network (as in GPU sorting tutorials) on a power-of-two vector:
    compare-exchange stages with torch.where."""
    n = x.shape[0]
    idx = torch.arange(n)
    k = 2
    while k <= n:
        j = k // 2
        while j > 0:
            partner = idx ^ j
            up = (idx & k) == 0
            a, b = x, x[partner]
            lower = idx < partner
            swap = torch.where(up == lower, a > b, a < b)
            x = torch.where(swap, b, a)
            j //= 2
        k *= 2
    return x


@program((torch.tensor([5, 1, 4, 2, 8]),), (torch.tensor([1, 2, 3]),), (torch.tensor([3]),))
def bubble_sort_while_swapped(x):
    """Bubble sort with `while swapped` and a tensor `if` per pair (the textbook form)."""
    x = x.clone()
    n = x.shape[0]
    swapped = True
    passes = 0
    while swapped:
        swapped = False
        for i in range(n - 1):
            if x[i] > x[i + 1]:
                tmp = x[i].clone()
                x[i] = x[i + 1]
                x[i + 1] = tmp
                swapped = True
        passes += 1
    return x, passes


@program((torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0]),), (torch.tensor([1.0, 2.0]),))
def odd_even_transposition(x):
    """Odd-even transposition sort: n phases of vectorized compare-exchange with an early
    exit when a phase changes nothing."""
    n = x.shape[0]
    for phase in range(n):
        start = phase % 2
        a = x[start:n - 1:2]
        b = x[start + 1:n:2]
        lo, hi = torch.minimum(a, b), torch.maximum(a, b)
        new = x.clone()
        new[start:n - 1:2] = lo
        new[start + 1:n:2] = hi
        if torch.equal(new, x) and phase > 0:
            break
        x = new
    return x


# ----------------------------------------------------------------------------- graphs
@program((torch.tensor([[0, 1], [2, 3], [1, 2], [4, 5]]), 6), (torch.tensor([[0, 0]]), 3),
         (torch.zeros(0, 2, dtype=torch.long), 2))
def union_find(edges, n):
    """Union-find with path halving over a parent tensor (the networkx/scipy
    connected_components idea by hand): `while parent[x] != x` per find."""
    parent = torch.arange(n)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for e in edges:
        ra, rb = find(e[0]), find(e[1])
        if ra != rb:
            parent[torch.maximum(ra, rb)] = torch.minimum(ra, rb)
    return torch.stack([find(torch.tensor(i)) for i in range(n)])


def _adj(n, pairs):
    a = torch.zeros(n, n, dtype=torch.bool)
    for i, j in pairs:
        a[i, j] = a[j, i] = True
    return a


@program((_adj(6, [(0, 1), (1, 2), (3, 4)]), 0), (_adj(4, [(0, 1), (1, 2), (2, 3)]), 3), (_adj(3, []), 1))
def bfs_levels_frontier(adj, src):
    """BFS by frontier over a dense adjacency (GraphBLAS-style): `while frontier.any()`,
    levels -1 for unreachable, the depth as a Python counter."""
    n = adj.shape[0]
    level = torch.full((n,), -1)
    frontier = torch.zeros(n, dtype=torch.bool)
    frontier[src] = True
    depth = 0
    while frontier.any():
        level[frontier] = depth
        nxt = (adj[frontier].any(0)) & (level < 0)
        frontier = nxt
        depth += 1
    return level, depth


@program((_adj(6, [(0, 1), (1, 2), (3, 4)]),), (_adj(3, []),), (_adj(5, [(0, 4), (4, 3), (3, 2), (2, 1)]),))
def label_propagation_components(adj):
    """Connected components by min-label propagation until nothing changes (the
    torch_geometric / cugraph idea): `while changed`."""
    n = adj.shape[0]
    labels = torch.arange(n)
    changed = True
    rounds = 0
    while changed:
        nb = torch.where(adj, labels.unsqueeze(0).expand(n, n), torch.full((n, n), n))
        new = torch.minimum(labels, nb.min(1).values)
        changed = bool((new != labels).any())
        labels = new
        rounds += 1
    return labels, rounds


def _weights(n, seed, density=0.5):
    w = _rand(n, n, seed=seed) * 10
    w[_rand(n, n, seed=seed + 1) > density] = INF
    w.fill_diagonal_(0)
    return w


@program((_weights(5, 0),), (_weights(3, 2, 1.0),), (_weights(4, 4, 0.0),))
def floyd_warshall(w):
    """Floyd-Warshall with an early `continue` on unreachable pivots (the networkx
    floyd_warshall_numpy idea)."""
    d = w.clone()
    for k in range(d.shape[0]):
        if torch.isinf(d[:, k]).all():
            continue
        d = torch.minimum(d, d[:, k:k + 1] + d[k:k + 1, :])
    return d


@program((_weights(5, 0), 0), (_weights(4, 4, 0.0), 2), (torch.tensor([[0.0, 1.0], [-3.0, 0.0]]), 0))
def bellman_ford(w, src):
    """Bellman-Ford with early exit when a round relaxes nothing and a negative-cycle
    ValueError (networkx's single_source_bellman_ford semantics)."""
    n = w.shape[0]
    dist = torch.full((n,), INF)
    dist[src] = 0.0
    for _ in range(n - 1):
        new = torch.minimum(dist, (dist.unsqueeze(1) + w).min(0).values)
        if torch.equal(new, dist):
            break
        dist = new
    if ((dist.unsqueeze(1) + w).min(0).values < dist).any():
        raise ValueError("negative cycle")
    return dist


@program((_weights(6, 0), 0), (_weights(3, 2, 1.0), 2), (_weights(4, 4, 0.0), 1))
def dijkstra_dense(w, src):
    """Dijkstra over a dense matrix with a visited mask and a `break` when the closest
    unvisited node is unreachable."""
    n = w.shape[0]
    dist = torch.full((n,), INF)
    dist[src] = 0.0
    visited = torch.zeros(n, dtype=torch.bool)
    for _ in range(n):
        u = torch.where(visited, torch.full_like(dist, INF), dist).argmin()
        if torch.isinf(dist[u]) or visited[u]:
            break
        visited[u] = True
        dist = torch.minimum(dist, dist[u] + w[u])
    return dist, visited


# ----------------------------------------------------------------------------- physics and filters
@program((_randn(4, 2), torch.zeros(4, 2), 20, 0.05), (_randn(2, 2, seed=1) * 0.1, _randn(2, 2, seed=2), 5, 0.1),
         (_randn(3, 2, seed=3), torch.zeros(3, 2), 0, 0.1), grad=(0,))
def nbody_collisions(pos, vel, steps, dt):
    """A small n-body integrator (as in physics teaching codes): pairwise gravity with
    softening, velocity reflection when a body leaves the box (`if` on a tensor), an
    elastic swap when two bodies come closer than a radius."""
    n = pos.shape[0]
    collisions = 0
    for _ in range(steps):
        diff = pos.unsqueeze(0) - pos.unsqueeze(1)
        r2 = (diff ** 2).sum(-1) + 0.01
        acc = (diff / r2.unsqueeze(-1) ** 1.5).sum(1)
        vel = vel + dt * acc
        pos = pos + dt * vel
        out = pos.abs() > 2.0
        if out.any():
            vel = torch.where(out, -vel, vel)
        dist = (r2 - 0.01 + torch.eye(n) * 100).sqrt()
        close = dist.min() < 0.05
        if close:
            i = dist.min(1).values.argmin()
            j = dist[i].argmin()
            vi, vj = vel[i].clone(), vel[j].clone()
            vel = vel.index_put((i,), vj).index_put((j,), vi)
            collisions += 1
    return pos, vel, collisions


@program((torch.tensor([1.0, 1.2, NAN, 1.5, 1.4]),), (torch.tensor([NAN, NAN]),), (torch.zeros(0),))
def kalman_filter_missing(zs):
    """A 1-D constant-velocity Kalman filter (filterpy's predict/update by hand) that skips
    the update when the measurement is NaN."""
    x = torch.zeros(2)
    P = torch.eye(2)
    F_ = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    Q = 0.01 * torch.eye(2)
    H = torch.tensor([[1.0, 0.0]])
    R = torch.tensor([[0.1]])
    xs = [x]
    for z in zs:
        x = F_ @ x
        P = F_ @ P @ F_.t() + Q
        if torch.isnan(z):
            xs.append(x)
            continue
        y = z - H @ x
        S = H @ P @ H.t() + R
        K = P @ H.t() @ torch.linalg.inv(S)
        x = x + (K @ y)
        P = (torch.eye(2) - K @ H) @ P
        xs.append(x)
    return torch.stack(xs), P


# ----------------------------------------------------------------------------- optimization
def _rosen(x):
    return ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum()


def _rosen_grad(x):
    g = torch.zeros_like(x)
    g[:-1] = -2 * (1 - x[:-1]) - 400 * x[:-1] * (x[1:] - x[:-1] ** 2)
    g[1:] = g[1:] + 200 * (x[1:] - x[:-1] ** 2)
    return g


@program((torch.tensor([-1.0, 1.0]), 1.0), (torch.tensor([1.0, 1.0]), 1.0), (torch.tensor([0.5, 0.2, 0.3]), 0.01))
def armijo_backtracking(x, alpha0):
    """scipy.optimize's line_search_armijo idea / Nocedal-Wright Alg. 3.1: steepest
    descent steps with `while f(x + a d) > f(x) + c a g.d: a *= rho`."""
    c, rho = 1e-4, 0.5
    n_evals = 0
    for _ in range(5):
        g = _rosen_grad(x)
        if g.norm() < 1e-8:
            break
        d = -g
        a = alpha0
        fx = _rosen(x)
        while _rosen(x + a * d) > fx + c * a * (g @ d):
            a = a * rho
            n_evals += 1
        x = x + a * d
    return x, n_evals


@program((torch.tensor([-1.2, 1.0]), 20, 5), (torch.tensor([0.0, 0.0, 0.0]), 10, 3), (torch.tensor([1.0, 1.0]), 5, 2))
def lbfgs_two_loop(x, iters, m):
    """L-BFGS (Nocedal-Wright Alg. 7.4, as in torch.optim.LBFGS's direction): a history of
    (s, y) lists trimmed to m, the two-loop recursion, a curvature check skipping updates,
    a gradient-norm `break`."""
    s_hist, y_hist = [], []
    g = _rosen_grad(x)
    for k in range(iters):
        if g.norm() < 1e-6:
            break
        q = g.clone()
        alphas = []
        for s, y in zip(reversed(s_hist), reversed(y_hist)):
            a = (s @ q) / (y @ s)
            q = q - a * y
            alphas.append(a)
        if s_hist:
            gamma = (s_hist[-1] @ y_hist[-1]) / (y_hist[-1] @ y_hist[-1])
        else:
            gamma = torch.tensor(1e-3)
        r = gamma * q
        for s, y, a in zip(s_hist, y_hist, reversed(alphas)):
            b = (y @ r) / (y @ s)
            r = r + s * (a - b)
        step = 1.0
        fx = _rosen(x)
        while _rosen(x - step * r) > fx - 1e-4 * step * (g @ r) and step > 1e-8:
            step *= 0.5
        x_new = x - step * r
        g_new = _rosen_grad(x_new)
        s, y = x_new - x, g_new - g
        if s @ y > 1e-10:
            s_hist.append(s)
            y_hist.append(y)
            if len(s_hist) > m:
                s_hist.pop(0)
                y_hist.pop(0)
        x, g = x_new, g_new
    return x, len(s_hist)


@program((_randn(3), 0.1, 1e-6), (torch.tensor([10.0, -10.0]), 0.4, 1e-3), (torch.zeros(2), 0.1, 1e-6))
def gradient_descent_converged(x, lr, tol):
    """Gradient descent with `.item()`-based convergence and a printed log every 10 steps
    (a common tutorial loop)."""
    target = torch.arange(x.shape[0], dtype=x.dtype)
    for step in range(200):
        grad = 2 * (x - target)
        x = x - lr * grad
        loss = ((x - target) ** 2).sum()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
        if loss.item() < tol:
            break
    return x, step


@program((_randn(4, 4) * 0.3, _randn(4, seed=1)), (_randn(3, 3, seed=2) * 0.1, torch.zeros(3)), grad=(0, 1))
def deq_fixed_point(W, x):
    """A DEQ forward (the implicit-layers tutorial's `fixed_point_iteration`): iterate
    z = tanh(Wz + x) until the relative residual is below tol, then one differentiable
    step."""
    with torch.no_grad():
        z = torch.zeros_like(x)
        for k in range(100):
            z_next = torch.tanh(W @ z + x)
            res = (z_next - z).norm() / (1e-5 + z_next.norm())
            z = z_next
            if res < 1e-4:
                break
    return torch.tanh(W @ z + x)


# ----------------------------------------------------------------------------- integer and bit algorithms
@program((torch.tensor([12, 17, 100, 0]), torch.tensor([18, 5, 75, 7])), (torch.tensor([7]), torch.tensor([0])),
         (torch.tensor([6], dtype=torch.int32), torch.tensor([4], dtype=torch.int32)))
def gcd_elementwise(a, b):
    """Euclid's algorithm elementwise: `while (b != 0).any()` with torch.where updates."""
    steps = 0
    while (b != 0).any():
        nz = b != 0
        r = torch.where(nz, a % torch.where(nz, b, torch.ones_like(b)), b)
        a, b = torch.where(nz, b, a), torch.where(nz, r, b)
        steps += 1
    return a, steps


@program((torch.tensor(27),), (torch.tensor(1),), (torch.tensor(6),))
def collatz_steps(n):
    """Collatz stopping time of a 0-d int tensor: a tensor `while n != 1` with an
    even/odd `if`, the count a Python int."""
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@program((torch.linspace(-2, 1, 7), torch.linspace(-1, 1, 5), 30), (torch.tensor([0.0]), torch.tensor([0.0]), 10),
         (torch.tensor([2.0]), torch.tensor([2.0]), 10))
def mandelbrot_escape(re_, im, max_iter):
    """Mandelbrot escape counts (the PyTorch/NumPy tutorials' vectorized loop) with an
    early `break` once every point has escaped."""
    c = torch.complex(re_.unsqueeze(0).expand(im.shape[0], -1), im.unsqueeze(1).expand(-1, re_.shape[0]))
    z = torch.zeros_like(c)
    counts = torch.zeros(c.shape, dtype=torch.int32)
    alive = torch.ones(c.shape, dtype=torch.bool)
    for _ in range(max_iter):
        z = torch.where(alive, z * z + c, z)
        alive = alive & (z.abs() <= 2)
        counts += alive.int()
        if not alive.any():
            break
    return counts


@program((30,), (2,), (3,))
def sieve_of_eratosthenes(n):
    """The sieve over a bool tensor: `if is_prime[p]` then strike its multiples."""
    is_prime = torch.ones(n + 1, dtype=torch.bool)
    is_prime[:2] = False
    p = 2
    while p * p <= n:
        if is_prime[p]:
            is_prime[p * p::p] = False
        p += 1
    return torch.nonzero(is_prime).flatten()


@program((torch.tensor([1, 3, 5, 7, 9, 11]), torch.tensor(7)), (torch.tensor([1, 3, 5]), torch.tensor(4)),
         (torch.tensor([2]), torch.tensor(1)), (torch.tensor([], dtype=torch.long), torch.tensor(3)))
def binary_search_lower_bound(a, target):
    """bisect.bisect_left over a sorted tensor: `while lo < hi` on Python ints that
    become tensors, the position returned."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@program((torch.arange(1.0, 9.0),), (torch.tensor([3.0]),), (torch.arange(5, dtype=torch.int64),))
def hillis_steele_scan(x):
    """Hillis-Steele inclusive prefix sum (GPU Gems ch. 39) with `while offset < n`."""
    n = x.shape[0]
    offset = 1
    while offset < n:
        shifted = torch.cat([torch.zeros(offset, dtype=x.dtype), x[:-offset]])
        x = x + shifted
        offset *= 2
    return x


# ----------------------------------------------------------------------------- numerics with NaN/Inf
@program((torch.tensor([1.0, NAN, 3.0, INF, -2.0]),), (torch.tensor([NAN, NAN]),), (torch.zeros(0),))
def robust_mean_skip_nonfinite(x):
    """A running mean that `continue`s past non-finite samples (logging utilities'
    AverageMeter with a NaN guard): a float sum and an int count."""
    total = 0.0
    count = 0
    for v in x:
        if not torch.isfinite(v):
            continue
        total = total + v
        count += 1
    return total / count if count > 0 else float("nan"), count


@program((torch.tensor(0.0), torch.tensor(1.0), 1e-6), (torch.tensor(0.0), torch.tensor(3.0), 1e-3))
def adaptive_simpson(a, b, eps):
    """Adaptive Simpson quadrature (Wikipedia's recursive form): recursion on a tensor
    error test."""
    def f(x):
        return torch.exp(-x * x)

    def simpson(a, fa, b, fb):
        m = (a + b) / 2
        fm = f(m)
        return m, fm, (b - a) / 6 * (fa + 4 * fm + fb)

    def rec(a, fa, b, fb, eps, whole, m, fm, depth):
        lm, flm, left = simpson(a, fa, m, fm)
        rm, frm, right = simpson(m, fm, b, fb)
        delta = left + right - whole
        if depth <= 0 or delta.abs() <= 15 * eps:
            return left + right + delta / 15
        return (rec(a, fa, m, fm, eps / 2, left, lm, flm, depth - 1)
                + rec(m, fm, b, fb, eps / 2, right, rm, frm, depth - 1))
    fa, fb = f(a), f(b)
    m, fm, whole = simpson(a, fa, b, fb)
    return rec(a, fa, b, fb, eps, whole, m, fm, 6)


@program((torch.tensor([1.0, 8.0, 27.0], dtype=torch.float64),), (torch.tensor([-8.0, 0.0], dtype=torch.float64),),
         grad=(0,))
def halley_cube_root(a):
    """Halley's method for cube roots in float64 with a `while` on the max update."""
    x = torch.where(a == 0, torch.zeros_like(a), a.sign() * a.abs().clamp_min(1.0))
    delta = torch.tensor(1.0, dtype=torch.float64)
    it = 0
    while delta > 1e-12 and it < 60:
        x3 = x ** 3
        new = torch.where(a == 0, x, x * (x3 + 2 * a) / (2 * x3 + a))
        delta = (new - x).abs().max()
        x = new
        it += 1
    return x, it


@program((torch.tensor(1.0), torch.tensor(2.0)), (torch.tensor(3.0), torch.tensor(3.0)))
def secant_with_zero_guard(x0, x1):
    """The secant method with a `raise` when the secant is flat (scipy.optimize.newton's
    'Tolerance of ... reached' guard): the flat case raises eagerly and converted."""
    def f(x):
        return x * x - 2
    for _ in range(50):
        f0, f1 = f(x0), f(x1)
        if f1 == f0:
            if (x1 - x0).abs() < 1e-12:
                raise RuntimeError("secant is flat")
            break
        x0, x1 = x1, x1 - f1 * (x1 - x0) / (f1 - f0)
        if (x1 - x0).abs() < 1e-9:
            break
    return x1


@program((_randn(2, 5), 0), (torch.tensor([[0.0, NAN, 1.0]]), 1))
def sample_with_nan_logits(logits, seed):
    """torch.multinomial on softmax of logits that may hold NaN: eager's RuntimeError
    must come from the converted call too."""
    g = torch.Generator().manual_seed(seed)
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 2, generator=g)


# ----------------------------------------------------------------------------- tensor-only decoders and containers
@program((_randn(2, 4, 3), _randn(3, 3, seed=1)), (_randn(1, 1, 2, seed=2), _randn(2, 2, seed=3)))
def viterbi_tensor_backtrace(emissions, trans):
    """Viterbi with a tensor backtrace (torchaudio's forced_align idea): backpointers
    stacked, `gather` walking back in a reversed Python loop."""
    B, T, K = emissions.shape
    score = emissions[:, 0]
    bps = []
    for t in range(1, T):
        s = score.unsqueeze(2) + trans + emissions[:, t].unsqueeze(1)
        score, bp = s.max(1)
        bps.append(bp)
    best = score.argmax(1)
    path = [best]
    for bp in reversed(bps):
        best = bp.gather(1, best.unsqueeze(1)).squeeze(1)
        path.append(best)
    return torch.stack(path[::-1], 1), score.max(1).values


@program((_randn(6), 0.5), (torch.tensor([5.0, 5.0]), 1.0), (torch.zeros(0), 0.5))
def stats_dict_in_tensor_loop(x, thr):
    """A stats dict ({'n': int, 'sum': float, 'max': tensor}) updated under a tensor `if`
    in a loop over a tensor (metric-accumulator style)."""
    stats = {"n": 0, "sum": 0.0, "max": torch.tensor(-INF)}
    for v in x:
        if v > thr:
            stats["n"] += 1
            stats["sum"] = stats["sum"] + v
            stats["max"] = torch.maximum(stats["max"], v)
    return stats


@program((torch.tensor([3.0, 1.0, 2.0]), 4), (torch.tensor([1.0]), 0))
def ema_bias_corrected(xs, steps):
    """Adam-style EMA with bias correction and an `if step == 0` initialisation, Python
    floats for the betas, a tuple of floats from `.item()` returned."""
    m = torch.zeros(())
    beta = 0.9
    out = []
    for step in range(steps):
        x = xs[step % xs.shape[0]]
        if step == 0:
            m = x.clone()
        else:
            m = beta * m + (1 - beta) * x
        out.append(m / (1 - beta ** (step + 1)))
    last = out[-1].item() if out else 0.0
    return out, last


@program((_randn(4, 4), 8, 0), (_randn(3, 3, seed=1), 2, 1))
def ising_gibbs_checkerboard(field, sweeps, seed):
    """Checkerboard Gibbs sampling of a 2-D Ising model (the standard vectorized update)
    with a seeded generator; the magnetisation printed when it flips sign."""
    g = torch.Generator().manual_seed(seed)
    H, W = field.shape
    spins = torch.where(field > 0, 1.0, -1.0)
    mask = (torch.arange(H).unsqueeze(1) + torch.arange(W)) % 2 == 0
    prev = spins.mean()
    for s in range(sweeps):
        for color in (mask, ~mask):
            nb = spins.roll(1, 0) + spins.roll(-1, 0) + spins.roll(1, 1) + spins.roll(-1, 1)
            p = torch.sigmoid(2 * 0.4 * nb)
            draw = torch.where(torch.rand(spins.shape, generator=g) < p, 1.0, -1.0)
            spins = torch.where(color, draw, spins)
        m = spins.mean()
        if m * prev < 0:
            print("sign flip at sweep", s)
        prev = m
    return spins


@program((torch.zeros(3), _randn(3, seed=5), 10, 0), (torch.ones(2), torch.zeros(2), 4, 1))
def hmc_leapfrog_accept(q, p0_unused, n, seed):
    """Hamiltonian Monte Carlo (Neal's 'MCMC using Hamiltonian dynamics' figure 2):
    leapfrog steps, a Metropolis accept on the energy change, accepted count."""
    g = torch.Generator().manual_seed(seed)

    def U(x):
        return 0.5 * (x ** 2).sum()

    def gradU(x):
        return x
    acc = 0
    for _ in range(n):
        p = torch.randn(q.shape, generator=g)
        qn, pn = q, p - 0.05 * gradU(q)
        for i in range(5):
            qn = qn + 0.1 * pn
            if i != 4:
                pn = pn - 0.1 * gradU(qn)
        pn = pn - 0.05 * gradU(qn)
        dH = U(q) + 0.5 * (p ** 2).sum() - U(qn) - 0.5 * (pn ** 2).sum()
        if torch.rand((), generator=g) < torch.exp(dH):
            q = qn
            acc += 1
    return q, acc


# ----------------------------------------------------------------------------- adversarial spellings
@program((torch.tensor(100), 150.0), (torch.tensor(100), 50.0), (torch.tensor(100.0), 120.0))
def compound_interest_dtype_promotion(balance, target):
    """A savings loop as beginners write it: an int64 tensor balance multiplied by 1.05 in
    `while balance < target` (eager: int64 when the loop never runs, float32 after)."""
    years = 0
    while balance < target:
        balance = balance * 1.05
        years += 1
    return balance, years


@program((torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]),), (torch.tensor([2.0, 7.0, 1.0]),),
         (torch.tensor([4.0]),), grad=(0,))
def tournament_max_shrinking(x):
    """A tournament reduction whose loop state halves its length each round (odd lengths
    padded with -inf): `while x.numel() > 1`."""
    rounds = 0
    while x.numel() > 1:
        if x.numel() % 2 == 1:
            x = torch.cat([x, x.new_full((1,), -INF)])
        x = torch.maximum(x[0::2], x[1::2])
        rounds += 1
    return x, rounds


@program((torch.tensor([2, 3, 4, 5, 9, 11, 12]),), (torch.tensor([4, 6]),))
def trial_division_for_else(ns):
    """Trial division with `for ... else` (the Python tutorial's prime example) over the
    elements of a tensor; primes kept in a list of 0-d tensors."""
    primes = []
    for n in ns:
        for d in range(2, 12):
            if d * d > n:
                primes.append(n)
                break
            if n % d == 0:
                break
        else:
            primes.append(n)
    return primes


@program((torch.tensor([1, 4, 6, 3, 8]), torch.tensor(9)), (torch.tensor([1, 2]), torch.tensor(10)))
def two_sum_nested_return(a, target):
    """Two-sum by brute force: a `return i, j` from inside two nested loops on a tensor
    test, `return -1, -1` when nothing matches."""
    n = a.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            if a[i] + a[j] == target:
                return i, j
    return -1, -1


@program((_randn(2, 4).softmax(-1), 0.3), (_randn(2, 4, seed=1).softmax(-1), 0.99))
def early_exit_structure_differs(probs, thr):
    """An early-exit head returning only the prediction when confident and
    (prediction, confidence) otherwise: the two paths return different structures."""
    conf, pred = probs.max(-1)
    if conf.min() > thr:
        return pred
    return pred, conf


@program((torch.tensor([2.0, 1.0]), 0), (torch.tensor([0.0, 0.0]), 1), (torch.tensor([1.5, 0.2]), 2))
def int_of_tensor_as_range(x, seed):
    """`for i in range(int(x.sum()))`: the trip count read from tensor data (torchvision's
    per-image loops over `int(num_boxes)` look alike)."""
    acc = torch.zeros(())
    for i in range(int(x.sum())):
        acc = acc + x[i % x.shape[0]] * i
    return acc


@program((torch.zeros(2), 30, 0), (torch.tensor([2.0, -2.0]), 10, 1))
def metropolis_python_math(x, n, seed):
    """Metropolis written with `.item()` and the math module (many blog posts):
    `if u.item() < math.exp(min(0.0, delta))`."""
    g = torch.Generator().manual_seed(seed)
    lp = -(x ** 2).sum()
    acc = 0
    for _ in range(n):
        prop = x + 0.5 * torch.randn(x.shape, generator=g)
        lp_prop = -(prop ** 2).sum()
        delta = (lp_prop - lp).item()
        u = torch.rand((), generator=g)
        if u.item() < math.exp(min(0.0, delta)):
            x, lp = prop, lp_prop
            acc += 1
    return x, acc


@program((torch.zeros(5, dtype=torch.long), torch.tensor([0, 3, 3, 1, 7, 4]), 5),
         (torch.zeros(3, dtype=torch.long), torch.tensor([-1, 2]), 3))
def histogram_into_argument(hist, values, nbins):
    """A histogram accumulated in place into the caller's tensor (`hist[v] += 1`), values
    out of range skipped with `continue` on a tensor test."""
    dropped = 0
    for v in values:
        if v < 0 or v >= nbins:
            dropped += 1
            continue
        hist[v] += 1
    return dropped


@program((torch.tensor([NAN, 1.0, -1.0]),), (torch.tensor([0.0, INF, -INF]),))
def if_versus_where_nan(x):
    """ReLU-like code written with a Python `if` per element and with torch.where: NaN
    takes the else branch in both."""
    out = []
    for v in x:
        if v > 0:
            out.append(v)
        else:
            out.append(torch.zeros_like(v))
    return torch.stack(out), torch.where(x > 0, x, torch.zeros_like(x))


@program((torch.tensor(3.0), torch.tensor(-5.0)), (torch.tensor(NAN), torch.tensor(1.0)),
         (torch.tensor(2, dtype=torch.int32), torch.tensor(7, dtype=torch.int32)))
def builtin_max_abs_on_tensors(a, b):
    """Python's max/min/abs on 0-d tensors inside a loop (clipping code written with
    builtins), NaN included: max(nan, 1) is nan, max(1, nan) is 1."""
    lo = min(a, b)
    hi = max(a, b)
    for _ in range(3):
        lo = max(lo - 1, -abs(hi))
    return lo, hi, max(b, a)


@program((torch.tensor([5.0, 3.0, 8.0]),), (torch.tensor([1.0]),))
def list_pop_worklist(x):
    """A work list of 0-d tensors (`while stack: v = stack.pop()`) splitting values above 2
    in halves (a quadtree-style subdivision)."""
    stack = [v for v in x]
    leaves = []
    while stack:
        v = stack.pop()
        if v > 2:
            stack.append(v / 2)
            stack.append(v / 2)
        else:
            leaves.append(v)
    return torch.stack(leaves)


@program((_randn(3, 4), 2), (_randn(3, 4, seed=1), 0))
def nested_function_closure_counter(x, k):
    """A nested helper that rebinds a closure counter (`nonlocal calls`) from inside a
    tensor loop: the count returned."""
    calls = 0

    def normalize(row):
        nonlocal calls
        calls += 1
        return row / row.norm()
    out = []
    for row in x:
        if row.sum() > 0 or k == 0:
            out.append(normalize(row))
        else:
            out.append(row)
    return torch.stack(out), calls



# ----------------------------------------------------------------------------- first call runs zero iterations
@program((torch.tensor(1),), (torch.tensor(27),), (torch.tensor(7),), (torch.tensor(1),))
def collatz_trace_at_zero_iterations(n):
    """The Collatz loop traced first on an input that never enters it, then run on inputs
    of the same signature that iterate 111 and 16 times; the trajectory kept in a list."""
    path = []
    while n != 1:
        path.append(n)
        n = torch.where(n % 2 == 0, n // 2, 3 * n + 1)
    return len(path), path


@program((torch.tensor([5.0, 5.0]), 0.5), (torch.tensor([0.1, 0.1]), 0.5), (torch.tensor([100.0, 3.0]), 0.5))
def cooling_log_printed(temp, rate):
    """Newton's law of cooling stepped until cool, printing each step's temperature with an
    f-string on `.item()` and the tensor itself (printed text compared with eager)."""
    step = 0
    while temp.max() > 1.0:
        temp = temp * rate
        step += 1
        print(f"step {step}: max {temp.max().item():.3f}")
        print(temp)
    return temp


@program((torch.tensor([[2.0, 1.0, -1.0], [-3.0, -1.0, 2.0], [-2.0, 1.0, 2.0]]), torch.tensor([8.0, -11.0, -3.0])),
         (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([2.0, 3.0])),
         (torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.tensor([1.0, 2.0])), grad=(0, 1))
def gaussian_elimination_pivoting(A, b):
    """Gaussian elimination with partial pivoting (Numerical Recipes' gaussj idea): row
    swaps by index assignment under `if p != k`, a ValueError on a singular pivot."""
    n = A.shape[0]
    M = torch.cat([A, b.unsqueeze(1)], 1)
    for k in range(n):
        p = M[k:, k].abs().argmax() + k
        if M[p, k].abs() < 1e-9:
            raise ValueError("matrix is singular")
        if p != k:
            M = M.index_select(0, torch.arange(n).index_put((torch.stack([torch.tensor(k), p]),),
                                                            torch.stack([p, torch.tensor(k)])))
        row = M[k] / M[k, k]
        M = (M - M[:, k].unsqueeze(1) * row).index_copy(0, torch.tensor([k]), row.unsqueeze(0))
    return M[:, -1]


@program((torch.tensor([4.0, 2.0, 1.0]),), (torch.tensor([1.0, -2.0]),))
def assert_in_tensor_loop(x):
    """An `assert` on tensor data inside a loop (input validation in a normalisation loop):
    the AssertionError eager raises on a negative entry comes from the graph too."""
    out = []
    for v in x:
        assert v >= 0, "negative weight"
        out.append(v.sqrt())
    return torch.stack(out)


@program((torch.tensor([1.0, 2.0, NAN, 4.0]),), (torch.tensor([1.0, 2.0]),))
def raise_at_later_iteration(x):
    """A training-style loop that raises FloatingPointError when the running value turns
    NaN at some iteration (Lightning's `detect_anomaly`-like check by hand)."""
    total = torch.zeros(())
    for i in range(x.shape[0]):
        total = total + x[i]
        if torch.isnan(total):
            raise FloatingPointError(f"nan at step {i}")
    return total



@program((torch.tensor([1.0, 2.0]), 1e-7), (torch.tensor([10.0, 12.0]), 1e-7), (torch.tensor([-3.0, 0.5]), 1e-3))
def taylor_exp_python_factorial(x, tol):
    """exp(x) by its Taylor series until the term is small (numerical-methods course
    code): the factorial a Python int (`fact *= k`), so it never overflows eagerly."""
    total = torch.ones_like(x)
    term = torch.ones_like(x)
    k = 0
    fact = 1
    while term.abs().max() > tol and k < 60:
        k += 1
        fact *= k
        term = x ** k / float(fact)
        total = total + term
    return total, k



# ----------------------------------------------------------------------------- the global RNG
@program((1.0, 5), (0.1, 3), (3.0, 0))
def rejection_global_rng(bound, n):
    """Rejection sampling from the global generator (`torch.rand`/`torch.randn` without a
    generator, as most scripts do): `while True` until a draw lands inside the bound."""
    out = []
    tries = 0
    for _ in range(n):
        while True:
            s = torch.randn(())
            tries += 1
            if s.abs() < bound:
                break
        out.append(s)
    return (torch.stack(out) if n else torch.zeros(0)), tries


@program((_randn(5, 3), 0.3, 8), (_randn(2, 3, seed=1), 0.0, 4), (_randn(4, 2, seed=2), 1.0, 4))
def epsilon_greedy_global_rng(q_table, eps, steps):
    """The DQN tutorial's epsilon-greedy action choice with the global generator: a
    random action when `torch.rand(()) < eps`, otherwise the argmax; states walk the
    table."""
    state = 0
    actions = []
    for _ in range(steps):
        if torch.rand(()) < eps:
            a = torch.randint(q_table.shape[1], ())
        else:
            a = q_table[state].argmax()
        actions.append(a)
        state = (state + int(a) + 1) % q_table.shape[0]
    return torch.stack(actions)


@program((torch.zeros(2, 3), 6), (torch.zeros(1, 2), 1))
def ddpm_global_randn_like(x, T):
    """The DDPM sampling loop as lucidrains' denoising-diffusion-pytorch writes it:
    `torch.randn_like(x) if t > 0 else 0.`, the global generator."""
    betas = torch.linspace(1e-4, 0.02, T)
    alphas = 1 - betas
    ab = torch.cumprod(alphas, 0)
    x = torch.randn_like(x)
    for t in reversed(range(T)):
        eps = _eps_model(x, torch.tensor(t))
        noise = torch.randn_like(x) if t > 0 else 0.0
        x = (x - betas[t] / (1 - ab[t]).sqrt() * eps) / alphas[t].sqrt() + betas[t].sqrt() * noise
        if x.abs().max() > 3:
            x = x.clamp(-3, 3)
    return x



# ----------------------------------------------------------------------------- autograd inside loops, recursion
@program((torch.tensor([1.0, -0.5]), 5, 0), (torch.tensor([3.0, 3.0, -3.0]), 3, 1))
def langevin_autograd_grad(x, n, seed):
    """Unadjusted Langevin dynamics as score-based-model code writes it: the energy's
    gradient from `torch.autograd.grad` inside the loop, clipped under a tensor `if`."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = x.detach().requires_grad_(True)
        e = (x ** 4 - x ** 2).sum()
        gr, = torch.autograd.grad(e, x)
        if gr.norm() > 5:
            gr = gr * 5 / gr.norm()
        x = x - 0.01 * gr + 0.1 * torch.randn(x.shape, generator=g)
    return x.detach()


@program((torch.tensor([1.0]),), (torch.tensor([5.0]),), (torch.tensor([-2.0]),))
def newton_autograd_derivative(x):
    """Newton's method with the derivative from autograd (the PyTorch forums' root-finding
    recipe), `break` when the step is small, the iteration index returned."""
    for i in range(30):
        x = x.detach().requires_grad_(True)
        f = (x ** 3 - 2).sum()
        d, = torch.autograd.grad(f, x)
        step = f / d.sum()
        x = x - step
        if step.abs() < 1e-6:
            break
    return x.detach(), i


@program((torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]),), (torch.tensor([2.0]),))
def quicksort_recursive(x):
    """Functional quicksort over tensors (the classic three-way partition recursion):
    its depth depends on the data."""
    if x.numel() <= 1:
        return x
    p = x[0]
    return torch.cat([quicksort_recursive(x[x < p]), x[x == p], quicksort_recursive(x[x > p])])


@program((torch.arange(10.0),), (torch.tensor([1.0, 1.0, 1.0, 5.0]),), (torch.tensor([2.0]),))
def kd_split_depth(x, depth=0):
    """A k-d tree build's depth by median splits with a Python depth cap (sklearn's
    KDTree leaf_size idea): recursion bounded by a Python int."""
    if x.numel() <= 2 or depth >= 3:
        return torch.tensor(depth)
    m = x.median()
    return torch.maximum(kd_split_depth(x[x < m], depth + 1), kd_split_depth(x[x >= m], depth + 1))



@program((torch.tensor([5, 0, 3, 9, 9, 2, 7, 1, 4, 4, 8, 6, 3, 2, 5]),), (torch.tensor([1, 0, 2]),))
def rolling_hash_python_int(tokens):
    """A polynomial token hash (Java's String.hashCode / Rabin-Karp taking the modulus at
    the end) skipping padding (0) with a tensor test: a Python int that outgrows int64."""
    h = 0
    for t in tokens:
        if t != 0:
            h = h * 31 + 7
    return h % 1000003



# ----------------------------------------------------------------------------- assignment
def _cost(n, seed):
    return _rand(n, n, seed=seed) * 5


@program((_cost(3, 0),), (_cost(4, 1),), (torch.tensor([[1.0]]),))
def greedy_matching_item_pairs(cost):
    """Greedy bipartite matching as detection trackers write it (SORT-style fallback when
    scipy is missing): `divmod(cost.argmin().item(), n)`, (i, j) tuples appended, a float
    total from `.item()`."""
    cost = cost.clone()
    n = cost.shape[1]
    pairs = []
    total = 0.0
    while torch.isfinite(cost).any():
        i, j = divmod(cost.argmin().item(), n)
        total += cost[i, j].item()
        pairs.append((i, j))
        cost[i, :] = INF
        cost[:, j] = INF
    return pairs, total


@program((_cost(3, 0),), (_cost(4, 1),), (torch.tensor([[1.0]]),))
def greedy_matching_tensors(cost):
    """The same greedy matching kept in tensors: row and column indices from `//` and `%`
    of the flat argmin, two lists of 0-d tensors stacked."""
    cost = cost.clone()
    n = cost.shape[1]
    rows, cols = [], []
    while torch.isfinite(cost).any():
        flat = cost.argmin()
        i, j = flat // n, flat % n
        rows.append(i)
        cols.append(j)
        cost[i, :] = INF
        cost[:, j] = INF
    return torch.stack(rows), torch.stack(cols)


# ----------------------------------------------------------------------------- verdicts
# program -> text of the line its fallback must name (default and strict)
FALLS_BACK = {
    # Python lists of ints whose lengths depend on the data
    "viterbi_decode_crf": "for hist in reversed(history[:ends[b]]):",
    "ctc_greedy_decode": "hyps.append(hyp)",
    # ragged: one tensor of a data-dependent length per row
    "ctc_greedy_decode_masks": "for row in best_path:",
    # README: a variable first assigned in a tensor loop and read after it is an error
    # (here `shift = inf` makes the first iteration certain, which the rule cannot see)
    "kmeans_lloyd": "while shift > tol and it < 100:",
    # eager changes the loop variable's dtype (int64 -> float32) on the first iteration
    "compound_interest_dtype_promotion": "while balance < target:",
    # a work list whose length the data decides, popped and pushed
    "list_pop_worklist": "while stack:",
    # tuples appended in a tensor loop (README: still falling back)
    "greedy_matching_item_pairs": "while torch.isfinite(cost).any():",
    # a Python int past int64: checked when the graph runs, the call then runs eagerly
    "rolling_hash_python_int": "h = h * 31 + 7",
    # a recursion whose depth the data decides cannot end while tracing
    "quicksort_recursive": "return torch.cat([quicksort_recursive(x[x < p]), x[x == p], quicksort_recursive(",
}

XFAIL = {
    "lbfgs_two_loop":
        "BUG: converts now (`if s_hist:` of a list grown in the tensor loop is `len > 0` "
        "when the graph runs), but the optimized graph's float32 rounding differs from "
        "eager's and 20 L-BFGS steps amplify it: x[1] 0.0503 where eager gives 0.0502 "
        "(rel. 1e-4); with options.optimize = False the graph equals eager",
    "taylor_exp_python_factorial":
        "BUG (now loud, not silent): `fact *= k` past 20! leaves int64; the graph checks it "
        "when it runs and the call runs eagerly with a FallbackWarning (eager's values), but "
        "the first input converts, so the verdict is neither 'converts' nor 'falls_back' "
        "on the first call; a graph cannot carry a Python int past int64",
    "dopri5_adaptive":
        "BUG: converts now (the body-local `ks` read by a generator expression is no cell), "
        "but the optimized graph's float32 rounding differs from eager's: the embedded "
        "pair's error `((y5 - y4) / scale)` (y5 - y4 ~1e-8, scale ~1e-5) is 0.0042 on the "
        "first step where eager's is exactly 0.0, so the step controller takes another path "
        "(n_reject 0, eager 1); with options.optimize = False the graph equals eager",
}


def _params():
    names = [fn.__name__ for fn, _, _ in PROGRAMS]
    assert len(names) == len(set(names))
    assert set(FALLS_BACK) <= set(names) and set(XFAIL) <= set(names)
    out = []
    for fn, inputs, grad in PROGRAMS:
        name = fn.__name__
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []
        verdict = "falls_back" if name in FALLS_BACK else "converts"
        out.append(pytest.param(fn, inputs, grad, verdict, FALLS_BACK.get(name), id=name, marks=marks))
    return out


@pytest.mark.parametrize("fn, inputs, grad, verdict, line", _params())
def test_program(fn, inputs, grad, verdict, line):
    default, strict = to_graph(fn), to_graph(fn, strict=True)
    inputs = list(inputs) + [p for p in map(_perturbed, inputs) if p is not None]
    for n, args in enumerate(inputs):
        exp = _seeded_call(fn, args, grad)
        got = _seeded_call(default, args, grad)
        if verdict == "converts":
            assert not got[2], f"call {n}: {got[2][0]}"
            assert got[3] is None, f"call {n}: {got[3]}"
        else:  # warned once per function: later calls may run eagerly quietly
            assert got[2] or n > 0, f"call {n}: expected a FallbackWarning"
            for message in got[2]:
                _names_line(message, line)
        _compare(got, exp, f"call {n}")
        got = _seeded_call(strict, args, grad)
        if verdict == "converts":
            assert got[3] is None, f"call {n} strict: {got[3]}"
            _compare(got, exp, f"call {n} strict")
        else:  # the first input falls back; another may convert (a float balance)
            assert got[3] is not None or n > 0, f"call {n} strict: expected ConversionError"
            if got[3] is not None:
                _names_line(str(got[3]), line)
            else:
                _compare(got, exp, f"call {n} strict")


def test_enough_programs():
    assert len(PROGRAMS) >= 50
