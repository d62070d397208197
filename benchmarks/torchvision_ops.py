"""torchvision's C ops in plain torch, for the CPU torch.

torchvision 0.28 here is a CUDA build whose C extension does not load on the CPU torch
(``benchmarks/torchvision_cpu.py`` defines the schemas its import needs). ``register_cpu_ops()``
registers, with ``torch.library``, the two ops torchvision's detection models call:
``torchvision::nms`` (``nms_cpu``: a greedy NMS, torchvision's CPU kernel's algorithm) and
``torchvision::roi_align`` (``roi_align_torch``: bilinear sampling equal to its C kernel,
differentiable through autograd, CompositeImplicitAutograd so that it also runs on meta
tensors), and tells torchvision its ops are there. ``nms_traceable`` is the same NMS in torch
ops and a Python loop, which ``to_graph`` converts (the sweep's ``--past``).
"""
import sys

import torch

from benchmarks.torchvision_cpu import import_torchvision


def nms_cpu(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS as torchvision's CPU kernel does it: boxes by score, descending (stable),
    each kept box suppresses the later ones whose IoU with it is over the threshold (in the
    boxes' dtype); returns the kept indices, best first."""
    import numpy as np
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = torch.sort(scores, descending=True, stable=True).indices.numpy()
    b = dets.detach().cpu().numpy()
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    suppressed = np.zeros(len(b), dtype=bool)
    keep = []
    for n, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[n + 1:]
        rest = rest[~suppressed[rest]]
        w = np.maximum(0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        iou = (inter / (areas[i] + areas[rest] - inter)).astype(np.float64)
        suppressed[rest[iou > iou_threshold]] = True
    return torch.tensor(keep, dtype=torch.long, device=dets.device)


def _bilinear(flat, batch, y, x, height, width):
    """Samples of ``flat`` ((N*H*W, C), channels last) at rows ``y`` (K, PH) and columns
    ``x`` (K, PW) of image ``batch`` (K,): (K, PH, PW, C), as roi_align's kernel samples
    (0 outside [-1, size], clamped to the border inside it)."""
    k, ph, pw = y.shape[0], y.shape[1], x.shape[1]
    y = y[:, :, None].expand(k, ph, pw)
    x = x[:, None, :].expand(k, ph, pw)
    valid = ((y >= -1.0) & (y <= height) & (x >= -1.0) & (x <= width)).to(flat.dtype)
    y, x = y.clamp(min=0), x.clamp(min=0)
    y_low, x_low = y.long(), x.long()
    y_edge, x_edge = y_low >= height - 1, x_low >= width - 1
    y_low = torch.where(y_edge, height - 1, y_low)
    x_low = torch.where(x_edge, width - 1, x_low)
    y_high = torch.where(y_edge, height - 1, y_low + 1)
    x_high = torch.where(x_edge, width - 1, x_low + 1)
    y = torch.where(y_edge, y_low.to(flat.dtype), y)
    x = torch.where(x_edge, x_low.to(flat.dtype), x)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    base = batch[:, None, None] * (height * width)
    out = 0
    for w, yy, xx in ((hy * hx, y_low, x_low), (hy * lx, y_low, x_high),
                      (ly * hx, y_high, x_low), (ly * lx, y_high, x_high)):
        out = out + (w * valid)[..., None] * flat[base + yy * width + xx]
    return out


def roi_align_torch(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int,
                    sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """torchvision's roi_align in plain torch, equal to its C kernel: the average of
    ``sampling_ratio``^2 bilinear samples per bin (``sampling_ratio <= 0``: ceil(bin size)
    samples a side, per box, as the kernel's adaptive count; that count is read with
    ``int()``, so meta tensors cannot take that path); no gradient reaches ``rois`` (as the
    C op's backward)."""
    n, c, height, width = input.shape
    rois = rois.detach()
    dtype = input.dtype
    flat = input.permute(0, 2, 3, 1).reshape(n * height * width, c)
    batch = rois[:, 0].long()
    offset = 0.5 if aligned else 0.0
    x1, y1 = rois[:, 1] * spatial_scale - offset, rois[:, 2] * spatial_scale - offset
    roi_w = rois[:, 3] * spatial_scale - offset - x1
    roi_h = rois[:, 4] * spatial_scale - offset - y1
    if not aligned:
        roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
    bin_h, bin_w = roi_h / pooled_height, roi_w / pooled_width
    ph = torch.arange(pooled_height, dtype=dtype, device=input.device)
    pw = torch.arange(pooled_width, dtype=dtype, device=input.device)
    if sampling_ratio > 0:
        grid_h = grid_w = torch.full_like(bin_h, sampling_ratio)
        rows = cols = sampling_ratio
    else:
        grid_h, grid_w = torch.ceil(bin_h), torch.ceil(bin_w)
        rows = int(grid_h.max()) if len(rois) else 0
        cols = int(grid_w.max()) if len(rois) else 0
    out = input.new_zeros(len(rois), pooled_height, pooled_width, c)
    steps_h, steps_w = grid_h.clamp(min=1)[:, None], grid_w.clamp(min=1)[:, None]
    for iy in range(rows):
        y = y1[:, None] + ph * bin_h[:, None] + (iy + 0.5) * bin_h[:, None] / steps_h
        for ix in range(cols):
            x = x1[:, None] + pw * bin_w[:, None] + (ix + 0.5) * bin_w[:, None] / steps_w
            sample = _bilinear(flat, batch, y, x, height, width)
            if sampling_ratio <= 0:
                sample = sample * ((iy < grid_h) & (ix < grid_w)).to(dtype)[:, None, None, None]
            out = out + sample
    out = out / (grid_h * grid_w).clamp(min=1)[:, None, None, None]
    return out.permute(0, 3, 1, 2).contiguous()


_LIBRARIES = []


def register_cpu_ops():
    """torchvision with CPU ``nms`` and ``roi_align`` registered (idempotent)."""
    tv = import_torchvision()
    if tv is None or _LIBRARIES:
        return tv
    impl = torch.library.Library("torchvision", "IMPL")
    impl.impl("nms", nms_cpu, "CPU")
    fragment = torch.library.Library("torchvision", "FRAGMENT")
    fragment.define("roi_align(Tensor input, Tensor rois, float spatial_scale, "
                    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
                    "bool aligned) -> Tensor")
    fragment.impl("roi_align", roi_align_torch, "CompositeImplicitAutograd")
    _LIBRARIES.extend([impl, fragment])
    tv.extension._has_ops = lambda: True
    sys.modules["torchvision.ops.roi_align"]._has_ops = lambda: True
    return tv


def nms_traceable(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float):
    """The greedy NMS of ``nms_cpu`` in torch ops and a Python loop over the boxes, so that
    ``to_graph`` converts it (a ``while`` over the run-time box count)."""
    box_iou = sys.modules["torchvision.ops.boxes"].box_iou
    order = torch.sort(scores, descending=True, stable=True).indices
    ranked = boxes[order]
    over = torch.triu(box_iou(ranked, ranked) > iou_threshold, diagonal=1)
    keep = torch.ones(ranked.shape[0], dtype=torch.bool, device=boxes.device)
    for i in range(ranked.shape[0]):
        if keep[i]:
            keep = keep & ~over[i]
    return order[keep]
