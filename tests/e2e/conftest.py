import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import signal  # noqa: E402

import pytest  # noqa: E402


class Hang(Exception):
    """A test ran past its time limit (likely a converted loop that never ends)."""


@pytest.fixture(autouse=True)
def _time_limit():
    def on_alarm(signum, frame):
        raise Hang("test ran past 20 s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
