"""What the training benchmark and its test train (issue 15): each task is a model in train
mode, batches of inputs and targets, a loss, and an optimizer.

    task = TASKS["gpt2"]("test")              # or "bench": the benchmark's batch sizes
    model, opt = task.fresh()                 # a new model copy and its optimizer
    loss = training_step(model, opt, task.loss, *task.batch(seed))

The MLP and the RNN are ``benchmarks/workloads.py``'s functions (``mlp``, the ``for xt in
xs`` ``rnn_for``) with their weights as ``nn.Parameter``s; GPT-2 tiny, mobilenet_v3_small
and resnet18 are ``benchmarks/model_zoo.py``'s models (random weights) put in train mode.
One training step = forward, loss, backward, optimizer step. Dropout is set to 0 (GPT-2's
attention/residual/embedding dropout, mobilenet's classifier dropout): random masks are a
different stream under each contender, so with dropout on the 20-step check would compare
noise; BatchNorm trains as usual (batch statistics and running-stat updates).

Every task trains with SGD (momentum 0.9), AdamW being available (``optimizer="adamw"``):
AdamW divides each gradient entry by its own running scale, so an entry that is
mathematically 0 gets updates of +-lr from rounding noise alone. GPT-2's key bias is such a
parameter (softmax does not change when every score of a row shifts by the same q.b_k):
eager on 2 threads against eager on 1 thread, 20 AdamW steps, already differ by 2.5e-3
relative in ``c_attn.bias`` (1e-7 on every loss and 1e-6 on every gradient); with SGD
they agree within 6e-7 everywhere. A 1e-5 check is meaningful only for SGD.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import torch
import torch.nn.functional as F

from benchmarks import workloads

Batch = Tuple[tuple, torch.Tensor]          # (model inputs, target)


class MLP(torch.nn.Module):
    """``workloads.mlp`` (x @ w1 + b1, relu, x @ w2 + b2, relu, @ w3 + b3) with parameters."""

    def __init__(self, d_in: int, hidden: int, d_out: int):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        dims = [(d_in, hidden), (hidden, hidden), (hidden, d_out)]
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(a, b, generator=g) * a ** -0.5) for a, b in dims)
        self.biases = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(b, generator=g) * 0.1) for _, b in dims)

    def forward(self, x):
        (w1, w2, w3), (b1, b2, b3) = self.weights, self.biases
        return workloads.mlp(x, w1, b1, w2, b2, w3, b3)


class RNN(torch.nn.Module):
    """``workloads.rnn_for``: ``for xt in xs: h = tanh(xt @ w_ih + h @ w_hh + bias)``."""

    def __init__(self, d_in: int, hidden: int):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w_ih = torch.nn.Parameter(torch.randn(d_in, hidden, generator=g) * d_in ** -0.5)
        self.w_hh = torch.nn.Parameter(torch.randn(hidden, hidden, generator=g) * hidden ** -0.5)
        self.bias = torch.nn.Parameter(torch.randn(hidden, generator=g) * 0.1)

    def forward(self, xs, h):
        return workloads.rnn_for(xs, h, self.w_ih, self.w_hh, self.bias)


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
    return model


def _randn(seed: int, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _labels(seed: int, n: int, classes: int) -> torch.Tensor:
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed + 7))


def _lm_loss(out, ids):
    """Next-token cross entropy of a causal LM's logits against its own input ids."""
    logits = out.logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


@dataclass
class Task:
    name: str
    size: str                                          # a short description of the shapes
    build: Callable[[], torch.nn.Module]               # a fresh model in train mode
    batch: Callable[[int], Batch]                      # seed -> (inputs, target)
    loss: Callable[[object, torch.Tensor], torch.Tensor]
    optimizer: str = "sgd"                             # "sgd" (momentum 0.9) or "adamw"
    lr: float = 1e-2

    def __post_init__(self):
        self._model = None

    def model(self) -> torch.nn.Module:
        """The task's model (built once; copy it with ``fresh``)."""
        if self._model is None:
            self._model = self.build()
        return self._model

    def fresh(self) -> Tuple[torch.nn.Module, torch.optim.Optimizer]:
        """A deep copy of the model (same initial weights every time) and its optimizer."""
        model = copy.deepcopy(self.model())
        return model, self.make_optimizer(model.parameters())

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.lr)
        return torch.optim.SGD(params, lr=self.lr, momentum=0.9)


def training_step(model, opt, loss_fn, inputs: tuple, target: torch.Tensor) -> torch.Tensor:
    """One training step: forward, loss, backward, optimizer step; returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(*inputs), target)
    loss.backward()
    opt.step()
    return loss.detach()


# --------------------------------------------------------------------------- the tasks
def mlp(scale: str) -> Task:
    n, d, h = (64, 256, 512) if scale == "bench" else (16, 32, 64)
    return Task("mlp", f"{n}x{d}-{h}-{h}-10, SGD", lambda: MLP(d, h, 10),
                lambda s: ((_randn(s, n, d),), _labels(s, n, 10)), F.cross_entropy)


def rnn(scale: str) -> Task:
    steps, b, h = (50, 32, 64) if scale == "bench" else (10, 4, 16)
    return Task("rnn", f"for xt in xs, {steps} steps, b{b} h{h}, SGD", lambda: RNN(h, h),
                lambda s: ((_randn(s, steps, b, h), torch.zeros(b, h)), _randn(s + 1, b, h)),
                F.mse_loss)


def gpt2(scale: str) -> Task:
    from benchmarks import model_zoo
    b = 8 if scale == "bench" else 2

    def build():
        return _no_dropout(model_zoo.gpt2()[0].train())

    def batch(s):
        (ids,), _ = model_zoo._tokens(b, s, mask=False)
        return (ids,), ids
    return Task("gpt2", f"tiny (2 layers, width 64), batch {b} x {model_zoo.SEQ} tokens, "
                "SGD", build, batch, _lm_loss)


def gpt2_w128(scale: str) -> Task:
    """GPT-2 at width 128 (2 layers, 4 heads), batch 4 x 32 tokens: the other size the
    training speed is checked at, so a gain is not tied to GPT-2 tiny's shapes."""
    from benchmarks import model_zoo
    b, seq = (4, 32) if scale == "bench" else (2, 16)

    def build():
        m = model_zoo._hf("GPT2Config", "GPT2LMHeadModel", vocab_size=model_zoo.VOCAB,
                          n_positions=64, n_embd=128, n_layer=2, n_head=4, use_cache=False)
        return _no_dropout(m.train())

    def batch(s):
        ids = torch.randint(0, model_zoo.VOCAB, (b, seq), generator=torch.Generator()
                            .manual_seed(s))
        return (ids,), ids
    return Task("gpt2_w128", f"2 layers, width 128, batch {b} x {seq} tokens, SGD", build,
                batch, _lm_loss)


def _vision(name: str, scale: str) -> Task:
    from benchmarks import model_zoo
    b, size = (8, 64) if scale == "bench" else (4, 32)

    def build():
        return _no_dropout(getattr(model_zoo, name)()[0].train())
    return Task(name, f"batch {b} x 3x{size}x{size}, 10 classes, SGD", build,
                lambda s: ((_randn(s, b, 3, size, size),), _labels(s, b, 10)),
                F.cross_entropy)


TASKS: Dict[str, Callable[[str], Task]] = {
    "mlp": mlp, "rnn": rnn, "gpt2": gpt2, "gpt2_w128": gpt2_w128,
    "mobilenet_v3_small": lambda scale: _vision("mobilenet_v3_small", scale),
    "resnet18": lambda scale: _vision("resnet18", scale),
}
