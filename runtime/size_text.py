"""The text of a run-time size (``f"got {x.shape}"``) in code that is not converted.

A library module called from torch's own code (an ``nn.Sequential`` of torchvision's ViT
blocks) runs as it is while a graph is traced, so an f-string there formats ``x.shape``
natively. With a dynamic dimension that shape is a ``RunTimeSize`` whose text is known
only when the graph runs. The one use that is safe to trace is the message of
``torch._assert(condition, f"...")`` whose condition is true while tracing: the message is
never read. So the native text of a RunTimeSize is allowed only when the bytecode proves
the f-string it is part of goes straight into a call (nothing else sees it), and the trace
is kept only if that call was ``torch._assert`` with a true condition (``check_consumed``
at the end of the trace): any other use makes the trace fail (GraphError: the sizes are
then traced as they are, which is correct).
"""
from __future__ import annotations

import ast
import dis
import itertools
import linecache
import sys
import weakref
from typing import Optional

import torch

from .errors import GraphError

_CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD")
_BEFORE_CALL = ("KW_NAMES", "PRECALL", "CACHE")
_FORMATS = ("FORMAT_VALUE", "FORMAT_SIMPLE")
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_COUNTER = itertools.count()
# per graph being traced: [token, frame, offsets of the call, consumed]
_PENDING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _call_after_format(code, offset: int) -> Optional[range]:
    """The offsets (with its caches) of the call that receives, as it is, the f-string whose field is
    formatted at ``offset``; None unless the bytecode proves nothing else sees it."""
    instructions = list(dis.get_instructions(code))
    at = next((i for i, ins in enumerate(instructions) if ins.offset == offset), None)
    if at is None or instructions[at].opname not in _FORMATS:
        return None
    above = 0                       # stack items pushed above the formatted field
    built = False
    for ins in instructions[at + 1:]:
        if ins.opcode in _JUMPS or ins.opname.startswith(("RETURN", "STORE", "DELETE")):
            return None
        if above == 0 and ins.opname in _BEFORE_CALL + _CALLS:
            built = True            # (an f-string of one field has no BUILD_STRING)
        if built:
            if ins.opname in _CALLS:    # (while it runs, f_lasti may sit in its caches)
                ahead = [i.offset for i in instructions if i.offset > ins.offset]
                return range(ins.offset, ahead[0] if ahead else ins.offset + 1)
            if ins.opname not in _BEFORE_CALL:
                return None
            continue
        if ins.opname == "BUILD_STRING":
            if ins.arg <= above:    # another string, built above ours
                above -= ins.arg - 1
                continue
            built = True
            continue
        try:
            effect = dis.stack_effect(ins.opcode, ins.arg)
        except ValueError:
            effect = dis.stack_effect(ins.opcode)
        if ins.opname in _FORMATS:
            effect = 0 if not (ins.arg or 0) & 4 else -1
        above += effect
        if above < 0:               # the field itself consumed by something else
            return None
    return None


def _calls_torch_assert(frame, offset: int) -> bool:
    """Whether the call at ``offset`` in ``frame`` is written ``torch._assert(...)`` with
    ``torch`` the torch module there: the f-string then reaches nothing else (a print, a
    log) before the end-of-trace check, whatever happens."""
    ins = next((i for i in dis.get_instructions(frame.f_code) if i.offset == offset), None)
    where = getattr(ins, "positions", None)
    if where is None or None in (where.lineno, where.end_lineno, where.col_offset,
                                 where.end_col_offset):
        return False
    lines = linecache.getlines(frame.f_code.co_filename, frame.f_globals)
    if where.end_lineno > len(lines):
        return False
    text = "".join(lines[where.lineno - 1:where.end_lineno])
    end = len(text) - len(lines[where.end_lineno - 1]) + where.end_col_offset
    try:
        node = ast.parse(text[where.col_offset:end].strip(), mode="eval").body
    except SyntaxError:
        return False
    func = getattr(node, "func", None)
    if not (isinstance(node, ast.Call) and isinstance(func, ast.Attribute) and
            func.attr == "_assert" and isinstance(func.value, ast.Name)):
        return False
    name = func.value.id
    owner = frame.f_locals[name] if name in frame.f_locals else frame.f_globals.get(name)
    return owner is torch


def native_text(size, graph) -> Optional[str]:
    """The text of ``size`` (a RunTimeSize) formatted by an f-string in code that is not
    converted, when that f-string goes straight into a call; None otherwise."""
    frame = sys._getframe(2)        # this <- RunTimeSize.__repr__ <- the formatting code
    call = _call_after_format(frame.f_code, frame.f_lasti)
    if call is None or not _calls_torch_assert(frame, call.start):
        return None
    while graph.parent is not None:     # (inside a traced branch or loop body)
        graph = graph.parent
    token = f"\x00tograph-size-{next(_COUNTER)}\x00"
    _PENDING.setdefault(graph, []).append([token, frame, call, False])
    return f"torch.Size({token})"


def assert_call(args, kwargs) -> bool:
    """Whether ``torch._assert(*args, **kwargs)`` is one whose message holds the native
    text of a run-time size (``native_text``); it is then taken here: a true condition
    ignores it, anything else raises GraphError."""
    message = args[1] if len(args) > 1 else kwargs.get("message")
    if not isinstance(message, str) or "\x00tograph-size-" not in message:
        return False
    condition = args[0] if args else kwargs.get("condition")
    caller = sys._getframe(1)
    while caller is not None and caller.f_code is not torch._assert.__code__:
        caller = caller.f_back
    caller = caller.f_back if caller is not None else None
    entries = [e for pending in _PENDING.values() for e in pending if e[0] in message]
    if condition is True and caller is not None and entries and \
            all(e[1] is caller and caller.f_lasti in e[2] for e in entries):
        for e in entries:
            e[3] = True
        return True
    raise GraphError("torch._assert with a message formatting a size known only when the "
                     "graph runs, whose condition is not True while tracing")


def check_consumed(graph) -> None:
    """At the end of a trace: GraphError if the native text of a run-time size went
    anywhere but a ``torch._assert`` message (``native_text``)."""
    if graph.parent is not None:        # the whole trace's graph answers
        return
    pending = _PENDING.pop(graph, None)
    if pending and not all(e[3] for e in pending):
        raise GraphError("the text of a size known only when the graph runs (an f-string "
                         "of x.shape in code that is not converted) was used as a str")
