"""The rotary-embedding programs the rotary tests convert (transformers' rotate_half, and
LLaMA's projection viewed as heads, transposed, then rotated)."""
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def projected(x, w, cos, sin):
    """LLaMA's layout: a projection viewed as heads and transposed, then rotated."""
    q = torch.nn.functional.linear(x, w).view(x.shape[0], x.shape[1], -1, 8).transpose(1, 2)
    return q * cos + rotate_half(q) * sin
