"""Fresh eyes over torch.nn: every kind of module as a new user calls it (programs in
fresh_eyes_nn_modules.py), through ``to_graph(module)`` and a converted function calling it,
in train and eval, with and without grad, over several calls, against eager: outputs,
gradients, parameters, buffers and attributes after the calls, the RNG state, arguments
changed in place, torch's warnings. A case converts ("OK"), or falls back with a
FallbackWarning naming a line and then equals eager; open findings are strict xfails
("BUG: ..." silently different or crashing, "needless fallback: ...")."""
import re

import pytest
import torch

from fresh_eyes_nn_modules import CASES, run_case

# Cases that fall back with a FallbackWarning and equal eager (a reason a graph cannot do).
# name -> the combos that fall back (None: all) and a part of the warning.
FALLS_BACK = {
    "batchnorm2d_momentum_none": (("module-train-grad",), "__float__"),
    "lazy_linear": (None, "setting its .data"),
    "lazy_conv2d": (None, "setting its .data"),
    "lazy_batchnorm1d": (None, "setting its .data"),
    "lazy_linear_in_sequential": (None, "setting its .data"),
    "full_backward_hook_on_submodule": (None, "backward hooks"),
    "manual_sgd_step": (None, "setting its .grad"),
    "lstm_parameter_replaced_between_calls": (None, "mutates"),
    "generator_attribute": (None, "torch.Generator"),
    "adaptive_log_softmax_with_loss": (None, "bool() of a symbolic tensor"),
}

# name -> (combos it applies to (None: all), reason). The round's findings are fixed:
# nn.Softmax()'s double warning (runtime.inference_warnings), pack_padded_sequence with
# list lengths and pack_sequence (runtime.known_values) and with tensor lengths
# (runtime.packed_sequences: run-time sizes), GaussianNLLLoss (its value check
# on zeros in shape inference), nn.init on a tensor made in forward (the tensor by keyword).
OPEN = {}


def _params():
    out = []
    for name, c in CASES.items():
        for combo in c.combos:
            marks = []
            if name in OPEN:
                combos, reason = OPEN[name]
                if combos is None or combo in combos:
                    marks = [pytest.mark.xfail(strict=True, reason=reason)]
            out.append(pytest.param(name, combo, marks=marks, id=f"{name}-{combo}"))
    return out


def test_enough_programs():
    assert len(CASES) >= 60


@pytest.mark.parametrize("name,combo", _params())
def test_module_as_a_new_user_calls_it(name, combo):
    rng = torch.get_rng_state()
    try:
        verdict = run_case(CASES[name], combo)
    finally:
        torch.set_rng_state(rng)
    fb = FALLS_BACK.get(name)
    if name in OPEN or fb is None or (fb[0] is not None and combo not in fb[0]):
        assert verdict == "OK", verdict
        return
    assert verdict.startswith("FALLBACK: "), verdict
    assert fb[1] in verdict, verdict
    assert re.search(r"\.py:\d+: ", verdict), verdict      # names a file:line
