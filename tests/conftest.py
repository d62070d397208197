"""The whole suite's settings, before any test module imports the runtime.

Kernels build synchronously here (``TOGRAPH_KERNEL_BUILD=sync``, also for the processes the
tests start): tests that check a kernel's C path after the first call, or the warning of a
failed build during it, see it then. ``tests/runtime/test_background_kernels.py`` tests the
default background builds explicitly (``options.override(kernel_build="background")``).
"""
import os

os.environ.setdefault("TOGRAPH_KERNEL_BUILD", "sync")
