"""``try``/``except*`` (exception groups) is refused by name: the call runs eagerly with a
FallbackWarning naming the ``try`` line (strict: ConversionError). Converting it crashed
inside the ``try`` converter ("unsupported operand type(s) for |"), a misleading reason."""
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph


def handles_a_group(x):
    try:
        if x.sum() > 0:
            raise ExceptionGroup("checks", [ValueError("positive")])
        y = x * 2
    except* ValueError:
        y = -x
    return y


@pytest.mark.parametrize("x", [torch.ones(3), -torch.ones(3), torch.zeros(2)])
def test_falls_back_with_eager_results_naming_the_try(x):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = to_graph(handles_a_group)(x)
    torch.testing.assert_close(got, handles_a_group(x), rtol=0, atol=0)
    msgs = [str(w.message) for w in seen if issubclass(w.category, FallbackWarning)]
    assert len(msgs) == 1 and "try/except* (exception groups) is not supported" in msgs[0]
    assert f"{__file__}:13:" in msgs[0]


def test_strict_raises_conversion_error():
    with pytest.raises(ConversionError, match="exception groups"):
        to_graph(handles_a_group, strict=True)(torch.ones(2))
