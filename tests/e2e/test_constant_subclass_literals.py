"""Python constants of subclasses of int/float/str in a graph (numpy 2's ``np.float64``,
whose repr is ``np.float64(5.65)``; an ``IntEnum`` member, ``<Color.RED: 1>``): the generated
code held their repr, which is no literal there. transformers' CTRL scales its embeddings by
``np.sqrt(d_model)`` and its converted forward raised ``NameError: name 'np' is not
defined``. Differential: eager vs ``to_graph`` (strict), values and dtypes."""
from __future__ import annotations

import enum

import numpy as np
import pytest
import torch

from transpiler import to_graph


class Color(enum.IntEnum):
    RED = 1
    BLUE = 3


class Tag(str):
    pass


SCALE = np.sqrt(32)                 # np.float64
HALF = np.float32(0.5)
COUNT = np.int64(3)


def numpy_float_scale(x):
    x = x * 1.0
    x *= SCALE                      # CTRL: inputs_embeds *= np.sqrt(self.d_model_size)
    return x + HALF


def numpy_int_repeat(x):
    return x.repeat(int(COUNT), 1) * COUNT


def enum_constant(x):
    return x * Color.BLUE + Color.RED


def str_subclass_mode(x):
    mode = Tag("sum")
    return torch.nn.functional.l1_loss(x, torch.zeros_like(x), reduction=mode)


def float_subclass_in_a_loop(x):
    while x.sum() < 100:
        x = x * np.float64(2.0)
    return x


@pytest.mark.parametrize("fn", [numpy_float_scale, numpy_int_repeat, enum_constant,
                                str_subclass_mode, float_subclass_in_a_loop],
                         ids=lambda f: f.__name__)
def test_subclass_constants_run_in_the_graph(fn):
    g = to_graph(fn, strict=True)
    for x in (torch.ones(2, 3), torch.arange(6.0).reshape(2, 3) + 1):
        got, exp = g(x), fn(x)
        assert got.dtype == exp.dtype and got.shape == exp.shape
        torch.testing.assert_close(got, exp, rtol=1e-6, atol=0)


def test_ctrl_converts():
    pytest.importorskip("transformers")
    from benchmarks.torchvision_cpu import import_torchvision
    import_torchvision()
    from transformers import AutoConfig, AutoModel
    cfg = AutoConfig.for_model("ctrl", vocab_size=64, n_embd=16, n_layer=1, n_head=2, dff=32,
                               use_cache=False)
    torch.manual_seed(0)
    model = AutoModel.from_config(cfg).eval()
    ids = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(to_graph(model, strict=True)(ids)[0], model(ids)[0],
                                   rtol=1e-5, atol=1e-6)
