"""The operators converted code calls (as ``tg``): Python semantics for Python values,
graph ops for symbolic tensors. See ``transpiler`` for the code that calls them.
"""
from .calls import call, set_converter
from .conditionals import if_stmt
from .effects import (assert_stmt, eager_only, finally_block, node_mark, print_,
                      try_body, try_guard)
from .frame_locals import frame_locals
from .item_reads import getitem
from .iterables import TensorList
from .logical import and_, ifexp, is_bool, not_, or_
from .loops import for_stmt, while_stmt
from .match_patterns import match_case
from .membership import contains
from .outside_iterators import iterated
from .probes import probe
from .staged_raises import raise_if
from .special_values import UNREAD, Unassigned, Undefined, UndefinedReturn, is_undefined
from .text import fstring, percent

__all__ = ["TensorList", "UNREAD", "Unassigned", "Undefined", "UndefinedReturn", "and_", "assert_stmt", "call",
           "contains", "eager_only", "for_stmt", "frame_locals", "fstring", "getitem", "if_stmt", "ifexp", "is_bool", "is_undefined", "iterated", "match_case",
           "not_", "or_",
           "percent", "print_", "probe", "raise_if", "set_converter", "try_body", "try_guard",
           "finally_block", "node_mark", "while_stmt"]
