import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import pytest  # noqa: E402

import time_limits  # noqa: E402


class Hang(Exception):
    """A test ran past its time limit (likely a converted loop that never ends)."""


@pytest.fixture(autouse=True)
def _time_limit():
    def on_alarm(signum, frame):
        raise Hang("test ran past 20 s (CPU time; 120 s wall)")
    old = time_limits.install(on_alarm)
    time_limits.arm(20)
    try:
        yield
    finally:
        time_limits.restore(old)
