"""runtime.kernels.compiler: build C source into a cached shared object and call it by ctypes.

Every test gets an empty cache directory and an empty in-process memo. Tests that compile
are skipped where no C compiler exists (or TOGRAPH_NO_COMPILER=1)."""
import ctypes
import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from runtime.kernels import cache_dirs, compiler
from runtime.kernels.compiler import KernelBuildError, build, compiler_available
from runtime.options import options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

needs_cc = pytest.mark.skipif(not compiler_available(), reason="no C compiler")

ADD = """
#include <stdint.h>
void add(const float *restrict a, const float *restrict b, float *restrict out, int64_t n) {
  #pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
"""

TANH_EXP = """
#include <stdint.h>
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float expf(float);
void tanh_exp(const float *restrict a, const float *restrict b, float *restrict out,
              int64_t n, int nthreads) {
  #pragma omp parallel for simd schedule(static) num_threads(nthreads) if(n >= 32768)
  for (int64_t i = 0; i < n; i++) out[i] = tanhf(a[i]) * expf(b[i]);
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache root for this test; yields the kernel directory inside it."""
    monkeypatch.setattr(compiler, "_loaded", {})
    with options.override(cache_dir=str(tmp_path)):
        yield tmp_path / "kernels"


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def _add(lib, a, b):
    out = torch.empty_like(a)
    lib.add(_ptr(a), _ptr(b), _ptr(out), ctypes.c_int64(a.numel()))
    return out


def _tanh_exp(lib, a, b, nthreads=2):
    out = torch.empty_like(a)
    lib.tanh_exp(_ptr(a), _ptr(b), _ptr(out), ctypes.c_int64(a.numel()), ctypes.c_int(nthreads))
    return out


def _entries(directory):
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".so")


@needs_cc
def test_build_and_call(cache):
    lib = build(ADD, "add")
    a, b = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(_add(lib, a, b), a + b, rtol=0, atol=0)
    assert len(_entries(cache)) == 1
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]
    (so,) = _entries(cache)
    assert (cache / so).with_suffix(".c").read_text() == ADD


@needs_cc
def test_same_source_twice_is_the_same_library(cache):
    assert build(ADD) is build(ADD)


@needs_cc
def test_cache_hit_does_not_compile(cache, monkeypatch):
    build(ADD, "add")
    monkeypatch.setattr(compiler, "_loaded", {})        # as a new process would start

    def no_compiling(*args):
        raise AssertionError("compiled although the kernel was cached")
    monkeypatch.setattr(compiler, "_compile", no_compiling)
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(_add(build(ADD, "add"), a, b), a + b)


@needs_cc
def test_key_covers_source_flags_compiler_and_cpu(monkeypatch):
    flags, identity = compiler._flags(), "gcc | gcc 12"
    key = compiler._key(ADD, flags, identity)
    assert compiler._key(ADD + "\n", flags, identity) != key
    assert compiler._key(ADD, flags + ("-O2",), identity) != key
    assert compiler._key(ADD, flags, "gcc | gcc 13") != key
    monkeypatch.setattr(compiler, "cpu_key", lambda: "another cpu")
    assert compiler._key(ADD, flags, identity) != key


def _garbage(data):
    return b"\x7fELF not really" * 100


def _zero_bytes(data):
    return b""


def _truncated(data):
    return data[: len(data) // 2]


def _garbage_with_forged_trailer(data):
    """Passes the trailer check: only dlopen can refuse it (OSError, not a crash)."""
    key = data[-compiler._TRAILER + 32:-len(compiler._MAGIC)].decode("ascii")
    body = b"garbage, not an ELF file" * 50
    return body + compiler._trailer(body, key)


@needs_cc
@pytest.mark.parametrize("damage", [_garbage, _zero_bytes, _truncated,
                                    _garbage_with_forged_trailer])
def test_corrupted_entry_is_rebuilt(cache, monkeypatch, damage):
    # The entry comes from an earlier process: this one never mapped it (damaging a mapped
    # library in place would fault its pages; the cache itself only ever renames files).
    argv, flags, key = compiler._locate(ADD, "add")
    path = cache / (key + ".so")
    assert cache_dirs.places(options.cache_dir).write == str(cache)
    compiler._compile(argv, flags, ADD, str(path), "add")
    path.write_bytes(damage(path.read_bytes()))
    compiled = []
    real_compile = compiler._compile
    monkeypatch.setattr(compiler, "_compile", lambda *a: compiled.append(a) or real_compile(*a))
    a, b = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(_add(build(ADD, "add"), a, b), a + b)
    assert len(compiled) == 1
    assert compiler._intact(str(path))


def test_compiler_disabled(cache):
    before = compiler_available()
    with options.override(compiler=False):
        assert not compiler_available()
        with pytest.raises(KernelBuildError, match="disabled"):
            build(ADD, "add")
    assert compiler_available() == before          # re-checked, not cached as False
    assert not cache.exists() or not _entries(cache)


def test_missing_compiler(cache):
    with options.override(compiler=True, cc="/nonexistent/tograph-cc"):
        assert not compiler_available()
        with pytest.raises(KernelBuildError, match="no C compiler"):
            build(ADD, "add")


@needs_cc
def test_syntax_error_names_the_compiler_message(cache):
    with pytest.raises(KernelBuildError) as info:
        build("void broken(float *x) { x[0] = ; }\n", "broken")
    message = str(info.value)
    assert "'broken'" in message and "error" in message and "expected expression" in message
    assert not _entries(cache)
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


@needs_cc
def test_unwritable_cache_dir_falls_back_to_a_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "_loaded", {})
    monkeypatch.setattr(cache_dirs, "FALLBACK_BASE", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with options.override(cache_dir=str(blocker / "cache")):
        with pytest.warns(RuntimeWarning, match="cannot be used"):
            lib = build(ADD, "add")
        assert cache_dirs.places(options.cache_dir).write == cache_dirs._fallback()
        assert cache_dirs._fallback().startswith(str(tmp_path / "tmp"))
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(_add(lib, a, b), a + b)


@needs_cc
def test_nan_inf_through_vectorized_tanh_exp(cache):
    special = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e-30,
               9.0, -9.0, 20.0, 88.7, 89.0, -104.0, -110.0, 1e10, -1e10]
    a = torch.tensor(special * len(special))
    b = torch.tensor([x for x in special for _ in special])
    a = torch.cat([a, torch.linspace(-12, 12, 100_003)])           # past the simd tail
    b = torch.cat([b, torch.linspace(-80, 80, 100_003)])
    lib = build(TANH_EXP, "tanh_exp")
    expected = torch.tanh(a) * torch.exp(b)
    for nthreads in (1, 2):
        torch.testing.assert_close(_tanh_exp(lib, a, b, nthreads), expected,
                                   rtol=1e-5, atol=1e-6, equal_nan=True)
    if platform.machine() == "x86_64":       # gcc called libmvec's vector tanhf/expf
        (so,) = _entries(cache)
        assert b"_ZGV" in (cache / so).read_bytes()


CHILD = r"""
import ctypes, json, sys
sys.path.insert(0, {root!r})
import torch
from runtime.kernels.compiler import build
print("ready", flush=True)
sys.stdin.readline()                              # start compiling together
own = {add!r}.replace("void add(", "void add_%d(" % {index})
shared, mine = build({add!r}, "add"), build(own, "own")
a, b = torch.arange(5.0), torch.full((5,), 0.5)
results = []
for fn in (shared.add, getattr(mine, "add_%d" % {index})):
    out = torch.empty(5)
    fn(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
       ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(5))
    results.append(out.tolist())
print(json.dumps(results))
"""


@needs_cc
def test_concurrent_processes_compile_the_same_and_different_kernels(cache):
    env = dict(os.environ, TOGRAPH_CACHE_DIR=str(cache.parent))
    env.pop("TOGRAPH_NO_COMPILER", None)
    children = [subprocess.Popen([sys.executable, "-c", CHILD.format(root=ROOT, add=ADD, index=i)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
                for i in range(4)]
    for child in children:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    expected = [[0.5, 1.5, 2.5, 3.5, 4.5]] * 2
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        assert json.loads(out) == expected
    assert len(_entries(cache)) == 5                    # one shared + four own
    assert all(compiler._intact(str(cache / so)) for so in _entries(cache))
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


MAPS_CHILD = r"""
import ctypes, json, sys
sys.path.insert(0, {root!r})
import torch
from runtime.kernels import compiler
lib = compiler.build({src!r}, "tanh_exp")
n = 1 << 16
a, b, out = torch.randn(n), torch.randn(n), torch.empty(n)
lib.tanh_exp(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
             ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(n), ctypes.c_int(2))
ok = torch.allclose(out, torch.tanh(a) * torch.exp(b), rtol=1e-5, atol=1e-6)
maps = sorted({{line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line}})
print(json.dumps({{"openmp": compiler.OPENMP, "ok": ok, "gomp": maps}}))
"""


@needs_cc
def test_a_parallel_kernel_shares_torchs_openmp_runtime(cache):
    env = dict(os.environ, TOGRAPH_CACHE_DIR=str(cache.parent))
    env.pop("TOGRAPH_NO_COMPILER", None)
    done = subprocess.run([sys.executable, "-c", MAPS_CHILD.format(root=ROOT, src=TANH_EXP)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"]
    if report["openmp"]:
        assert len(report["gomp"]) == 1, report["gomp"]     # never a second runtime
    else:
        assert report["gomp"] == [] or len(report["gomp"]) == 1


def test_gcc_only_flags_follow_the_compiler():
    gnu = compiler._flags("/usr/bin/cc | cc (Debian 12.2.0) 12.2.0 | gnu")
    clang = compiler._flags("/usr/bin/clang | Debian clang version 16.0.6")
    assert set(compiler.GCC_FLAGS) <= set(gnu)
    assert not set(compiler.GCC_FLAGS) & set(clang)
    assert set(compiler.FLAGS) <= set(clang)
    found = compiler._compiler("")
    if found is not None and "gcc" in found[1].split("|")[1]:
        assert found[1].endswith(" | gnu")
