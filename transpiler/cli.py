"""The ``tograph`` command line: look at what tograph makes of a function in a file.

    tograph code    FILE.py:FUNC                     # the generated Python
    tograph graph   FILE.py:FUNC --args 'torch.randn(4, 8), 3' [--optimized]
                    [--executor] [--kernels] [--memory] [--render out.svg]
    tograph compare FILE.py:FUNC --args '...' [--timing]  # eager vs converted, per output
    tograph explain FILE.py:FUNC --args '...'        # per line: cond/while/Python/fallback
    tograph report  FILE.py:FUNC --args '...' -o report.html   # all of it, one page
    tograph export  FILE.py:FUNC --args '...' --format pt2|onnx -o OUT [--static]

Exit codes: 0 success, 1 the function could not be converted or run (``compare``: the
results differ), 2 bad usage.
Errors print as one line; ``--verbose`` shows the traceback.
"""
from __future__ import annotations

import argparse
import sys
import traceback

from . import api


def _cmd_code(ns) -> int:
    print(api.to_code(api.load_target(ns.target)))
    return 0


def _cmd_graph(ns) -> int:
    fn = api.to_graph(api.load_target(ns.target), strict=True)
    graph = fn.graph(*api.parse_args_text(ns.args))
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
        print(api.memory_summary(optimized))
    return 0


def _cmd_compare(ns) -> int:
    from .debugging.compare import compare
    report = compare(api.load_target(ns.target), *api.parse_args_text(ns.args),
                     rtol=ns.rtol, atol=ns.atol, timing=ns.timing)
    print(report)
    ran = report.eager_error is None and report.graph_error is None
    return 0 if report.ok and ran else 1      # both raising alike: nothing was compared


def _cmd_explain(ns) -> int:
    print(api.to_graph(api.load_target(ns.target)).explain(*api.parse_args_text(ns.args)))
    return 0


def _cmd_report(ns) -> int:
    from .debugging.report import write_report
    path = write_report(api.load_target(ns.target), ns.output,
                        args=api.parse_args_text(ns.args))
    print(f"wrote {path}")
    return 0


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
    torch, export = api.torch, api.export_tools()
    dynamic_dims, to_onnx, to_torch_export = (export.dynamic_dims, export.to_onnx,
                                              export.to_torch_export)
    if not ns.verbose:
        torch._logging.set_logs(all=logging.ERROR)   # torch.export's notes on stderr
    fn = api.to_graph(api.load_target(ns.target), strict=True)
    args = api.parse_args_text(ns.args)
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
        cmd.add_argument("--args", default="", help="Python expression of the arguments, "
                                                    "with torch in scope, e.g. "
                                                    "'torch.randn(4, 8), 3'")
    cmd.set_defaults(run=run)
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
    except Exception as e:  # one clear line, like a compiler
        if ns.verbose:
            traceback.print_exc()
        print(f"tograph {ns.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
