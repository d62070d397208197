"""``tg.match_case(subject, pattern, captures, env)``: one ``case`` of a ``match``.

The transpiler writes a ``match`` as an ``if``/``else`` chain; each case's test is this
call, given the pattern's source, the names it binds and the values of the names it reads.
Python itself matches: a function holding a one-case ``match`` of that pattern (compiled
once per pattern) returns ``(True, captures)`` or ``(False, None)``. A Python subject is
matched exactly as eagerly; a pattern that needs a traced value's data (``case 1`` of a
tensor: ``==`` then ``bool``) raises GraphError naming the ``match`` line (a fallback).
"""
from __future__ import annotations

from ..errors import GraphError, TracingError
from ..source_info import format_location, user_location

_cases: dict = {}       # (pattern, captures, read names) -> the matching function


def _case_function(pattern: str, captures: tuple, reads: tuple):
    key = (pattern, captures, reads)
    fn = _cases.get(key)
    if fn is None:
        bound = "".join(f"{c}, " for c in captures)
        source = (f"def _case(_tograph_subject, {''.join(f'{r}, ' for r in reads)}):\n"
                  f"    match _tograph_subject:\n"
                  f"        case {pattern}:\n"
                  f"            return True, ({bound})\n"
                  f"    return False, None\n")
        namespace: dict = {}
        exec(compile(source, f"<tograph case {pattern}>", "exec"), namespace)  # noqa: S102
        fn = _cases[key] = namespace["_case"]
    return fn


def match_case(subject, pattern: str, captures: tuple, env: dict):
    fn = _case_function(pattern, tuple(captures), tuple(env))
    try:
        return fn(subject, *env.values())
    except TracingError as e:
        location = user_location()
        error = GraphError(f"{format_location(location)}: match on a traced value: case "
                           f"{pattern} needs its data, known only when the graph runs; use "
                           f"if/elif on the tensor")
        error.location = location
        raise error from e
