"""Log arguments holding a Python number's stand-in inside a container (``tuple(x.shape)``
with a run-time dimension, a list or dict of sizes) are rebuilt as numbers when the graph
runs, as print's are: the records read ``(4, 3)``, not ``(tensor(4), 3)`` (h101)."""
import logging

import pytest
import torch

from transpiler import to_graph

pytestmark = pytest.mark.filterwarnings("error::transpiler.FallbackWarning")

LOG = logging.getLogger("tograph.tests.log_argument_numbers")


def logs_sizes(x):
    LOG.info("shape %s list %s dict %s size %s n %d", tuple(x.shape), [x.shape[0], 2],
             {"rows": x.shape[0]}, x.shape, x.shape[0])
    return x * 2


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append((record.getMessage(), record.funcName, record.lineno))


@pytest.fixture
def records():
    handler = _Records()
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    yield handler.seen
    LOG.removeHandler(handler)


def test_records_match_eager_over_dynamic_shapes(records):
    g = to_graph(logs_sizes)
    shapes = [(2, 3), (4, 3), (1, 3), (5, 3), (7, 3)]
    for shape in shapes:
        logs_sizes(torch.ones(shape))
    eager = list(records)
    records.clear()
    for shape in shapes:
        torch.testing.assert_close(g(torch.ones(shape)), logs_sizes(torch.ones(shape)) * 1)
    converted = records[0::2]           # (each converted call is followed by an eager one)
    assert converted == eager
    assert "tensor(" not in " ".join(m for m, _, _ in converted)
