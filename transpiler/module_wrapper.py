"""``to_graph(module)``: an ``nn.Module`` that runs ``module``'s forward as a graph.

    model = to_graph(resnet)              # a ToGraphModule wrapping resnet
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval(); model(x)                # the graph for eval mode (traced per mode)
    model.original_module is resnet       # also model._orig_mod, as torch.compile names it

The wrapper holds no state of its own: its ``_parameters``, ``_buffers`` and ``_modules``
are the original's own dicts, so ``parameters()``, ``named_parameters()``, ``buffers()``
and ``named_modules()`` give exactly the original's tensors under the original's names
(no ``_orig_mod.`` prefix, unlike torch.compile's wrapper; ``load_state_dict`` also takes
a checkpoint saved from torch.compile's wrapper, every key prefixed), and ``state_dict()``,
``load_state_dict()``, ``train()``/``eval()``, ``to()``/``cpu()``/``half()`` and
``apply()`` are the original's own methods run on it. Other attributes read and write
through to the original (``model.fc``, ``model.config``, ``model.fc = ...``); what the
original lacks comes from the ``GraphFunction`` behind the wrapper (``model.graph(x)``,
``model.explain(x)``, ``model.get_concrete(x)``; also ``model.graph_function``).
The original's other methods are the original's, bound to it: ``model.generate(...)``
calls the original eagerly, as with torch.compile's wrapper.

Hooks: hooks registered on the wrapper run eagerly around the graph, as ``nn.Module``
runs them around ``forward``. Hooks on the original (its own or torch's global module
hooks) are what calling the original runs: the graph is of ``forward`` only, so such a
call falls back to the original, eagerly, with one ``FallbackWarning`` saying so (strict
mode: ``ConversionError``). Pickling and ``copy.deepcopy`` copy the original and wrap the
copy again (hooks registered on the wrapper itself are not kept).
"""
from __future__ import annotations

import torch

from runtime import operators as tg
from runtime.symbolic import current_graph

from .api import GraphFunction

_OWN = frozenset({"_orig_mod", "_graph_function"})     # the wrapper's own attributes
_COMPILED_PREFIX = "_orig_mod."       # torch.compile's wrapper's state_dict keys


def _rewrap(module: torch.nn.Module, strict: bool, dynamic=None,
            cache_limit=None) -> "ToGraphModule":
    """Unpickling and deep copies: wrap the (copied) original again."""
    return ToGraphModule(module, strict, dynamic, cache_limit)


class ToGraphModule(torch.nn.Module):
    """``to_graph(module)``: ``module`` itself, its ``forward`` run as a graph."""

    def __init__(self, module: torch.nn.Module, strict: bool = False, dynamic=None,
                 cache_limit=None):
        # first: attribute reads and writes below go through to the original
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_graph_function", GraphFunction(
            module, strict, dynamic=dynamic, cache_limit=cache_limit))
        super().__init__()
        own = self.__dict__
        own["_parameters"], own["_buffers"] = module._parameters, module._buffers
        own["_modules"] = module._modules
        own["_non_persistent_buffers_set"] = module._non_persistent_buffers_set
        own["training"] = module.training

    # -- what the wrapper is
    @property
    def original_module(self) -> torch.nn.Module:
        return self._orig_mod

    @property
    def graph_function(self) -> GraphFunction:
        """The ``GraphFunction`` that runs the original's forward (traces, caches, guards)."""
        return self._graph_function

    # -- calling
    def __call__(self, *args, **kwargs):
        own = self.__dict__     # (read from it: a Module's attribute costs a __getattr__ hook)
        if not (own["_forward_hooks"] or own["_forward_pre_hooks"] or own["_backward_hooks"] or
                own["_backward_pre_hooks"]) and own.get("_compiled_call_impl") is None and \
                current_graph() is None:
            # (no hooks of its own to run; torch's global hooks, if any, run when the
            # GraphFunction falls back to calling the original: not twice)
            return own["_graph_function"]._called(args, kwargs)
        return super().__call__(*args, **kwargs)

    def forward(self, *args, **kwargs):
        if current_graph() is not None:     # inside another to_graph function's trace:
            return tg.call(self._orig_mod, *args, **kwargs)      # traced inline there
        return self._graph_function(*args, **kwargs)

    # -- the original's own methods, run on it
    def train(self, mode: bool = True) -> "ToGraphModule":
        self._orig_mod.train(mode)
        self.__dict__["training"] = self._orig_mod.training
        return self

    def _apply(self, fn, recurse=True):
        self._orig_mod._apply(fn, recurse)
        return self

    def apply(self, fn) -> "ToGraphModule":
        self._orig_mod.apply(fn)
        return self

    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, *args, **kwargs):
        # a checkpoint saved from torch.compile's wrapper names every key "_orig_mod.<name>"
        if state_dict and all(isinstance(k, str) and k.startswith(_COMPILED_PREFIX)
                              for k in state_dict):
            state_dict = type(state_dict)(
                (k[len(_COMPILED_PREFIX):], v) for k, v in state_dict.items())
        return self._orig_mod.load_state_dict(state_dict, *args, **kwargs)

    def _save_to_state_dict(self, *args, **kwargs):
        return self._orig_mod._save_to_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        return self._orig_mod._load_from_state_dict(*args, **kwargs)

    def extra_repr(self) -> str:
        return self._orig_mod.extra_repr()

    def _get_name(self) -> str:
        return f"to_graph({self._orig_mod._get_name()})"

    # -- attributes: the original's, then the GraphFunction's
    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)        # parameters, buffers, submodules
        except AttributeError:
            pass
        original = self.__dict__["_orig_mod"]
        try:
            return getattr(original, name)
        except AttributeError:
            if name.startswith("__") and name.endswith("__"):
                raise
        try:
            return getattr(self.__dict__["_graph_function"], name)
        except AttributeError:
            raise AttributeError(f"{type(original).__name__!r} object (wrapped by to_graph) "
                                 f"has no attribute {name!r}") from None

    def __setattr__(self, name: str, value) -> None:
        if name == "training":
            self._orig_mod.training = value
            self.__dict__["training"] = value
        elif name in _OWN or name in self.__dict__:     # nn.Module's own state (hooks...)
            super().__setattr__(name, value)
        elif name == "__class__":       # a class swap (FSDP2's fully_shard): the wrapper's
            object.__setattr__(self, name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN or (name in self.__dict__ and name not in self._orig_mod.__dict__):
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._orig_mod)))

    # -- containers (nn.Sequential, nn.ModuleList, ...)
    def __len__(self) -> int:
        return len(self._orig_mod)

    def __bool__(self) -> bool:
        return bool(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __getitem__(self, index):
        return self._orig_mod[index]

    # -- copies
    def __reduce_ex__(self, protocol):
        return _rewrap, (self._orig_mod, self._graph_function._strict,
                         self._graph_function._dynamic.option,
                         self._graph_function._cache_limit)

    def __deepcopy__(self, memo):
        import copy
        return ToGraphModule(copy.deepcopy(self._orig_mod, memo), self._graph_function._strict,
                             self._graph_function._dynamic.option,
                             self._graph_function._cache_limit)

