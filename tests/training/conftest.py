"""Fixtures the training tests share (``pytest.mark.usefixtures`` in their modules)."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Torch on one thread for the test: eager and converted runs sum in the same order."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def sync_kernel_build(monkeypatch):
    """Kernels compiled before a first call returns, whatever ``TOGRAPH_KERNEL_BUILD`` says:
    the test asserts which compiled node ran."""
    from runtime.options import options
    monkeypatch.setattr(options, "kernel_build", "sync", raising=False)
