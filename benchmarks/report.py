"""The report: targets met or not, the text table, RESULTS.md and the speedup plot."""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional

from workloads import FIRST_CALL_COLD_TARGET, FIRST_CALL_WARM_TARGET

EAGER, TOGRAPH, COMPILE, SCRIPT, SESSION = "eager", "tograph", "torch.compile", "jit.script", \
    "Session.run"
TIMED = [TOGRAPH, COMPILE, SCRIPT]


# --------------------------------------------------------------------------- analysis
def _tograph(row) -> Optional[dict]:
    return row["results"].get(TOGRAPH) or row["results"].get(SESSION)


def annotate(results: dict) -> None:
    """Add ``mismatches``, ``problems`` (to_graph fallbacks and errors), ``footnotes`` and
    ``targets`` (met or not per row) to ``results``."""
    mismatches, problems, footnotes = [], [], []
    for row in results["workloads"]:
        for name, r in row["results"].items():
            check = r.get("check")
            if check and check != "ok":
                mismatches.append(f"{row['name']} / {name}: {check}")
            if r.get("status") in ("n/a", "error", "fallback") and r.get("note"):
                if r["note"] not in footnotes:
                    footnotes.append(r["note"])
                r["footnote"] = footnotes.index(r["note"]) + 1
            if name == TOGRAPH and r.get("status") in ("error", "fallback"):
                problems.append(f"{row['name']}: {r['note']}")
    targets = []
    for row in results["workloads"]:
        r = row["results"].get(TOGRAPH)
        if r is None:
            continue
        ratio = r.get("ratio") if r.get("status") == "ok" else None
        entry = {"workload": row["name"], "target": row["target_text"],
                 "ratio": ratio, "met": None if ratio is None or row["target"] is None
                 else ratio >= row["target"],
                 "first_call_cold_s": _overhead(r.get("first_call_s"), r),
                 "first_call_warm_s": _overhead(r.get("first_call_warm_s"), r)}
        if entry["first_call_cold_s"] is not None:
            entry["cold_met"] = entry["first_call_cold_s"] <= FIRST_CALL_COLD_TARGET
            entry["warm_met"] = entry["first_call_warm_s"] <= FIRST_CALL_WARM_TARGET
        targets.append(entry)
    results.update(mismatches=mismatches, problems=problems, footnotes=footnotes,
                   targets=targets)


# --------------------------------------------------------------------------- formatting
def fmt_us(v: Optional[float]) -> str:
    if v is None:
        return "-"
    if v < 10:
        return f"{v:.2f}"
    if v < 100:
        return f"{v:.1f}"
    return f"{v:,.0f}"


def fmt_s(v: Optional[float], unit: str = "ms") -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v * 1e3:,.1f}"
    return f"{v:.2f}"


def fmt_ratio(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _cell(r: Optional[dict], markdown: bool) -> List[str]:
    """[time, ratio] for one contender of one row."""
    if r is None:
        return ["", ""]
    status = r.get("status")
    note = f" [{r['footnote']}]" if r.get("footnote") else ""
    if status == "skipped":
        return ["skipped", ""]
    if status in ("n/a", "error") or r.get("median_us") is None:
        word = "ERROR" if status == "error" else "n/a"
        return [(f"**{word}**" if markdown and word == "ERROR" else word) + note, ""]
    time = fmt_us(r["median_us"])
    if status == "fallback":
        time += " FALLBACK" + note
    if r.get("check", "ok") != "ok":
        time += " MISMATCH"
    return [time, fmt_ratio(r.get("ratio"))]


HEADER = ["workload", "size", "eager µs", "tograph µs", "tograph x", "compile µs",
          "compile x", "script µs", "script x", "tograph 1st cold ms", "tograph 1st warm ms",
          "compile 1st s", "script 1st ms", "check"]


def rows_of(results: dict, markdown: bool = False) -> List[List[str]]:
    out = []
    for row in results["workloads"]:
        res = row["results"]
        tg = _tograph(row)
        bad = [name for name, r in res.items() if r.get("check", "ok") != "ok"]
        check = "ok" if not bad else "MISMATCH: " + ", ".join(bad)
        if markdown and bad:
            check = f"**{check}**"
        out.append([row["name"], row["size"], fmt_us(res[EAGER].get("median_us")),
                    *_cell(tg, markdown), *_cell(res.get(COMPILE), markdown),
                    *_cell(res.get(SCRIPT), markdown),
                    fmt_s((tg or {}).get("first_call_s")),
                    fmt_s((tg or {}).get("first_call_warm_s")),
                    fmt_s((res.get(COMPILE) or {}).get("first_call_s"), "s"),
                    fmt_s((res.get(SCRIPT) or {}).get("first_call_s")), check])
    return out


def text_table(results: dict) -> str:
    rows = [HEADER] + rows_of(results)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for i, note in enumerate(results["footnotes"], 1):
        lines.append(f"[{i}] {note}")
    return "\n".join(lines)


def markdown_table(results: dict) -> str:
    lines = ["| " + " | ".join(HEADER) + " |",
             "| " + " | ".join("---" if i < 2 else "---:" for i in range(len(HEADER))) + " |"]
    for r in rows_of(results, markdown=True):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    notes = [f"[{i}] {n.replace('|', '/')}" for i, n in enumerate(results["footnotes"], 1)]
    if notes:
        lines.append("")
        lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines)


def _load_lines(results: dict) -> List[str]:
    load = results["load"]
    lines = [f"load average (1, 5, 15 min): before {load['loadavg_before']}, "
             f"after {load['loadavg_after']} on {load['cores']} cores; run took "
             f"{load['wall_s']} s"]
    if "busy_fraction" in load:
        lines.append(f"CPU busy over the run (/proc/stat, all cores): "
                     f"{load['busy_fraction']:.0%}, of which this process "
                     f"{load['own_fraction']:.0%} and other processes "
                     f"{load['others_fraction']:.0%}")
        if load["others_fraction"] > 0.2:
            lines.append(f"WARNING: other processes kept {load['others_fraction']:.0%} of the "
                         f"CPUs busy during the run: torch's multi-threaded ops stall when the "
                         f"machine is oversubscribed, so these numbers are skewed; rerun on a "
                         f"quiet machine")
    return lines


def _bandwidth_lines(results: dict) -> List[str]:
    bw = results["bandwidth"]
    lines = [f"memory bandwidth ({bw['elements'] / 2**20:g}M f32): torch.add(x, y, out=z) "
             f"{bw['add_gbs']:.1f} GB/s (12 B/element), copy {bw['copy_gbs']:.1f} GB/s "
             f"(8 B/element)"]
    for row in results["workloads"]:
        if "bandwidth_bound_us" not in row:
            continue
        parts = [f"{name} {r['bandwidth_fraction']:.0%}" for name, r in row["results"].items()
                 if r.get("bandwidth_fraction")]
        lines.append(f"{row['name']}: bandwidth lower bound {fmt_us(row['bandwidth_bound_us'])} µs"
                     f" (12 B/element at the torch.add bandwidth); fraction of it achieved: "
                     + ", ".join(parts))
    return lines


def _one_off_lines(results: dict) -> List[str]:
    o = results["one_off"]
    lines = []
    if "tograph_first_call_s" in o:
        lines.append(f"one-off per process: the first to_graph call in the process "
                     f"({o['tograph_first_workload']}) took {o['tograph_first_call_s']:.2f} s "
                     f"(torch loading meta kernels and more); measured apart, and the "
                     f"workload's cold first call measured again after it")
    firsts = [f"{row['name']} {fmt_s(row['results'][TOGRAPH]['first_call_in_process_s'])} ms"
              for row in results["workloads"]
              if row["results"].get(TOGRAPH, {}).get("first_call_in_process_s") is not None]
    if firsts:
        lines.append("the first to_graph call of each workload in the process, before its cold "
                     "one (it pays one-off costs for ops the process meets for the first "
                     "time): " + ", ".join(firsts))
    if "compile_first_call_s" in o:
        lines.append(f"one-off per process: the first torch.compile call in the process "
                     f"({o['compile_first_workload']}) took {o['compile_first_call_s']:.2f} s; "
                     f"measured apart, likewise")
    return lines


def _measured(t: dict) -> str:
    """The measured speedup; for a 'time per call at most N x eager' target, the time ratio."""
    if t["ratio"] and t["target"].startswith("<="):
        return f"{1 / t['ratio']:.1f}x eager's time"
    return fmt_ratio(t["ratio"])


def _overhead(first_s, r: dict):
    """A first call's convert + trace + optimize + compile time: the call minus one
    steady-state call (the run itself, which on 16M elements is not small)."""
    if first_s is None:
        return None
    return max(0.0, first_s - (r.get("median_us") or 0.0) / 1e6)


def _sizes_lines(results: dict) -> List[str]:
    """Per workload run at several sizes or spellings: the range of each contender's
    speedup over them, and the sizes at its ends (a speedup that holds at one shape only
    shows here)."""
    families: Dict[str, list] = {}
    for row in results["workloads"]:
        families.setdefault(row.get("family") or row["name"], []).append(row)
    lines = []
    for family, rows in families.items():
        if len(rows) < 2:
            continue
        parts = []
        for name in TIMED:
            got = [(r["results"][name]["ratio"], r["name"]) for r in rows
                   if (r["results"].get(name) or {}).get("ratio")
                   and r["results"][name].get("status") == "ok"]
            if not got:
                continue
            (lo, lo_name), (hi, hi_name) = min(got), max(got)
            parts.append(f"{name} {fmt_ratio(lo)} ({lo_name}) to {fmt_ratio(hi)} ({hi_name})"
                         + (f" over {len(got)}" if len(got) < len(rows) else ""))
        if parts:
            lines.append(f"{family}, {len(rows)} sizes/spellings: " + "; ".join(parts))
    return lines


def _target_lines(results: dict) -> List[str]:
    lines = []
    for t in results["targets"]:
        met = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
        first = ""
        if t.get("first_call_cold_s") is not None:
            first = (f"; first-call overhead cold {fmt_s(t['first_call_cold_s'])} ms "
                     f"({'met' if t['cold_met'] else 'NOT met'}), warm "
                     f"{fmt_s(t['first_call_warm_s'])} ms "
                     f"({'met' if t['warm_met'] else 'NOT met'})")
        lines.append(f"{t['workload']}: {t['target']} -> {_measured(t)} {met}{first}")
    return lines


def text_summary(results: dict) -> str:
    lines = _load_lines(results) + _bandwidth_lines(results) + _one_off_lines(results)
    sizes = _sizes_lines(results)
    if sizes:
        lines += ["", "speedup over eager across sizes:"] + ["  " + line for line in sizes]
    lines.append("")
    lines.append(f"targets for tograph (speedup over eager; first call <= "
                 f"{FIRST_CALL_COLD_TARGET * 1e3:.0f} ms cold, <= "
                 f"{FIRST_CALL_WARM_TARGET * 1e3:.0f} ms warm):")
    lines.extend("  " + line for line in _target_lines(results))
    if results["problems"]:
        lines.append("")
        lines.append("!!! to_graph did not convert:")
        lines.extend(f"!!!   {p}" for p in results["problems"])
    if results["mismatches"]:
        lines.append("")
        lines.append("!!! RESULTS DIFFER FROM EAGER:")
        lines.extend(f"!!!   {m}" for m in results["mismatches"])
    return "\n".join(lines)


# --------------------------------------------------------------------------- markdown
def markdown(results: dict, png_path: Optional[str], md_path: str) -> str:
    m = results["machine"]
    s = results["settings"]
    out = ["# Benchmark results", "",
           "Generated by `.venv/bin/python benchmarks/run.py` "
           + ("(`--quick`: a smoke test, not a measurement) " if s["quick"] else "")
           + "- do not edit by hand. Times are the median per call over "
           f"{s['rounds']} rounds interleaved between the contenders; `x` is the speedup over "
           "eager (eager time / contender time, > 1 is faster). Every contender's result is "
           "checked against eager (`torch.testing.assert_close`, rtol 1e-5).", "",
           "## Machine", "",
           "| | |", "| --- | --- |",
           f"| CPU | {m['cpu']} |", f"| cores | {m['cores']} |",
           f"| threads | {m['threads']} (`torch.set_num_threads({m['threads']})`) |",
           f"| torch | {m['torch']} |", f"| Python | {m['python']} |",
           f"| platform | {m['platform']} |", f"| date | {m['date']} |", "",
           "How loaded the machine was while the suite ran (torch's 2-thread OpenMP stalls "
           "when the machine is oversubscribed, so read the numbers with this in mind):", ""]
    out += [f"- {line}" for line in _load_lines(results)]
    out += ["", "## Results", "", markdown_table(results), "",
            "First calls: to_graph = convert + trace + optimize + compile + run of a fresh "
            "`to_graph(fn)` (conversion cache cleared), with a cold kernel cache (a new "
            "`options.cache_dir`) and a warm one (the same cache dir, a second fresh "
            "`to_graph`); torch.compile = `torch._dynamo.reset()`, `torch.compile(fn)` and its "
            "first call, with inductor's FX graph and autograd caches off (the process's very "
            "first compile, measured apart, ran with them on, in this run's own fresh cache "
            "dir); jit.script = "
            "`torch.jit.script(fn)` and its first call. Every first call starts after a "
            "`gc.collect()`, so garbage that earlier measurements left is not collected "
            "(and billed) inside it.", ""]
    out += [f"- {line}" for line in _one_off_lines(results)]
    sizes = _sizes_lines(results)
    if sizes:
        out += ["", "## Across sizes", "",
                "The same program at several sizes or spellings: the range of each "
                "contender's speedup over eager (lowest and highest, with the row at each "
                "end), so a speedup that holds at one tuned shape only shows.", ""]
        out += [f"- {line}" for line in sizes]
    out += ["", "## Memory bandwidth", ""]
    out += [f"- {line}" for line in _bandwidth_lines(results)]
    out += ["", "## Targets (issue 4, for tograph)", "",
            "First-call columns here are the overhead: the first call minus one steady-state "
            "call (the run itself).", "",
            "| workload | speedup target | measured | | first-call overhead cold (<= 300 ms) "
            "| | warm (<= 50 ms) | |", "| --- | --- | ---: | --- | ---: | --- | ---: | --- |"]
    for t in results["targets"]:
        met = {True: "met", False: "**not met**", None: "n/a"}[t["met"]]
        cold = warm = ("-", "")
        if t.get("first_call_cold_s") is not None:
            cold = (fmt_s(t["first_call_cold_s"]) + " ms",
                    "met" if t["cold_met"] else "**not met**")
            warm = (fmt_s(t["first_call_warm_s"]) + " ms",
                    "met" if t["warm_met"] else "**not met**")
        out.append(f"| {t['workload']} | {t['target']} | {_measured(t)} | {met} | "
                   f"{cold[0]} | {cold[1]} | {warm[0]} | {warm[1]} |")
    if results["problems"]:
        out += ["", "## to_graph did not convert", ""]
        out += [f"- **{p}**" for p in results["problems"]]
    if results["mismatches"]:
        out += ["", "## RESULTS DIFFER FROM EAGER", ""]
        out += [f"- **{p}**" for p in results["mismatches"]]
    out += ["", "## Plot", ""] + plot_lines(png_path, md_path, "speedup over eager")
    return "\n".join(out) + "\n"


def plot_lines(png_path: Optional[str], md_path: str, alt: str) -> List[str]:
    """The Markdown lines showing the plot (a path relative to the Markdown file)."""
    if not png_path:
        return ["No plot: matplotlib is not installed (`pip install -e .[bench]`)."]
    rel = os.path.relpath(png_path, os.path.dirname(os.path.abspath(md_path)))
    return [f"![{alt}]({rel})"]


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def report_mismatches(mismatches) -> int:
    """Print results that differ from eager to stderr; the exit status (1 if any)."""
    if not mismatches:
        return 0
    print("\n!!! RESULTS DIFFER FROM EAGER:", file=sys.stderr)
    for line in mismatches:
        print(f"!!!   {line}", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------- plot
def plot(results: dict, path: str) -> bool:
    """Bar chart of speedup over eager per workload per contender; False without
    matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    rows = [r for r in results["workloads"] if TOGRAPH in r["results"]]
    names = [r["name"] for r in rows]
    contenders = [c for c in TIMED if any(r["results"].get(c, {}).get("ratio") for r in rows)]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(rows) + 3), 5.5))
    width = 0.8 / max(1, len(contenders))
    colors = {TOGRAPH: "tab:blue", COMPILE: "tab:orange", SCRIPT: "tab:green"}
    for k, c in enumerate(contenders):
        xs, ys = [], []
        for i, r in enumerate(rows):
            ratio = r["results"].get(c, {}).get("ratio")
            if ratio:
                xs.append(i + (k - (len(contenders) - 1) / 2) * width)
                ys.append(ratio)
        ax.bar(xs, ys, width, label=c, color=colors[c])
    tx = [i for i, r in enumerate(rows) if r["target"]]
    if tx:
        off = -(len(contenders) - 1) / 2 * width if TOGRAPH in contenders else 0
        ax.scatter([i + off for i in tx], [rows[i]["target"] for i in tx], marker="_", s=300,
                   color="black", zorder=3, label="tograph target")
    for i, r in enumerate(rows):
        status = r["results"][TOGRAPH].get("status")
        if status in ("fallback", "error"):
            ax.annotate(status.upper(), (i, 1), ha="center", va="bottom", color="red",
                        fontsize=8)
    ax.axhline(1.0, color="gray", linewidth=1, linestyle="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_xlabel("workload")
    ax.set_ylabel("speedup over eager (eager time / time, log scale)")
    m = results["machine"]
    ax.set_title(f"Speedup over eager PyTorch — {m['cpu']}, {m['threads']} threads, "
                 f"torch {m['torch']}" + (" (--quick)" if results["settings"]["quick"] else ""),
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    """Regenerate RESULTS.md and the plot from a saved JSON:
    ``python benchmarks/report.py [benchmarks/results/latest.json]``."""
    import json
    import sys
    argv = sys.argv[1:] if argv is None else argv
    here = os.path.dirname(os.path.abspath(__file__))
    json_path = argv[0] if argv else os.path.join(here, "results", "latest.json")
    with open(json_path) as f:
        results = json.load(f)
    annotate(results)
    out = os.path.dirname(os.path.abspath(json_path))
    png_path = os.path.join(out, "speedups.png")
    plotted = plot(results, png_path)
    default = out == os.path.join(here, "results")
    md_path = os.path.join(here if default else out, "RESULTS.md")
    with open(md_path, "w") as f:
        f.write(markdown(results, png_path if plotted else None, md_path))
    print(text_table(results))
    print()
    print(text_summary(results))
    print(f"\nwrote {md_path}" + (f" and {png_path}" if plotted else
                                  " (no plot: pip install -e .[bench])"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
