"""Generated C kernels: codegen (codegen.py), build and cache (compiler.py), calls (launch.py),
builds in a background thread (background.py: ``runtime.kernels.wait()`` waits for them)."""
from .background import wait  # noqa: F401
