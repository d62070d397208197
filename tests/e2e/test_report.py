"""The HTML report: its syntax highlighter (pure Python), its page (built and read as text),
and the page loaded in headless Chromium (no console errors, every section shown, the
graph pictures drawn, code links landing on source lines). Screenshots and pages are
saved under ``artifacts/`` at the repository root.

The browser tests skip, saying why, only when Chromium is missing or will not start
(``bash .ci/setup`` installs Debian's ``chromium`` when it can).
"""
import html
import os
import re

import pytest
import torch

import chromium
from transpiler.debugging import highlight
from transpiler.debugging.report import NO_FALLBACK, SECTIONS, build_report, write_report

ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "artifacts")


# --------------------------------------------------------------------------- functions shown
def loop_and_branch(x, w):
    h = x @ w
    while h.abs().max() > 4:            # a tensor loop ...
        if h.sum() > 0:                 # ... with a tensor branch inside
            h = h / 2
        else:
            h = h * 0.5 + 0.1
    return torch.tanh(h * 2.0 + 1.0) * 3.0 - h     # fused into one group


CALLS = []


def counts_globally(x):
    for row in x:
        if row.sum() > 0:
            CALLS.append("positive")    # text appended in a tensor branch: falls back
    return x * 2


def raises_on_big(x):
    if x.shape[0] > 2:
        raise ValueError("too big: <x> & co")
    return x


def loop_args():
    """h = x @ w has sum > 0 and max 18: the loop halves it 3 times, all through `then`."""
    return torch.arange(12.0).reshape(3, 4) - 5, torch.eye(4) * 3


# --------------------------------------------------------------------------- highlighter
def strip(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", markup))


TRICKY = {
    "f-strings": 'x = f"{a!r:>{w}} {{literal}} <&>" + rf\'\\d{b}\'\n',
    "triple quotes": 'def f():\n    """doc <b>\n  &amp; "quoted" \'\'\'\n    """\n    return 1\n',
    "markup in strings": "s = '<script>alert(1)</script>' if a < b and c > d else '&lt;'\n",
    "decorators": "@torch.no_grad()\n@deco\nclass A:\n    @property\n    def p(self):\n"
                  "        return self @ self\n",
    "unicode": 'é = "ünïcödé ✓" + \'\\u00e9\'  # cömment <x>\nπ = 3.14\n',
    "indented method": "    def m(self, x=(1,\n            2)):\n        return len(x) \\\n"
                       "            + 1j\n",
    "tabs and crlf": "if x:\r\n\tpass\r\n\x0c\r\nz = 0x1f\r\n",
    "no final newline": "x = 1",
    "unterminated": 'x = """never closed\n',
    "empty": "",
}


@pytest.mark.parametrize("name", list(TRICKY))
def test_highlight_round_trips(name):
    source = TRICKY[name]
    assert strip(highlight.highlight(source)) == source
    lines = highlight.highlight_lines(source)
    assert [strip(line) for line in lines] == source.split("\n")


@pytest.mark.parametrize("name", list(TRICKY))
def test_highlight_lines_stand_alone(name):
    """Each line's spans open and close on that line (a multi-line string is split)."""
    for line in highlight.highlight_lines(TRICKY[name]):
        assert line.count("<span") == line.count("</span>"), line


def test_highlight_classes():
    out = highlight.highlight(TRICKY["decorators"] + "y = len('s') + 2  # note\n")
    assert '<span class="d">@torch.no_grad</span>' in out
    assert '<span class="d">@deco</span>' in out
    assert '<span class="k">class</span> <span class="f">A</span>' in out
    assert '<span class="b">len</span>' in out
    assert "<span class=\"s\">'s'</span>" in out
    assert '<span class="n">2</span>' in out
    assert '<span class="c"># note</span>' in out
    assert 'self <span class="o">@</span> self' in out      # matmul, not a decorator


def test_highlight_escapes_markup():
    out = highlight.highlight(TRICKY["markup in strings"])
    assert "<script" not in out and "&lt;script&gt;" in out
    assert "&amp;lt;" in out


# --------------------------------------------------------------------------- page as text
def section(page: str, ident: str) -> str:
    found = re.search(f'<section id="{ident}">(.*?)</section>', page, re.S)
    assert found, f"no #{ident} section"
    return found.group(1)


def text_of(page: str, ident: str) -> str:
    return " ".join(strip(section(page, ident)).split())


def test_page_is_self_contained_and_linked():
    page = build_report(loop_and_branch, loop_args())
    for ident in SECTIONS:
        assert text_of(page, ident)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    anchors = set(re.findall(r'id="src-L(\d+)"', section(page, "source")))
    links = re.findall(r'href="#src-L(\d+)"', section(page, "generated"))
    assert len(links) >= 8 and set(links) <= anchors
    first = loop_and_branch.__code__.co_firstlineno
    assert str(first + 3) in links              # `if h.sum() > 0:` has generated lines
    assert section(page, "graph").count("<svg") == 1
    assert section(page, "optimized").count("<svg") == 1
    assert "tanh" in text_of(page, "fused")
    assert "The results agree" in text_of(page, "outputs")
    assert NO_FALLBACK in text_of(page, "fallbacks")


def test_page_escapes_user_text_and_survives_a_raising_trace():
    page = build_report(raises_on_big, (torch.ones(3, 2),))
    for ident in SECTIONS:
        assert text_of(page, ident)
    assert "too big: &lt;x&gt; &amp; co" in page and "<x>" not in page
    assert "both raised" in text_of(page, "outputs")
    line = raises_on_big.__code__.co_firstlineno + 2      # the raise: the traceback's user line
    assert f'href="#src-L{line}"' in section(page, "fallbacks")


def test_write_report(tmp_path):
    path = write_report(loop_and_branch, tmp_path / "r.html", args=loop_args())
    with open(path, encoding="utf-8") as f:
        assert f.read().startswith("<!DOCTYPE html>")


# --------------------------------------------------------------------------- in Chromium
PAGE_FACTS = """(() => {
  const shown = el => { const r = el.getBoundingClientRect(), s = getComputedStyle(el);
                        return r.width > 0 && r.height > 0 && s.display !== 'none' &&
                               s.visibility !== 'hidden'; };
  const sections = {};
  for (const id of IDS) {
    const el = document.getElementById(id);
    sections[id] = el ? {shown: shown(el), text: el.innerText.trim()} : null;
  }
  const svgs = [...document.querySelectorAll('section svg')].map(s => {
    const r = s.getBoundingClientRect();
    return {section: s.closest('section').id, width: r.width, height: r.height}; });
  const links = [...document.querySelectorAll('#generated a[href^="#src-L"]')].map(a => {
    const target = document.getElementById(a.getAttribute('href').slice(1));
    return {href: a.getAttribute('href'), lands: !!target && !!target.closest('#source')}; });
  return {sections, svgs, links, title: document.title};
})()"""


def load_in_chromium(page_html: str, name: str) -> dict:
    """Save the page and its screenshot as artifacts; what the browser saw."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, f"{name}.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page_html)
    try:
        with chromium.open_page(path) as page:
            facts = page.evaluate(PAGE_FACTS.replace("IDS", repr(list(SECTIONS))))
            facts["errors"] = page.errors
            shot = page.screenshot(os.path.join(ARTIFACTS, f"{name}.png"))
    except chromium.ChromiumUnavailable as e:
        pytest.skip(f"headless Chromium unavailable: {e}")
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    return facts


def assert_every_section_shown(facts: dict):
    assert facts["errors"] == []
    for ident, got in facts["sections"].items():
        assert got is not None, f"#{ident} missing"
        assert got["shown"] and got["text"], f"#{ident} hidden or empty"


def test_report_in_chromium():
    facts = load_in_chromium(build_report(loop_and_branch, loop_args()), "report")
    assert_every_section_shown(facts)
    assert facts["title"] == "tograph report: loop_and_branch"
    drawn = {s["section"] for s in facts["svgs"] if s["width"] > 50 and s["height"] > 50}
    assert drawn == {"graph", "optimized"}
    assert len(facts["links"]) >= 8 and all(link["lands"] for link in facts["links"])
    outputs = facts["sections"]["outputs"]["text"]
    assert "The results agree" in outputs
    assert "3 iterations" in outputs and "then 3×" in outputs
    assert "fused" in facts["sections"]["fused"]["text"]
    assert NO_FALLBACK in facts["sections"]["fallbacks"]["text"]


def test_fallback_report_in_chromium():
    facts = load_in_chromium(build_report(counts_globally, (torch.ones(3, 2),)),
                             "report-fallback")
    assert_every_section_shown(facts)
    fallbacks = facts["sections"]["fallbacks"]["text"]
    line = counts_globally.__code__.co_firstlineno + 3      # the append
    assert "global 'CALLS'" in fallbacks
    assert f"test_report.py:{line}" in fallbacks


def test_report_without_graphviz_in_chromium(monkeypatch):
    from runtime.kernels import compiler
    compiler.compiler_available()   # the C compiler lookup is cached: do it with PATH intact
    with monkeypatch.context() as m:
        m.setenv("PATH", "/nonexistent")
        page_html = build_report(loop_and_branch, loop_args())
    facts = load_in_chromium(page_html, "report-no-graphviz")
    assert_every_section_shown(facts)
    assert facts["svgs"] == []
    for ident in ("graph", "optimized"):
        assert "picture unavailable" in facts["sections"][ident]["text"]
        assert "Graphviz" in facts["sections"][ident]["text"]
