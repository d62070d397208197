"""The parts of a per-model benchmark report that models.py and training.py share: the
summary's load lines, the Markdown's machine line and closing sections (results table,
fallbacks, mismatches, the kept reasons, the plot), the plot's finishing, and writing the
JSON / PNG / Markdown files."""
from __future__ import annotations

import json
import os
import sys
from typing import Callable, List, Optional

import report

REASONS_BEGIN, REASONS_END = "<!-- reasons: kept when regenerated -->", "<!-- /reasons -->"


def kept_reasons(md_path: str) -> str:
    """The hand-written reasons between the markers of an earlier ``md_path``, or ''."""
    try:
        with open(md_path) as f:
            text = f.read()
    except OSError:
        return ""
    if REASONS_BEGIN in text and REASONS_END in text:
        return text.split(REASONS_BEGIN, 1)[1].split(REASONS_END, 1)[0].strip("\n")
    return ""


def load_lines(results: dict) -> List[str]:
    """The machine's load, and other processes' share of the CPUs per model row."""
    lines = list(report._load_lines(results))
    busy = [r["load"].get("others_fraction") for r in results["models"]]
    busy = [b for b in busy if b is not None]
    if busy:
        lines.append(f"other processes' share of the CPUs per model row: {min(busy):.0%} to "
                     f"{max(busy):.0%}")
    return lines


def machine_line(m: dict) -> str:
    return (f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, transformers "
            f"{m.get('transformers')}, torchvision {m.get('torchvision')}, Python "
            f"{m['python']}, {m['date']}.")


def closing_sections(results: dict, header: List[str], align: str, rows: List[List[str]],
                     titles: tuple, png_path: Optional[str], md_path: str,
                     alt: str) -> List[str]:
    """The Markdown from the results table on: ``titles`` = (fell back, differs from
    eager, why)."""
    fell_back, differs, why = titles
    out = ["", "## Results", "", "| " + " | ".join(header) + " |", align]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    if results["fallbacks"]:
        out += ["", f"## {fell_back}", ""]
        out += [f"- {f}" for f in results["fallbacks"]]
    if results["mismatches"]:
        out += ["", f"## {differs}", ""]
        out += [f"- **{x}**" for x in results["mismatches"]]
    out += ["", f"## {why}", "", REASONS_BEGIN,
            kept_reasons(md_path) or "(not written yet)", REASONS_END, "", "## Plot", ""]
    out += report.plot_lines(png_path, md_path, alt)
    return out


def finish_plot(plt, fig, ax, path: str, labels: List[str], fontsize: int, ylabel: str,
                title: str) -> bool:
    """The baseline at 1, the labels, legend and grid; save to ``path`` and close."""
    ax.axhline(1.0, color="gray", linewidth=1, linestyle="--")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=fontsize)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(results: dict, out: str, md_path: str, stem: str, text_table: Callable,
          summary_lines: Callable, plot: Callable, markdown: Callable) -> None:
    """Print the table and summary; write ``stem``.json, ``stem``.png and ``md_path``."""
    print()
    print(text_table(results))
    print()
    print("\n".join(summary_lines(results)))
    json_path = os.path.join(out, f"{stem}.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    png_path = os.path.join(out, f"{stem}.png")
    plotted = plot(results, png_path)
    text = markdown(results, png_path if plotted else None, md_path)   # reads the reasons
    with open(md_path, "w") as f:
        f.write(text)
    print(f"\nwrote {json_path}, {md_path}" + (f", {png_path}" if plotted else
                                               " (no plot: pip install -e .[bench])"))


def main(args, bench: Callable, stem: str, md_name: str, here: str, write: Callable,
         fallback_prefix: str) -> int:
    """Run ``bench(args, partial path).run()`` (or read ``args.report``), write the results
    (``write(results, out, md_path)``), report fallbacks; the exit status."""
    out = args.out or os.path.join(here, "results")
    os.makedirs(out, exist_ok=True)
    md_path = os.path.join(out if args.out else here, md_name)
    partial = os.path.join(out, f"{stem}.partial.json")
    if args.report:
        with open(args.report) as f:
            results = json.load(f)
    else:
        results = bench(args, partial).run()
    write(results, out, md_path)
    if os.path.exists(partial) and not args.report:
        os.remove(partial)
    for line in results["fallbacks"]:
        print(f"!!! {fallback_prefix}{line}", file=sys.stderr)
    return report.report_mismatches(results["mismatches"])


def described_machine() -> dict:
    """machine.describe() with the versions of transformers and torchvision (if loaded)."""
    from machine import describe
    m = describe()
    m.update({lib: getattr(sys.modules.get(lib), "__version__", None)
              for lib in ("transformers", "torchvision")})
    return m


def save_partial(path: Optional[str], results: Callable[[], dict]) -> None:
    """Write ``results()`` (the rows so far) to ``path``, where there is one."""
    if path:
        with open(path, "w") as f:
            json.dump(results(), f, indent=1)
