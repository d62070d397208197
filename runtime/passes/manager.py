"""The pass manager: which passes run, in which order, and checking after each.

``optimize`` copies the graph (the traced graph is never changed), runs the cleanup
passes round after round until a round changes nothing (at most ``MAX_ROUNDS``), folds
eval batch norms and epilogues into convolutions, fuses patterns, merges and drops what
fusion left behind (cse, dce), then hands the graph to elementwise fusion and memory
planning, in that order. With ``options.verify_passes`` the verifier runs after every
pass, and an error names the pass that broke the graph. With ``options.optimize`` off
the copy is only verified.
"""
from __future__ import annotations

import collections
from logging import DEBUG, INFO
from typing import Callable, List, Optional, Sequence

from .. import logs
from ..clone import clone
from ..errors import GraphError
from ..graph import Graph
from ..options import options
from ..verifier import verify
from .attention import open_attention
from .attention_arguments import attention_arguments
from .batch_matmul import batch_matmul
from .batchnorm_train import batchnorm_train
from .channels_last import channels_last
from .conv_epilogue import conv_epilogue
from .counted_loops import counted_loops
from .cse import cse
from .dce import dce
from .depthwise_train import depthwise_train
from .drop_identity import drop_identity
from .encoder_layer import encoder_layers
from .fold import fold
from .fold_batchnorm import fold_batchnorm
from .fold_cond import fold_cond
from .fold_parameters import fold_parameters
from .fuse_elementwise import fuse_elementwise
from .grad_out_of_place import grad_out_of_place
from .licm import licm
from .onednn_linear import onednn_linear
from .patch_conv import patch_conv
from .patterns import fuse_patterns
from .plan_memory import plan_memory
from .roll_steps import roll_steps
from .rotary import rotary
from .squeeze_excite import squeeze_excite
from .rewrite import EDITS
from .simplify import simplify
from .unbind_rows import unbind_rows

Pass = Callable[[Graph], Graph]

MAX_ROUNDS = 4
CLEANUP: List[Pass] = [fold, fold_cond, simplify, drop_identity, cse, dce, licm]
CONV: List[Pass] = [fold_batchnorm, conv_epilogue]      # eval batch norms, conv epilogues
FINAL: List[Pass] = [unbind_rows, fuse_elementwise, roll_steps, batchnorm_train, plan_memory,
                     grad_out_of_place, depthwise_train, onednn_linear]
PASSES: List[Pass] = CLEANUP + CONV + [counted_loops, encoder_layers, open_attention,
                                     attention_arguments,
                                     patch_conv,
                                     batch_matmul,
                                     fuse_patterns, fold_parameters, rotary,
                                     squeeze_excite, channels_last] + FINAL  # all run


def run_pass(graph: Graph, pass_: Pass) -> Graph:
    """``pass_(graph)``, verified afterwards when ``options.verify_passes`` is on; what it
    rewrote logged on ``tograph.fusion`` when that is on."""
    census = _census(graph) if logs.fusion.isEnabledFor(INFO) else None
    result = pass_(graph)
    if options.verify_passes:
        try:
            verify(result)
        except GraphError as e:
            raise GraphError(f"after optimizer pass {pass_.__name__!r}: {e}") from e
    if census is not None:
        _log_rewrite(pass_, census, result)
    return result


def _census(graph: Graph) -> tuple:
    """(how many nodes of each op ``graph`` holds, subgraphs included; its nodes)."""
    nodes = list(graph.walk())
    return collections.Counter(node.op for node in nodes), nodes


def _log_rewrite(pass_: Pass, census: tuple, result: Graph) -> None:
    """``tograph.fusion``: the ops a pass added and removed (INFO); the nodes it made,
    with the ops fused into each (DEBUG)."""
    (before, old), (after, nodes) = census, _census(result)
    if after == before:
        return
    added, removed = after - before, before - after
    change = [f"+{n} {op}" for op, n in sorted(added.items())] + \
        [f"-{n} {op}" for op, n in sorted(removed.items())]
    logs.fusion.info("pass %s on %s: %d -> %d nodes (%s)", pass_.__name__, result.name,
                     sum(before.values()), sum(after.values()), ", ".join(change))
    if logs.fusion.isEnabledFor(DEBUG):
        seen = {id(node) for node in old}       # (``old`` keeps them alive: ids stay theirs)
        for node in nodes:
            if id(node) not in seen and node.op in added:
                ops = node.attrs.get("ops")
                logs.fusion.debug("  %s = %s%s", node.name, node.op,
                                  f" of {' '.join(map(str, ops))}" if ops else "")


def to_fixed_point(graph: Graph, passes: Sequence[Pass]) -> Graph:
    """Run ``passes`` in order, again while a round changes the graph (bounded). A round
    in which only ``dce`` changed something ends it: removing dead nodes gives the other
    cleanup passes nothing new to do."""
    for _ in range(MAX_ROUNDS):
        changed = False
        for pass_ in passes:
            before = EDITS[0]
            graph = run_pass(graph, pass_)
            changed = changed or (EDITS[0] != before and pass_ is not dce)
        if not changed:
            break
    return graph


def optimize(graph: Graph, passes: Optional[Sequence[Pass]] = None) -> Graph:
    """A new graph computing the same outputs: the graph the executor runs.

    ``passes``: run only these (in this order, to a fixed point) instead of the pipeline."""
    result = clone(graph)
    verify(result)
    if not options.optimize:
        return result
    if passes is not None:
        return to_fixed_point(result, list(passes))
    result = to_fixed_point(result, CLEANUP)
    for pass_ in CONV:
        result = run_pass(result, pass_)
    before = EDITS[0]
    result = run_pass(result, counted_loops)
    result = run_pass(result, encoder_layers)     # before open_attention opens its mha
    result = run_pass(result, open_attention)
    result = run_pass(result, attention_arguments)
    result = run_pass(result, patch_conv)
    result = run_pass(result, batch_matmul)
    result = run_pass(result, fuse_patterns)
    if EDITS[0] != before:                  # fused nodes may repeat; intermediates died
        result = run_pass(run_pass(result, cse), dce)
    result = run_pass(result, fold_parameters)     # after the patterns that read weights
    result = run_pass(result, rotary)
    result = run_pass(result, squeeze_excite)     # after patterns (conv2d_relu)
    result = run_pass(result, channels_last)       # after every pass making conv nodes
    for pass_ in FINAL:
        result = run_pass(result, pass_)
    return result
