"""The runtime's switches, in one object, read from the environment once at import.

    TOGRAPH_NO_COMPILER=1     never build C kernels: fused groups run as torch ops
    TOGRAPH_CACHE_DIR=PATH    where compiled kernels are kept (default: the user cache dir;
                              read-only: used as is, new kernels in $TMPDIR/tograph-<uid>)
    CC=COMMAND                the C compiler for kernels (default: gcc, then cc)
    TOGRAPH_VERIFY_PASSES=1   run the graph verifier after every optimizer pass (tests do)
    TOGRAPH_OPTIMIZE=0        skip the optimizer: the executor runs the traced graph as is
    TOGRAPH_FOLD_BATCHNORM=0  keep eval-mode batch norms after convolutions as they are
                              (folding misses parameter writes through ``p.data``)
    TOGRAPH_ONEDNN_LINEAR=on  linear layers under autograd through oneDNN's matmul: "on",
                              "auto" (where MKL lacks AVX-512 code, an AVX-512 CPU that
                              is not Intel's; ``kernels.onednn_linear``) or "off" (the
                              default: oneDNN's products are not MKL's bits, and 20 steps
                              of mobilenet_v3_small drifted 2.4 relative from eager's)
    TOGRAPH_KERNEL_BUILD=sync compile a graph's kernels before its first call returns
                              (default ``background``: a cold first call runs the fused
                              groups as torch ops while a thread compiles them; then they
                              swap in; ``runtime.kernels.wait()`` waits for them)

Not here: ``TOGRAPH_LOGS=+graph,retrace`` (logging topics: ``runtime.logs``) and
``TOGRAPH_CACHE_LIMIT=N`` (signatures kept per function: ``transpiler.signature_cache``).

Code reads ``options.<name>``; tests change it with ``options.override(...)``.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tograph")


def _kernel_build() -> str:
    value = os.environ.get("TOGRAPH_KERNEL_BUILD", "").strip().lower() or "background"
    if value not in ("sync", "background"):
        import warnings
        warnings.warn(f"TOGRAPH_KERNEL_BUILD={value!r} is neither 'sync' nor 'background'; "
                      f"kernels build in the background")
        return "background"
    return value


def _onednn_linear() -> str:
    value = os.environ.get("TOGRAPH_ONEDNN_LINEAR", "").strip().lower() or "off"
    return value if value in ("on", "off", "auto") else \
        ("on" if _flag("TOGRAPH_ONEDNN_LINEAR", False) else "off")


@dataclass
class Options:
    compiler: bool = True          # build fused groups into C kernels when a compiler exists
    cache_dir: str = ""            # root of the on-disk cache (kernels live under kernels/)
    cc: str = ""                   # C compiler command ("" = gcc, then cc); may carry words
    verify_passes: bool = False    # verify the graph after each optimizer pass
    optimize: bool = True          # run the optimizer at all
    fold_batchnorm: bool = True    # fold eval batch norms into the convolution before them
    channels_last: bool = True     # run eval conv_bn chains channels-last (NHWC)
    kernel_build: str = "background"   # "sync": kernels compiled before the first call runs
    onednn_linear: str = "off"     # "on" / "off" / "auto": kernels.onednn_linear.available

    @classmethod
    def from_environment(cls) -> "Options":
        return cls(compiler=not _flag("TOGRAPH_NO_COMPILER", False),
                   cache_dir=os.environ.get("TOGRAPH_CACHE_DIR") or _cache_dir(),
                   cc=os.environ.get("CC", "").strip(),
                   verify_passes=_flag("TOGRAPH_VERIFY_PASSES", False),
                   optimize=_flag("TOGRAPH_OPTIMIZE", True),
                   fold_batchnorm=_flag("TOGRAPH_FOLD_BATCHNORM", True),
                   channels_last=_flag("TOGRAPH_CHANNELS_LAST", True),
                   kernel_build=_kernel_build(),
                   onednn_linear=_onednn_linear())

    @contextlib.contextmanager
    def override(self, **changes):
        """Temporarily change some options (tests: ``with options.override(compiler=False)``)."""
        old = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(changes) - set(old)
        if unknown:
            raise TypeError(f"unknown options: {sorted(unknown)}")
        for key, value in changes.items():
            setattr(self, key, value)
        try:
            yield self
        finally:
            for key, value in old.items():
                setattr(self, key, value)


options = Options.from_environment()
