"""The ``tograph`` command line: look at what tograph makes of a function in a file.

    tograph code  FILE.py:FUNC                       # the generated Python
    tograph graph FILE.py:FUNC --args 'torch.randn(4, 8), 3' [--optimized]
                  [--executor] [--kernels] [--memory]   # what runs: Python, C, buffers

Exit codes: 0 success, 1 the function could not be converted or run, 2 bad usage.
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
    if not (ns.optimized or ns.executor or ns.kernels or ns.memory):
        print(graph)
        return 0
    optimized = graph.optimize()
    if ns.optimized:
        print(optimized)
    if ns.executor:
        print(optimized.executor_source())
    if ns.kernels:
        print(optimized.kernel_source() or "// no fused kernels (or no C compiler)")
    if ns.memory:
        print(api.memory_summary(optimized))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tograph", description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    code = sub.add_parser("code", help="print the generated code of FILE.py:FUNC")
    code.add_argument("target", help="FILE.py:FUNC (FUNC may be Class.method)")
    code.set_defaults(run=_cmd_code)
    graph = sub.add_parser("graph", help="print the graph traced for given arguments")
    graph.add_argument("target", help="FILE.py:FUNC")
    graph.add_argument("--args", default="", help="Python expression of the arguments, "
                                                  "with torch in scope")
    graph.add_argument("--optimized", action="store_true", help="print the optimized graph")
    graph.add_argument("--executor", action="store_true",
                       help="print the generated Python that runs the optimized graph")
    graph.add_argument("--kernels", action="store_true",
                       help="print the generated C of its fused kernels")
    graph.add_argument("--memory", action="store_true",
                       help="print bytes allocated per call with and without planning")
    graph.set_defaults(run=_cmd_graph)
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
