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
    "packed_lstm_sorted_lengths_tensor": (None, "_pack_padded_sequence"),
    "packed_gru_unsorted": (None, "_pack_padded_sequence"),
    "batchnorm2d_momentum_none": (("module-train-grad",), "__float__"),
    "lazy_linear": (None, "setting its .data"),
    "lazy_conv2d": (None, "setting its .data"),
    "lazy_batchnorm1d": (None, "setting its .data"),
    "lazy_linear_in_sequential": (None, "setting its .data"),
    "full_backward_hook_on_submodule": (None, "backward hooks"),
    "manual_sgd_step": (None, "setting its .grad"),
    "lstm_parameter_replaced_between_calls": (None, "mutates"),
    "generator_attribute": (None, "torch.Generator"),
    "vector_to_parameters_in_forward": (None, "setting its .data"),
    "adaptive_log_softmax_with_loss": (None, "bool() of a symbolic tensor"),
}

_TRAIN = ("module-train-grad", "function-train-nograd")
# name -> (combos it applies to (None: all), reason)
OPEN = {
    "softmax_implicit_dim": (("module-train-grad",), (
        "BUG: nn.Softmax() (implicit dim) in train with grad: the first call of each new "
        "signature emits torch's 'Implicit dimension choice' warning twice, eager once")),
    "packed_lstm_sorted_lengths_list": (None, (
        "needless fallback: pack_padded_sequence with lengths as a Python list (every shape "
        "known when tracing) falls back: '_pack_padded_sequence: the result's shape could not "
        "be inferred' (the lengths are moved to meta)")),
    "pack_sequence_unsorted": (None, (
        "needless fallback: rnn.pack_sequence([a, b]) takes its lengths from the tensors' "
        "static sizes, yet falls back with '_pack_padded_sequence: the result's shape could "
        "not be inferred'")),
    "gaussian_nll_loss": (None, (
        "needless fallback: nn.GaussianNLLLoss falls back ('the result's shape could not be "
        "inferred'; its data-dependent var < 0 check could be a staged raise), and inside "
        "to_graph(module) the warning names torch's loss.py line, not the user's")),
    "init_in_forward": (None, (
        "needless fallback: nn.init.kaiming_uniform_/uniform_/constant_ on a tensor made in "
        "forward: 'tracing failed with IndexError: tuple index out of range'")),
}


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
