"""What a ``tograph`` command works on: ``FILE.py:FUNC`` and the ``--args`` text, made into
the object and the arguments (torch is imported here on first use, not by ``--help``).

    load_target("model.py:Net")              # the class instantiated with no arguments
    parse_args_text("torch.randn(4, 8), 3")  # (tensor, 3)
    required_parameters(fn)                  # ["x", "n"]: what a call with no arguments lacks
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from typing import List, Optional

ARGS_EXAMPLE = "torch.randn(4, 8), 3"


def load_target(spec: str):
    """``FILE.py:FUNC`` (``FUNC`` may be dotted, e.g. ``Model.forward``) -> the object: a
    ``to_graph`` function or module gives the function or module it wraps; an
    ``nn.Module`` class is instantiated with no arguments."""
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise ValueError(f"expected FILE.py:FUNC, got {spec!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    module_name = "_tograph_cli_" + os.path.splitext(os.path.basename(path))[0]
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    loader_spec.loader.exec_module(module)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{path} has no {name!r}")
        obj = getattr(obj, part)
    import torch
    from .api import GraphFunction
    from .module_wrapper import ToGraphModule
    if isinstance(obj, GraphFunction):
        obj = obj.python_function
    if isinstance(obj, ToGraphModule):
        obj = obj.original_module
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    return obj


def parse_args_text(text: Optional[str]) -> tuple:
    """``'torch.randn(4, 8), 3'`` -> a tuple of arguments (evaluated with torch in scope);
    ``None`` or blank -> ``()``."""
    if text is None or not text.strip():
        return ()
    import torch
    value = eval(f"({text},)", {"torch": torch, "__builtins__": __builtins__})  # noqa: S307
    return tuple(value)


def required_parameters(target) -> List[str]:
    """The parameters a call of ``target`` with no arguments would lack (none when its
    signature cannot be read: the call itself then says what is wrong)."""
    from .api import _python_function
    try:
        signature = inspect.signature(_python_function(target))
    except (TypeError, ValueError):
        return []
    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in signature.parameters.values()
            if p.kind in named and p.default is inspect.Parameter.empty]
