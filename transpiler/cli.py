"""The ``tograph`` command line: look at what tograph makes of a function in a file.

    tograph code    FILE.py:FUNC                     # the generated Python
    tograph graph   FILE.py:FUNC --args 'torch.randn(4, 8), 3' [--optimized]
                    [--executor] [--kernels] [--memory] [--render out.svg]
    tograph compare FILE.py:FUNC --args '...' [--timing]  # eager vs converted, per output
    tograph explain FILE.py:FUNC --args '...'        # per line: cond/while/Python/fallback
    tograph report  FILE.py:FUNC --args '...' -o report.html   # all of it, one page
    tograph export  FILE.py:FUNC --args '...' --format pt2|onnx -o OUT [--static]

Exit codes: 0 success; 1 the function could not be converted or run, or (``compare``,
``explain``, ``report``) it fell back to eager, or (``compare``, ``report``) the results
differ; 2 bad usage (including a function that needs arguments and no ``--args``).
Errors print as one line; ``--verbose`` shows the traceback. ``tograph --help`` and
``tograph CMD --help`` start without importing torch: each command imports what it uses.
"""
from __future__ import annotations

import argparse
import sys
import traceback

from .cli_targets import ARGS_EXAMPLE, load_target, parse_args_text, required_parameters


class UsageError(Exception):
    """Bad usage found after the command line parsed (exit status 2, with the usage)."""


def _target_and_args(ns):
    """The command's object and arguments; a function that needs arguments and got no
    ``--args`` is bad usage, with how to pass them."""
    target = load_target(ns.target)
    if ns.args is None:
        missing = required_parameters(target)
        if missing:
            raise UsageError(f"{ns.target} needs arguments ({', '.join(missing)}): pass "
                             f"them as a Python expression with torch in scope, e.g. "
                             f"--args '{ARGS_EXAMPLE}'")
    return target, parse_args_text(ns.args)


def _cmd_code(ns) -> int:
    from .api import to_code
    print(to_code(load_target(ns.target)))
    return 0


def _cmd_graph(ns) -> int:
    from .api import to_graph
    target, args = _target_and_args(ns)
    graph = to_graph(target, strict=True).graph(*args)
    shown = graph.optimize() if ns.optimized else graph
    if ns.render:
        print(f"wrote {shown.render(ns.render)}")
    if not (ns.optimized or ns.executor or ns.kernels or ns.memory):
        if not ns.render:
            print(graph)
        return 0
    optimized = shown if ns.optimized else graph.optimize()
    if ns.optimized and not ns.render:
        print(optimized)
    if ns.executor:
        print(optimized.executor_source())
    if ns.kernels:
        print(optimized.kernel_source() or "// no fused kernels (or no C compiler)")
    if ns.memory:
        from runtime.passes.plan_memory import format_report
        print(format_report(optimized.memory_report))
    return 0


def _cmd_compare(ns) -> int:
    from .debugging.compare import compare
    target, args = _target_and_args(ns)
    report = compare(target, *args, rtol=ns.rtol, atol=ns.atol, timing=ns.timing)
    print(report)
    ran = report.eager_error is None and report.graph_error is None
    # both raising alike: nothing was compared; a fallback: it did not run as a graph
    return 0 if report.ok and ran and not report.fell_back else 1


def _cmd_explain(ns) -> int:
    from .api import to_graph
    target, args = _target_and_args(ns)
    explanation = to_graph(target).explain(*args)
    print(explanation)
    return 1 if explanation.fell_back else 0


def _cmd_report(ns) -> int:
    from .debugging.report import report_on
    target, args = _target_and_args(ns)
    path, trouble = report_on(target, ns.output, args=args)
    print(f"wrote {path}")
    if trouble:
        print(f"tograph report: {trouble}", file=sys.stderr)
    return 1 if trouble else 0


def _parse_dynamic(text):
    """``'x:0,1;y:1'`` -> {"x": (0, 1), "y": (1,)}; ``None`` -> "auto"."""
    if text is None:
        return "auto"
    out = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, dims = part.partition(":")
        if not name or not dims:
            raise ValueError(f"--dynamic expects NAME:DIM[,DIM][;NAME:DIM...], got {part!r}")
        out[name.strip()] = tuple(int(d) for d in dims.split(","))
    return out


def _cmd_export(ns) -> int:
    import logging

    import torch

    from runtime.export import dynamic_dims, to_onnx, to_torch_export
    from .api import to_graph
    if not ns.verbose:
        torch._logging.set_logs(all=logging.ERROR)   # torch.export's notes on stderr
    target, args = _target_and_args(ns)
    fn = to_graph(target, strict=True)
    dynamic = None if ns.static else _parse_dynamic(ns.dynamic)
    if ns.format == "onnx":
        print(f"wrote {to_onnx(fn, ns.output, args, dynamic=dynamic)}")
        return 0
    ep = to_torch_export(fn, args, dynamic=dynamic)
    torch.export.save(ep, ns.output)
    print(f"wrote {ns.output} (dynamic dimensions per tensor input: {dynamic_dims(ep)})")
    return 0


def _target_command(sub, name: str, help_: str, run, args: bool = True):
    cmd = sub.add_parser(name, help=help_, description=help_)
    cmd.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                     help="show tracebacks on errors")
    cmd.add_argument("target", help="FILE.py:FUNC (FUNC may be Class.method; a Module "
                                    "class is instantiated with no arguments)")
    if args:
        cmd.add_argument("--args", help="Python expression of the arguments, with torch "
                                         f"in scope, e.g. '{ARGS_EXAMPLE}'")
    cmd.set_defaults(run=run, parser=cmd)
    return cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tograph", description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    _target_command(sub, "code", "print the generated code of FILE.py:FUNC", _cmd_code,
                    args=False)
    graph = _target_command(sub, "graph", "print the graph traced for given arguments",
                            _cmd_graph)
    graph.add_argument("--optimized", action="store_true", help="print the optimized graph")
    graph.add_argument("--render", metavar="OUT", help="draw the graph (the optimized one "
                       "with --optimized) with Graphviz to OUT: .svg, .png, .pdf or .dot")
    graph.add_argument("--executor", action="store_true",
                       help="print the generated Python that runs the optimized graph")
    graph.add_argument("--kernels", action="store_true",
                       help="print the generated C of its fused kernels")
    graph.add_argument("--memory", action="store_true",
                       help="print bytes allocated per call with and without planning")
    compare = _target_command(sub, "compare", "run FILE.py:FUNC eagerly and converted "
                              "on the same inputs and compare every output", _cmd_compare)
    compare.add_argument("--rtol", type=float, help="relative tolerance (default per dtype)")
    compare.add_argument("--atol", type=float, help="absolute tolerance (default per dtype)")
    compare.add_argument("--timing", action="store_true", help="also time both per call")
    _target_command(sub, "explain", "per source line: what became cond/while, what was "
                    "Python, fallbacks, retraces", _cmd_explain)
    report = _target_command(sub, "report", "write a self-contained HTML report: source, "
                             "generated code, graphs, fused groups, outputs, timings",
                             _cmd_report)
    report.add_argument("-o", "--output", default="report.html", help="the HTML file to write")
    export = _target_command(sub, "export", "export FILE.py:FUNC for deployment without "
                             "Python source: torch.export (.pt2) or ONNX", _cmd_export)
    export.add_argument("--format", choices=("pt2", "onnx"), default="pt2",
                        help="pt2: torch.export.save of an ExportedProgram (torch.cond/"
                             "while_loop); onnx: an ONNX model (If/Loop)")
    export.add_argument("-o", "--output", required=True, help="the file to write")
    dims = export.add_mutually_exclusive_group()
    dims.add_argument("--dynamic", metavar="SPEC", help="dynamic dimensions, e.g. 'x:0;y:0,1' "
                      "(default: dimension 0 of every tensor argument)")
    dims.add_argument("--static", action="store_true", help="export static shapes only")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.run(ns)
    except UsageError as e:
        ns.parser.error(str(e))                     # the usage and the message; exit 2
    except Exception as e:  # one clear line, like a compiler
        if ns.verbose:
            traceback.print_exc()
        print(f"tograph {ns.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
