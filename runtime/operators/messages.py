"""``sys.stdout.write``/``writelines``, ``warnings.warn`` and ``logger.info`` (and its
kin) in converted code.

Like ``print``, they speak to the user, and a graph must say it on every run that takes
their path, not once at trace time: while a graph is traced they become graph nodes
(``graph_ops.write_text``, ``graph_ops.warn_at``, ``graph_ops.log_at``). A log record
is made when the graph runs, if the logger is enabled then, with the call's file, line
and function and the run-time arguments. A warning keeps what eager decides by:
its category, message, and the file, line and module that ``stacklevel`` names (the
registry there shows a ``default`` warning once per location, the filters match the
module); a ``stacklevel`` pointing past the converted function names the caller found
when the graph runs. What a node could not repeat exactly (``source=``, text of another
type, a write's length when the text is made at run time, a ``stacklevel`` reaching past a
module's ``forward``, where eager counts torch's frames) raises ``GraphError``: the call
falls back to eager.
"""
from __future__ import annotations

import logging
import sys
import warnings

from .. import graph_ops
from ..errors import GraphError
from ..source_info import _SOURCE_MAPS, _is_library, format_location, generated_scope, \
    map_location, user_location
from ..symbolic import contains_symbolic, current_graph, dispatch_record
from .text import kind_template, layout, needs_layout

NOT_STAGED = object()
_GENERATED = "<tograph generated"
_STREAMS = ("stdout", "stderr")


def staged_message(f, args, kwargs):
    """The graph node for ``f(*args, **kwargs)`` when ``f`` writes to ``sys.stdout`` or
    ``sys.stderr`` or is ``warnings.warn``, while tracing; else ``NOT_STAGED``."""
    if current_graph() is None:
        return NOT_STAGED
    if f is warnings.warn:
        return _warn(*args, **kwargs)
    owner = getattr(f, "__self__", None)
    name = getattr(f, "__name__", None)
    if isinstance(owner, logging.Logger) and (name in _LEVELS or name == "log") and \
            getattr(type(owner), name, None) is getattr(logging.Logger, name, None):
        return _log(owner, name, args, kwargs)
    if owner is not None and name in ("write", "writelines"):
        stream = next((s for s in _STREAMS if getattr(sys, s, None) is owner), None)
        if stream is not None:
            return _write(stream, args, kwargs) if name == "write" else \
                _writelines(stream, args, kwargs)
    return NOT_STAGED


def _refuse(what: str) -> GraphError:
    return GraphError(f"{format_location(user_location())}: {what} cannot be part of a graph "
                      f"(it would act once while tracing, not on every run)")


def _write(stream: str, args, kwargs):
    if kwargs or len(args) != 1:
        raise _refuse(f"sys.{stream}.write with these arguments")
    (text,) = args
    if isinstance(text, str):
        dispatch_record(graph_ops.write_text, (stream, text), {})
        return len(text)
    raise _refuse(f"sys.{stream}.write of {type(text).__name__} text (its length is "
                  f"known only when the graph runs)")


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
           "fatal": logging.CRITICAL}   # (not the deprecated ``warn``: it also warns)


def _log(logger, name: str, args, kwargs):
    """``logger.info(msg, *args)`` and its kin: a record made when the graph runs (if the
    logger is enabled for the level then), with the file, line and function of the call
    and the run-time values of the arguments, handed to the logger's handlers."""
    if name == "log":
        if not args or not isinstance(args[0], int) or isinstance(args[0], bool):
            raise _refuse("logger.log with a level made by the graph")
        level, args = args[0], args[1:]
    else:
        level = _LEVELS[name]
    if not args:
        raise _refuse(f"logger.{name} without a message")
    extra = kwargs.pop("extra", None)
    if name == "exception" or kwargs.get("exc_info") or kwargs.get("stack_info") or \
            kwargs.get("stacklevel", 1) != 1 or set(kwargs) - {"exc_info", "stack_info",
                                                                "stacklevel"}:
        raise _refuse(f"logger.{name} with exc_info, stack_info, a stacklevel or these "
                      f"arguments")
    if logger is not (logging.root if logger.name == "root" else
                      logging.Logger.manager.loggerDict.get(logger.name)):
        raise _refuse("a logger that logging.getLogger does not return by its name")
    message, values = args[0], args[1:]
    if contains_symbolic(extra):
        raise _refuse(f"logger.{name} with extra= holding traced values")
    frames, _, functions = eager_frames(sys._getframe(3))
    frame = frames[0]
    loc = map_location(frame.f_code.co_filename, frame.f_lineno) or \
        (frame.f_code.co_filename, frame.f_lineno)
    kinds = tuple(kind_template(v) or None for v in values)   # (shapes rebuilt as such)
    head = (logger.name, level, loc[0], loc[1], functions[0].f_code.co_name, kinds, extra)
    if needs_layout((message,)):            # an f-string of tensors as the message
        texts, (parts,) = layout((message,))
        dispatch_record(graph_ops.log_at, head + (None, len(values)) + tuple(values) +
                        tuple(texts), {"layout": parts})
    elif contains_symbolic(message):
        raise _refuse(f"logger.{name} of a tensor as the message")
    else:
        dispatch_record(graph_ops.log_at, head + (message, len(values)) + tuple(values), {})
    return None


def _writelines(stream: str, args, kwargs):
    lines = list(args[0]) if len(args) == 1 and not kwargs and \
        isinstance(args[0], (list, tuple)) else None
    if lines is None or not all(isinstance(line, str) for line in lines):
        raise _refuse(f"sys.{stream}.writelines of anything but a list of str")
    dispatch_record(graph_ops.write_text, (stream, "".join(lines)), {})
    return None


def _warn(message, category=None, stacklevel=1, source=None, **rest):
    if source is not None or rest:
        raise _refuse("warnings.warn with source= or skip_file_prefixes=")
    if isinstance(message, Warning):
        category = type(message)
    elif category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise _refuse(f"warnings.warn with category {category!r}")
    if isinstance(stacklevel, bool) or not isinstance(stacklevel, int):
        raise _refuse("warnings.warn with a stacklevel made by the graph")
    filename, lineno, module, outer = _place(max(stacklevel, 1))
    head = (graph_ops.warning_name(category), filename, lineno, module, outer)
    if needs_layout((message,)):           # an f-string of tensors, ...
        values, (parts,) = layout((message,))
        dispatch_record(graph_ops.warn_at, head + (None,) + tuple(values), {"layout": parts})
    elif contains_symbolic(message):
        raise _refuse("warnings.warn of a tensor")
    else:
        dispatch_record(graph_ops.warn_at, head + (message,), {})
    return None


def _place(level: int):
    """(file, line, module, 0) of the frame ``level`` names, as eager's stack has it
    (a converted function's branch and loop-body functions are part of its frame), when
    that frame is in the converted call; else (None, 0, None, how many frames out of it
    the run-time caller is)."""
    frames, inside, functions = eager_frames(sys._getframe(2))
    if any(_module_forward(frame) for frame in functions[:min(level, inside + 1) - 1]):
        raise _refuse("warnings.warn with a stacklevel past a module's forward (eager counts "
                      "torch's call frames there)")
    if level <= inside:
        frame = frames[level - 1]
        loc = map_location(frame.f_code.co_filename, frame.f_lineno) or \
            (frame.f_code.co_filename, frame.f_lineno)
        return loc[0], loc[1], frame.f_globals.get("__name__", "<string>"), 0
    return None, 0, None, level - inside


def _module_forward(frame) -> bool:
    """A converted ``forward`` of an ``nn.Module`` (called eagerly through torch's
    ``Module.__call__`` frames, which the converted call does not have)."""
    import torch
    return frame.f_code.co_name == "forward" and \
        isinstance(frame.f_locals.get("self"), torch.nn.Module)


def eager_frames(frame):
    """The user frames from ``frame`` out, one per eager frame (the innermost frame of a
    converted function and the branch and loop-body functions nested in it stands for it:
    its line; a ``def``, lambda or list comprehension of the user's is a frame of its
    own), how many of them, innermost first, are converted code, and each one's outermost
    frame (the converted function itself, around its branch and loop-body functions)."""
    frames, functions, inside, outside = [], [], 0, False
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        if not (_is_library(name) or (name.startswith("<tograph") and name not in _SOURCE_MAPS)):
            generated = name.startswith(_GENERATED)
            last = functions[-1].f_code if functions else None
            if generated and last is not None and last.co_filename == name and \
                    generated_scope(last) and _nests(code, last):
                functions[-1] = frame   # the function around a branch body: one eager frame
            else:
                frames.append(frame)
                functions.append(frame)
                outside = outside or not generated
                inside += not outside
        frame = frame.f_back
    return frames, inside, functions


def _nests(outer, code) -> bool:
    from ..region_state import _contains
    return outer is not code and _contains(outer, code)
