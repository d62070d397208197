"""Logging (issue 14, item 5): ``logging.getLogger("tograph")``, one child per topic, the
``TOGRAPH_LOGS`` switch and ``runtime.logs.set_logs``.

Each topic is exercised by a program that makes it log (records caught with caplog, the
topics' own switch off so records reach the root); cached calls log nothing; without a
setting nothing is printed; parsing (+, -, all, bad names); one handler however often
``set_logs`` runs; the environment form in one subprocess.
"""
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from runtime import logs
from runtime.kernels import compiler
from runtime.options import options
from transpiler import ConversionError, FallbackWarning, to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALE = 2.0
INFO = logging.INFO


@pytest.fixture(autouse=True)
def _no_setting():
    """No TOGRAPH_LOGS setting around each test (and no kernel compiles unless asked)."""
    logs.set_logs("")
    with options.override(compiler=False):
        yield
    logs.set_logs("")


def _records(caplog, topic, level=logging.DEBUG):
    return [r.getMessage() for r in caplog.records
            if r.name == f"tograph.{topic}" and r.levelno >= level]


def _branchy(x, n):
    if x.sum() > 0:
        y = torch.relu(x) * SCALE + 1
    else:
        y = torch.tanh(x) - 1
    for _ in range(n):
        y = y * 2
    return y


# ------------------------------------------------------------------ each topic
def test_graph_code_and_fusion_topics(caplog):
    f = to_graph(_branchy)
    x = torch.randn(4, 3)
    with caplog.at_level(logging.DEBUG, logger="tograph"):
        torch.testing.assert_close(f(x, 2), _branchy(x, 2))
    graphs = _records(caplog, "graph")
    assert any(m.startswith("traced _branchy: ") and "after optimization" in m for m in graphs)
    printed = [m for m in graphs if m.startswith("graph of _branchy:")]
    assert printed and "cond" in printed[0] and "f32[4,3]" in printed[0]
    code = _records(caplog, "code")
    assert any(m.startswith("converted _branchy (") and "test_logging.py:" in m for m in code)
    assert any("tg.if_stmt" in m for m in code)                 # the generated source
    assert any(m.startswith("lowered _branchy (<tograph-exec-") for m in code)
    fusion = _records(caplog, "fusion")
    assert any(m.startswith("pass fuse_elementwise on _branchy: ") and "+" in m
               for m in fusion), fusion
    assert any(" = fused of " in m and "relu" in m for m in fusion)   # a group, at DEBUG
    assert any("fused group(s) run as torch ops: no C compiler" in m for m in
               _records(caplog, "kernels"))                     # (the compiler is off here)
    with caplog.at_level(logging.INFO, logger="tograph"):       # INFO: no printed graph
        caplog.clear()
        f(torch.randn(6, 3), 1)
        assert not [m for m in _records(caplog, "graph") if m.startswith("graph of")]
        assert _records(caplog, "graph")
        assert not _records(caplog, "code")                     # converted once, not per trace


def test_retrace_and_cache_topics_say_why(caplog):
    f = to_graph(_branchy)
    with caplog.at_level(logging.INFO, logger="tograph"):
        f(torch.randn(4, 3), 2)
        f(torch.randn(4, 3), 2)                                 # cached: nothing new
        f(torch.randn(5, 3), 2)
        f(torch.randn(5, 3), 3)
    retrace = _records(caplog, "retrace")
    assert len(retrace) == 3 and retrace[0] == "tracing _branchy (trace #1): first call"
    assert retrace[1] in ("tracing _branchy (trace #2): new input signature: x: shape (4, 3) "
                          "-> (5, 3)",
                          "tracing _branchy (trace #2): a new size: tracing dimensions x dims "
                          "[0] as dynamic")               # (automatic dynamic shapes)
    assert retrace[2].startswith("tracing _branchy (trace #3): new input signature: ")
    assert retrace[2].endswith("n: 2 -> 3")
    cache = _records(caplog, "cache")
    assert len(cache) == 3 and all("cache miss (new signature)" in m for m in cache)
    assert cache[-1].endswith("2 signature(s) cached")


def test_cache_topic_evictions(caplog):
    f = to_graph(lambda x, n: x * n, cache_limit=2)
    with caplog.at_level(logging.INFO, logger="tograph"), warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # (the cache limit's own warning)
        for n in (0, 1, 2, 3, 0):
            torch.testing.assert_close(f(torch.ones(2), n), torch.full((2,), float(n)))
    evicted = [m for m in _records(caplog, "cache") if "evicted" in m]
    assert evicted == [
        f"<lambda>: evicted 1 least recently used signature(s) for the limit of 2 ({k} "
        f"evictions so far)" for k in (1, 2, 3)]
    assert _records(caplog, "retrace")[-1] == (
        "tracing <lambda> (trace #5): traced before, and its graph was dropped for the "
        "cache limit")


def test_guard_failure_names_the_check(caplog):
    global SCALE
    f = to_graph(_branchy)
    x = torch.rand(3) + 0.1
    try:
        f(x, 1)
        with caplog.at_level(logging.INFO, logger="tograph"):
            SCALE = 5.0
            torch.testing.assert_close(f(x, 1), _branchy(x, 1))      # traced again
    finally:
        SCALE = 2.0
    assert _records(caplog, "guards") == [
        "guard failed for _branchy: global 'SCALE' is bound to another object; tracing again"]
    assert _records(caplog, "retrace") == [
        "tracing _branchy (trace #2): a guard failed: global 'SCALE' is bound to another "
        "object"]
    assert "guard failed" in _records(caplog, "cache")[0]


def test_guard_failure_on_closure_and_argument_attributes(caplog):
    class Cfg:
        pass
    cfg = Cfg()
    cfg.k = 2.0
    offset = 1.0

    def g(x, c):
        return x * c.k + offset
    f = to_graph(g)
    x = torch.randn(3)
    with caplog.at_level(logging.DEBUG, logger="tograph"):
        f(x, cfg)
        built = _records(caplog, "guards")
        assert built and built[0].startswith("guard of g checks: ") and "offset" in built[0]
        caplog.clear()
        offset = 3.0
        torch.testing.assert_close(f(x, cfg), g(x, cfg))
        assert any("closure variable 'offset'" in m for m in _records(caplog, "guards", INFO))
        caplog.clear()
        cfg.k = 4.0
        torch.testing.assert_close(f(x, cfg), g(x, cfg))
        failed = _records(caplog, "guards", INFO)
        assert failed and "argument #1 (Cfg)" in failed[0], failed


def _to_list(x):
    if x.sum() > 0:
        return x.tolist()
    return []


def test_fallback_topic_reason_and_line(caplog):
    line = _to_list.__code__.co_firstlineno + 2
    with caplog.at_level(logging.INFO, logger="tograph"), \
            pytest.warns(FallbackWarning):
        assert to_graph(_to_list)(torch.ones(2)) == [1.0, 1.0]
    fell = _records(caplog, "fallback")
    assert len(fell) == 1
    assert f"test_logging.py:{line}: _to_list could not be converted: .tolist()" in fell[0]
    assert fell[0].endswith("running it eagerly")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tograph"), pytest.raises(ConversionError):
        to_graph(_to_list, strict=True)(torch.ones(2))
    fell = _records(caplog, "fallback")
    assert len(fell) == 1 and fell[0].endswith("strict mode raises ConversionError")


def test_kernels_topic_miss_then_disk_hit(caplog, tmp_path):
    with options.override(compiler=True):
        if not compiler.compiler_available():
            pytest.skip("no C compiler")
        source = f"int tg_log_probe_{os.getpid()}(void) {{ return 7; }}\n"
        first, second = tmp_path / "a", tmp_path / "b"
        with caplog.at_level(logging.DEBUG, logger="tograph"):
            with options.override(cache_dir=str(first)):
                compiler.build(source, name="probe")
                compiler.build(source, name="probe")            # in memory
            (second / "kernels").mkdir(parents=True)
            for entry in (first / "kernels").iterdir():             # a pre-built cache
                (second / "kernels" / entry.name).write_bytes(entry.read_bytes())
            with options.override(cache_dir=str(second)):
                compiler.build(source, name="probe")
    kernels = _records(caplog, "kernels")
    assert any(m.startswith("kernel probe: ") and str(first) in m and "-o" in m
               for m in kernels)                               # the command, at DEBUG
    info = _records(caplog, "kernels", INFO)
    assert len(info) == 2
    assert info[0].startswith("kernel probe: cache miss, compiled in ") and str(first) in info[0]
    assert info[1].startswith("kernel probe: cache hit on disk") and str(second) in info[1]
    assert any("loaded already" in m for m in kernels)


def test_dynamic_topic(caplog):
    f = to_graph(lambda x: x * 2, dynamic=True)
    with caplog.at_level(logging.INFO, logger="tograph"):
        for n in (2, 3):
            torch.testing.assert_close(f(torch.ones(n, 3)), torch.full((n, 3), 2.0))
    dynamic = _records(caplog, "dynamic")
    assert dynamic and dynamic[0].startswith("tracing <lambda> with dynamic dimensions "
                                             "x dims [0"), dynamic
    assert _records(caplog, "retrace")[0].startswith(
        "tracing <lambda> (trace #1): first call: tracing dimensions x dims [0")


def test_topic_loggers():
    assert logs.dynamic is logging.getLogger("tograph.dynamic")
    assert [logs.get(t).name for t in logs.TOPICS] == [f"tograph.{t}" for t in logs.TOPICS]
    with pytest.raises(ValueError, match="topics: graph, code"):
        logs.get("graphs")


# ------------------------------------------------------------------ cost when quiet
def test_cached_calls_log_nothing(caplog):
    f = to_graph(_branchy)
    x, items = torch.randn(4, 3), {"a": torch.randn(2)}
    h = to_graph(lambda d, k=1: d["a"] * k)
    with caplog.at_level(logging.DEBUG, logger="tograph"):
        f(x, 2)
        f(x, n=2)
        h(items, k=2)
        assert caplog.records
        caplog.clear()
        for _ in range(20):
            f(x, 2)                     # the fast path
            f(x, n=2)                   # the signature path
            h(items, k=2)
    assert caplog.records == []


def test_nothing_printed_without_a_setting(capsys):
    root = logging.getLogger("tograph")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)
    assert not any(isinstance(h, logs._Handler) for h in root.handlers)
    assert root.propagate
    assert all(logs.get(t).level == logging.NOTSET for t in logs.TOPICS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to_graph(_branchy)(torch.randn(2, 2), 1)
        to_graph(_to_list)(torch.ones(2))
    assert "tograph" not in capsys.readouterr().err


# ------------------------------------------------------------------ the switch
def test_parse_plus_minus_all():
    D, I, E = logging.DEBUG, logging.INFO, logging.ERROR
    assert logs.parse("+graph,code,-fusion") == {"graph": D, "code": I, "fusion": E}
    assert logs.parse(" retrace , +guards ") == {"retrace": I, "guards": D}
    every = logs.parse("all,-fusion,+graph")
    assert set(every) == set(logs.TOPICS)
    assert every["fusion"] == E and every["graph"] == D and every["cache"] == I
    assert set(logs.parse("+all").values()) == {D}
    assert set(logs.parse("-all").values()) == {E}
    assert logs.parse("") == {}


def test_bad_topic_warns_once_listing_topics():
    with pytest.warns(UserWarning) as caught:
        assert logs.parse("+graph,grpah,-cachez") == {"graph": logging.DEBUG}
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "'grpah'" in text and "'-cachez'" in text
    assert "valid topics: graph, code, guards, retrace, fallback, fusion, kernels, cache, " \
           "dynamic" in text


def test_set_logs_twice_one_handler_and_undo(capsys):
    root = logging.getLogger("tograph")
    logs.set_logs("retrace")
    logs.set_logs("retrace,+graph")
    assert sum(isinstance(h, logs._Handler) for h in root.handlers) == 1
    assert not root.propagate                       # a root handler would print it twice
    assert logs.graph.level == logging.DEBUG and logs.retrace.level == logging.INFO
    assert logs.code.level == logging.WARNING       # not named: warnings only
    to_graph(_branchy)(torch.randn(2, 2), 1)
    err = capsys.readouterr().err
    assert err.count("[tograph.retrace] INFO tracing _branchy (trace #1): first call") == 1
    assert "[tograph.graph] DEBUG graph of _branchy:" in err
    assert "[tograph.code]" not in err and "[tograph.cache]" not in err
    logs.set_logs("")
    assert not any(isinstance(h, logs._Handler) for h in root.handlers) and root.propagate
    to_graph(_branchy)(torch.randn(2, 2), 1)
    assert "tograph" not in capsys.readouterr().err


def test_environment_switch_at_import(tmp_path):
    program = tmp_path / "program.py"          # a file: a function needs source to convert
    program.write_text(textwrap.dedent("""
        import logging, warnings
        logging.basicConfig(level=logging.DEBUG)      # the user's own root handler too
        warnings.simplefilter("always")
        import torch
        from transpiler import to_graph
        from runtime.options import options
        options.compiler = False

        @to_graph
        def f(x):
            if x.sum() > 0:
                return x * 2
            return x - 1
        f(torch.ones(3))
        f(torch.ones(4))
        print("levels", logging.getLogger("tograph.fusion").level,
              logging.getLogger("tograph.code").level)
    """))
    env = dict(os.environ, TOGRAPH_LOGS="+graph,retrace,-fusion,bogus",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "TOGRAPH_LOGS: unknown topic(s) 'bogus' ignored; valid topics: graph" in err
    assert err.count("tracing f (trace #1): first call") == 1     # once: not via root too
    assert "[tograph.retrace] INFO tracing f (trace #2): a new size: tracing dimensions x " \
           "dims [0] as dynamic" in err
    assert "[tograph.graph] DEBUG graph of f:" in err
    assert "tograph.fusion" not in err and "tograph.code" not in err
    assert f"levels {logging.ERROR} {logging.WARNING}" in done.stdout
