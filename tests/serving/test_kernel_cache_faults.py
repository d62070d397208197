"""Kernel cache hardening (issue 14, item 6): each fault a user found, with its message.

- an intact entry of another key copied over an entry: detected, rebuilt, results right;
- a read-only pre-built cache: loaded as it is (nothing recompiled), new entries in the
  fallback directory, one warning;
- a cache directory that is a file, under a file, or unreadable: one warning naming it;
- ``CC=/nonexistent``, a CC whose ``--version`` fails, a CC that fails to compile: one
  warning naming the command, converted functions still equal eager (as torch ops);
- concurrent builders of one new kernel (processes, threads) compile it once (counted by a
  CC wrapper that appends to a file, or by wrapping ``_compile``); a lock whose holder hangs
  is waited for ``LOCK_TIMEOUT_S`` and then built past, with a warning.

Each test has its own cache directory, fallback directory and once-per-process warning
memory, so nothing touches the user's cache. Kernels are tiny (each compile ~0.1 s); the
competing processes are forked (no second torch import). As root, whom permissions do not
stop, the read-only and unreadable directories are simulated by patching the write probe
and ``os.access`` for that one path.
"""
import ctypes
import fcntl
import multiprocessing
import os
import shutil
import stat
import threading
import warnings

import pytest
import torch

from runtime.kernels import build_lock, cache_dirs, compiler, notices
from runtime.kernels.notices import KernelWarning
from runtime.options import options
from transpiler import FallbackWarning, to_graph

GCC = shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(not compiler.compiler_available() or GCC is None,
                              reason="no C compiler")
ROOT_USER = os.geteuid() == 0

# Two kernels with the same symbol: the one entry loaded in place of the other would run.
KERNEL = """
#include <stdint.h>
void k(const float *restrict a, const float *restrict b, float *restrict out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] %s b[i];
}
"""
ADD, SUB, MUL = KERNEL % "+", KERNEL % "-", KERNEL % "*"


@pytest.fixture
def kc(tmp_path, monkeypatch):
    """A fresh process's view of the kernel cache, rooted in ``tmp_path``: returns the
    cache root and the fallback base (the user's per-user directory lives under it)."""
    fresh_process(monkeypatch)
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setattr(cache_dirs, "FALLBACK_BASE", str(base))
    with options.override(cache_dir=str(tmp_path / "cache"), compiler=True, cc=""):
        yield tmp_path / "cache", base


def fresh_process(monkeypatch):
    """Forget what this process loaded, chose and warned about, as a new process would."""
    monkeypatch.setattr(compiler, "_loaded", {})
    monkeypatch.setattr(cache_dirs, "_places", {})
    monkeypatch.setattr(cache_dirs, "_fallbacks", {})
    monkeypatch.setattr(notices, "_said", set())


def counting_compiles(monkeypatch):
    compiled = []
    real = compiler._compile
    monkeypatch.setattr(compiler, "_compile", lambda *a: compiled.append(a[-1]) or real(*a))
    return compiled


def run(lib, a, b):
    out = torch.empty_like(a)
    lib.k(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
          ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(a.numel()))
    return out


def kernel_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, KernelWarning)]


def entry(source):
    """(path of ``source``'s entry in the writable cache, compiler argv, flags)."""
    argv, flags, key = compiler._locate(source, "k")
    return os.path.join(cache_dirs.places(options.cache_dir).write, key + ".so"), argv, flags


def put(source):
    """Build ``source``'s entry on disk without loading it here (as an earlier process)."""
    path, argv, flags = entry(source)
    compiler._compile(argv, flags, source, path, "k")
    return path


# ----------------------------------------------------------------- the key binds the content
@needs_cc
def test_entry_of_another_key_copied_over_is_detected_and_rebuilt(kc, monkeypatch):
    add_path, sub_path = put(ADD), put(SUB)
    shutil.copyfile(sub_path, add_path)         # intact, but SUB's: its checksum still holds
    assert not compiler._intact(add_path)
    compiled = counting_compiles(monkeypatch)
    a, b = torch.randn(100), torch.randn(100)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        lib = compiler.build(ADD, "k")
    said = kernel_warnings(record)
    assert len(said) == 1 and add_path in said[0] and "another key" in said[0], said
    torch.testing.assert_close(run(lib, a, b), a + b, rtol=0, atol=0)
    assert len(compiled) == 1 and compiler._intact(add_path)
    torch.testing.assert_close(run(compiler.build(SUB, "k"), a, b), a - b, rtol=0, atol=0)


@needs_cc
def test_trailer_names_the_key_and_checks_its_bytes(kc):
    path = put(ADD)
    data = open(path, "rb").read()
    key = os.path.basename(path)[:-3]
    assert data[-compiler._TRAILER + 32:-len(compiler._MAGIC)] == key.encode()
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 1                    # one bit of the ELF bytes
    with open(path, "wb") as f:
        f.write(bytes(flipped))
    assert compiler._problem(path) == "is damaged (checksum mismatch)"


# ----------------------------------------------------------------- read-only and unusable dirs
def make_read_only(directory, monkeypatch):
    """chmod a-w; as root (who writes anyway) the write probe is told it failed."""
    if ROOT_USER:
        real = cache_dirs._write_problem
        monkeypatch.setattr(cache_dirs, "_write_problem", lambda d: "read-only file system"
                            if d == str(directory) else real(d))
    else:
        directory.chmod(stat.S_IRUSR | stat.S_IXUSR)


@needs_cc
def test_read_only_cache_is_used_and_new_entries_go_to_the_fallback(kc, monkeypatch):
    root, base = kc
    a, b = torch.randn(50), torch.randn(50)
    torch.testing.assert_close(run(compiler.build(ADD, "k"), a, b), a + b)   # pre-built
    kernels = root / "kernels"
    make_read_only(kernels, monkeypatch)
    try:
        fresh_process(monkeypatch)
        compiled = counting_compiles(monkeypatch)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            added = compiler.build(ADD, "k")         # from the read-only cache
            subbed = compiler.build(SUB, "k")        # new: built in the fallback
            compiler.build(MUL, "k")
        said = kernel_warnings(record)
        fallback = cache_dirs._fallback()
        assert len(said) == 1 and str(kernels) in said[0] and "read-only" in said[0] and \
            fallback in said[0], said
        assert fallback.startswith(str(base)) and compiled == ["k", "k"]
        torch.testing.assert_close(run(added, a, b), a + b)
        torch.testing.assert_close(run(subbed, a, b), a - b)
        assert len(list(kernels.glob("*.so"))) == 1
        assert len([p for p in os.listdir(fallback) if p.endswith(".so")]) == 2
        fresh_process(monkeypatch)                   # the next process: nothing to compile
        compiled.clear()
        with pytest.warns(KernelWarning, match="read-only"):
            torch.testing.assert_close(run(compiler.build(SUB, "k"), a, b), a - b)
        torch.testing.assert_close(run(compiler.build(ADD, "k"), a, b), a + b)
        assert compiled == []
    finally:
        kernels.chmod(0o755)


def a_file(root):
    root.parent.mkdir(exist_ok=True)
    root.write_text("not a directory")
    return root / "kernels"


def kernels_a_file(root):
    root.mkdir()
    (root / "kernels").write_text("not a directory")
    return root / "kernels"


def unreadable(root, monkeypatch):
    (root / "kernels").mkdir(parents=True)
    if ROOT_USER:
        real = os.access
        monkeypatch.setattr(cache_dirs.os, "access", lambda p, mode, *a, **k: False
                            if str(p) == str(root / "kernels") else real(p, mode, *a, **k))
    else:
        (root / "kernels").chmod(0)
    return root / "kernels"


@needs_cc
@pytest.mark.parametrize("spoil, reason", [
    (lambda root, mp: a_file(root), "not a directory"),
    (lambda root, mp: kernels_a_file(root), "it is not a directory"),
    (unreadable, "no permission to read it"),
])
def test_unusable_cache_dir_warns_once_and_falls_back(kc, monkeypatch, spoil, reason):
    root, base = kc
    kernels = spoil(root, monkeypatch)
    try:
        a, b = torch.randn(20), torch.randn(20)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            added = compiler.build(ADD, "k")
            subbed = compiler.build(SUB, "k")
        said = kernel_warnings(record)
        assert len(said) == 1 and f"{kernels} cannot be used ({reason}" in said[0], said
        assert cache_dirs._fallback() in said[0]
        torch.testing.assert_close(run(added, a, b), a + b)
        torch.testing.assert_close(run(subbed, a, b), a - b)
    finally:
        if kernels.is_dir():
            kernels.chmod(0o755)


def test_a_fallback_that_is_not_the_users_own_is_not_used(kc, monkeypatch):
    _, base = kc
    (base / f"tograph-{os.getuid()}").symlink_to(base)     # someone else's trap, say
    with pytest.warns(KernelWarning, match="not a directory of this user's own"):
        fallback = cache_dirs._fallback()
    assert os.path.basename(fallback).startswith("tograph-kernels-")


# ----------------------------------------------------------------- missing or broken compiler
def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def fused(x, y):
    return torch.tanh(x * 2.0 + y) * x - y


def fused_too(x):
    return torch.sigmoid(x) * x + 1.0


@pytest.mark.parametrize("make_cc, named", [
    (lambda tmp: "/nonexistent/cc", "'/nonexistent/cc' was not found"),
    (lambda tmp: script(tmp, "exits1", "echo broken >&2\nexit 1\n"), "--version' exited 1"),
    (lambda tmp: script(tmp, "cannot_compile", 'if [ "$1" = --version ]; then echo fake-cc 1.0;'
                        ' exit 0; fi\necho "fake-cc: cannot compile" >&2\nexit 1\n'),
     "cannot compile"),
])
@pytest.mark.parametrize("strict", [False, True])
def test_missing_or_broken_compiler_warns_once_and_results_equal_eager(
        kc, tmp_path, make_cc, named, strict):
    cc = make_cc(tmp_path)
    gen = torch.Generator().manual_seed(0)
    calls = [(torch.randn(64, generator=gen), torch.randn(64, generator=gen)) for _ in range(2)]
    with options.override(cc=cc), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        f, g = to_graph(fused, strict=strict), to_graph(fused_too, strict=strict)
        for x, y in calls:
            torch.testing.assert_close(f(x, y), fused(x, y), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(g(x), fused_too(x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(f(calls[0][0][:8], calls[0][1][:8]),
                                   fused(calls[0][0][:8], calls[0][1][:8]))
    said = kernel_warnings(record)
    assert len(said) == 1 and cc in said[0] and named in said[0], said
    assert not [w for w in record if issubclass(w.category, FallbackWarning)]


def test_compiler_turned_off_says_nothing(kc):
    with options.override(compiler=False), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        x = torch.randn(16)
        torch.testing.assert_close(to_graph(fused_too)(x), fused_too(x))
    assert kernel_warnings(record) == []


# ----------------------------------------------------------------- one builder at a time
def _child_build(barrier):
    """A forked process's first call of kernel ``ADD`` (no torch here: libgomp and fork do
    not mix); exit 0 when the kernel gives the right numbers."""
    barrier.wait(timeout=120)
    lib = compiler.build(ADD, "k")
    a, b, out = (ctypes.c_float * 4)(0, 1, 2, 3), (ctypes.c_float * 4)(*[0.5] * 4), \
        (ctypes.c_float * 4)()
    lib.k(a, b, out, ctypes.c_int64(4))
    if list(out) != [0.5, 1.5, 2.5, 3.5]:
        raise SystemExit(f"wrong result {list(out)}")


@needs_cc
def test_concurrent_processes_compile_a_new_kernel_once(kc, tmp_path):
    root, _ = kc
    count = tmp_path / "compiles"
    cc = script(tmp_path, "cc", f'case "$1" in --version) ;; *) echo x >> {count} ;; esac\n'
                                f'exec {GCC} "$@"\n')
    context = multiprocessing.get_context("fork")        # this process's options and memos
    barrier = context.Barrier(4)
    with options.override(cc=cc), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # fork of a threaded process
        compiler._probe_compiler(cc)            # the children inherit the probed compiler
        children = [context.Process(target=_child_build, args=(barrier,)) for _ in range(3)]
        for child in children:
            child.start()
        barrier.wait(timeout=120)
        lib = compiler.build(ADD, "k")          # this process builds alongside them
        for child in children:
            child.join(timeout=300)
    assert [child.exitcode for child in children] == [0, 0, 0]
    a, b = torch.arange(4.0), torch.full((4,), 0.5)
    torch.testing.assert_close(run(lib, a, b), a + b)
    assert count.read_text().count("x") == 1            # four processes, one compile
    left = os.listdir(root / "kernels")
    assert len([p for p in left if p.endswith(".so")]) == 1
    assert not [p for p in left if p.endswith((".lock", ".tmp"))], left


@needs_cc
def test_concurrent_threads_compile_a_new_kernel_once(kc, monkeypatch):
    compiled = counting_compiles(monkeypatch)
    start = threading.Barrier(4)
    libs = []

    def first_call():
        start.wait()
        libs.append(compiler.build(MUL, "k"))
    threads = [threading.Thread(target=first_call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(compiled) == 1 and len(libs) == 4 and all(lib is libs[0] for lib in libs)


@needs_cc
def test_a_hung_lock_holder_is_waited_for_then_built_past(kc, monkeypatch):
    path, _, _ = entry(SUB)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock_path = path[:-3] + ".lock"
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)                  # a process that never lets go
    monkeypatch.setattr(compiler, "LOCK_TIMEOUT_S", 0.3)
    try:
        with pytest.warns(KernelWarning, match=f"waited 0.3 s for the kernel lock {lock_path}"):
            lib = compiler.build(SUB, "k")
    finally:
        os.close(holder)
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(run(lib, a, b), a - b)


def test_lock_waiters_get_it_in_turn_and_leave_no_file(tmp_path):
    lock_path = str(tmp_path / "k.lock")
    order = []
    with build_lock.held(lock_path, timeout=30) as first:
        assert first and os.path.exists(lock_path)

        def waiter():
            with build_lock.held(lock_path, timeout=30) as got:
                order.append(("waiter", got))
        t = threading.Thread(target=waiter)
        t.start()
        t.join(0.2)
        assert t.is_alive()                         # waiting for the holder
        order.append(("holder", True))
    t.join()
    assert order == [("holder", True), ("waiter", True)]
    assert not os.path.exists(lock_path)
