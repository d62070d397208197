"""The whole suite's settings, before any test module imports the runtime.

Kernels build synchronously here (``TOGRAPH_KERNEL_BUILD=sync``, also for the processes the
tests start): tests that check a kernel's C path after the first call, or the warning of a
failed build during it, see it then. ``tests/runtime/test_background_kernels.py`` tests the
default background builds explicitly (``options.override(kernel_build="background")``).
"""
import os

import pytest

os.environ.setdefault("TOGRAPH_KERNEL_BUILD", "sync")


@pytest.fixture(scope="session")
def suite_kernel_cache(tmp_path_factory):
    """The cache root for modules that build many kernels (``options.override(cache_dir=
    suite_kernel_cache)``): the user's kernel cache, shared by every module and kept across
    runs, so an unchanged kernel is compiled once, not again in every run (gcc was most of
    those modules' time). Kernels are content-addressed (the key hashes the source, flags,
    compiler and CPU), so a kernel found there is the binary its source builds; modules that
    test building and the cache itself keep fresh directories of their own.
    ``TOGRAPH_TEST_FRESH_KERNELS=1`` gives a fresh directory per session instead (every kernel
    then compiles in the run)."""
    from runtime.options import options
    if os.environ.get("TOGRAPH_TEST_FRESH_KERNELS", "").strip() not in ("", "0") \
            or not options.cache_dir:
        return str(tmp_path_factory.mktemp("suite-kernels"))
    return options.cache_dir


@pytest.fixture(scope="session")
def tour():
    """examples/tour.py, run once in a fresh process (``tests/examples_tour.py``)."""
    from tests.examples_tour import run_tour
    return run_tour()
