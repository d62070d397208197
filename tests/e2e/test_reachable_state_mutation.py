"""Python state reachable from a converted call -- the globals of the helpers it calls,
closure cells, default argument values, attributes of objects, containers inside
containers, deque/OrderedDict/defaultdict/set, the closures of a model's hooks -- mutated
while tracing: either repeated on every run (a hook's dict of activations: a ``set_item``
per run) or a fallback naming the line; never a traced value left in the user's state.

Each program is built twice from one seed (module-level state reset by its builder), run
eagerly, then through ``to_graph`` (default and strict), 3+ calls; after every call the
whole reachable state and the result are compared with eager's (``object_graph_oracle``:
identities, classes, keys and order, lengths, tensor values and dtypes). In strict mode a
refused call must leave the state as it was before the call.
"""
from __future__ import annotations

import collections
import warnings

import pytest
import torch
from torch import nn

from object_graph_oracle import fingerprint
from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# --- module-level state the helpers below fill (reset by each builder) -----------------
COUNTS = collections.OrderedDict(calls=0)
BY_KEY = collections.defaultdict(int)
LOG = []
SEEN = set()
MEMO = {}


class Stats:
    def __init__(self):
        self.totals = {"n": 0}


STATS = Stats()


class History:
    def __init__(self):
        self.items = []


def count_calls():
    COUNTS["calls"] += 1
    return COUNTS["calls"]


def count_by_key(k):
    BY_KEY[k] += 1


def log_constant():
    LOG.append(1.0)


def note_size(n):
    SEEN.add(n)


def square_memo(n):
    if n not in MEMO:
        MEMO[n] = n * n
    return MEMO[n]


def bump_stats():
    STATS.totals["n"] += 1


# --- the programs: (fn, inputs, state) ------------------------------------------------------
def p_hook_dict_model_in_closure():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    features = {}

    def hook(module, inputs, output):
        features["relu"] = output.detach()
    model[1].register_forward_hook(hook)

    def predict(x):
        return model(x).softmax(-1)
    g = _gen(1)
    return predict, [(torch.randn(n, 3, generator=g),) for n in (2, 2, 4)], lambda: features


def p_hook_dict_two_layers():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    acts = {}

    def keep(name):
        def hook(module, inputs, output):
            acts[name] = output.detach() * 1
        return hook
    model[0].register_forward_hook(keep("fc1"))
    model[2].register_forward_hook(keep("fc2"))

    def step(x):
        return model(x + 1).sum(-1)
    g = _gen(2)
    return step, [(torch.randn(3, 3, generator=g),) for _ in range(3)], lambda: acts


def p_hook_list_append():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    outputs = []
    model[1].register_forward_hook(lambda m, i, o: outputs.append(o.detach()))

    def predict(x):
        return model(x) * 2
    g = _gen(3)
    return predict, [(torch.randn(2, 3, generator=g),) for _ in range(3)], lambda: outputs


def p_deque_of_numbers_on_object():
    class Window:
        def __init__(self):
            self.values = collections.deque(maxlen=2)
    window = Window()

    def step(x):
        window.values.append(x.sum().item())
        return x * 2
    g = _gen(4)
    return step, [(torch.randn(3, generator=g),) for _ in range(4)], lambda: window


def p_deque_of_tensors_in_closure():
    buf = collections.deque(maxlen=3)

    def step(x):
        y = x.relu()
        buf.append(y)
        return y + 1
    g = _gen(5)
    return step, [(torch.randn(3, generator=g),) for _ in range(4)], lambda: buf


def p_ordered_dict_counter_in_helper():
    COUNTS.clear()
    COUNTS["calls"] = 0

    def step(x):
        n = count_calls()
        return x * n
    g = _gen(6)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: COUNTS


def p_defaultdict_counter_in_helper():
    BY_KEY.clear()

    def step(x):
        count_by_key("seen")
        return x + 1
    g = _gen(7)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: BY_KEY


def p_global_list_constant_in_helper():
    LOG.clear()

    def step(x):
        log_constant()
        return x - 1
    g = _gen(8)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: LOG


def p_global_object_dict_in_helper():
    STATS.totals = {"n": 0}

    def step(x):
        bump_stats()
        return x * 3
    g = _gen(9)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: STATS


def p_global_set_memo_in_helper():
    SEEN.clear()

    def step(x):
        note_size(x.shape[0])
        return x.cos()
    g = _gen(10)
    return step, [(torch.randn(n, generator=g),) for n in (3, 3, 5)], lambda: SEEN


def p_global_dict_memo_in_helper():
    MEMO.clear()

    def step(x):
        return x * square_memo(x.shape[0])
    g = _gen(11)
    return step, [(torch.randn(n, generator=g),) for n in (2, 2, 3)], lambda: MEMO


def p_default_object_dict_counter():
    class Box:
        def __init__(self):
            self.stats = {"n": 0}
    box = Box()

    def step(x, box=box):
        box.stats["n"] += 1
        return x * 2
    g = _gen(12)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: box


def p_default_object_list_of_tensors():
    history = History()

    def step(x, history=history):
        y = x.exp()
        history.items.append(y)
        return y.sum()
    g = _gen(13)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: history


def p_kwonly_default_dict():
    cache = {"last": None}

    def step(x, *, cache=cache):
        cache["last"] = x * 2
        return x + 1
    g = _gen(14)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: cache


# --- what a helper's closure or default holds, deeper than one level -------------------------
def p_helper_closure_deque():
    buf = collections.deque(maxlen=3)

    def push(v):
        buf.append(v)

    def step(x):
        push(x.sum().item())
        return x + 1
    g = _gen(15)
    return step, [(torch.randn(3, generator=g),) for _ in range(4)], lambda: buf


def p_helper_default_object_list():
    history = History()

    def log(v, hist=history):
        hist.items.append(v)

    def step(x):
        log(x.sum())
        return x * 2
    g = _gen(16)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: history


def p_helper_closure_nested_list():
    store = {"log": []}

    def record(v):
        store["log"].append(v)

    def step(x):
        record(x.mean().item())
        return x - 2
    g = _gen(17)
    return step, [(torch.randn(3, generator=g),) for _ in range(3)], lambda: store


def p_hook_dict_model_argument():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    acts = {}

    def hook(module, inputs, output):
        acts["relu"] = output.detach()
    model[1].register_forward_hook(hook)

    def predict(net, x):
        return net(x) + 1
    g = _gen(18)
    return predict, [(model, torch.randn(n, 3, generator=g)) for n in (2, 2, 3)], lambda: acts


def p_hook_list_model_argument():
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    seen = []
    model[1].register_forward_hook(lambda m, i, o: seen.append((o > 0).sum().item()))

    def predict(net, x):
        return net(x) * 3
    g = _gen(19)
    return predict, [(model, torch.randn(2, 3, generator=g)) for _ in range(3)], lambda: seen


# program -> "converts", or the text of the line its fallback must name; a memo falls back
# on the call that fills it (the eager run fills it) and converts on the others
MEMO_LINE = "memo: "
CASES = {
    "hook_dict_model_in_closure": "converts",
    "hook_dict_two_layers": "converts",
    "hook_list_append": "outputs.append(o.detach())",
    "deque_of_numbers_on_object": "window.values.append(x.sum().item())",
    "deque_of_tensors_in_closure": "buf.append(y)",
    "ordered_dict_counter_in_helper": 'COUNTS["calls"] += 1',
    "defaultdict_counter_in_helper": "BY_KEY[k] += 1",
    "global_list_constant_in_helper": "converts",  # (appended numbers: h93's appended
    # values, runtime/appended_lists.py)
    "global_object_dict_in_helper": "converts",   # (a number two levels down: carried)
    "global_set_memo_in_helper": MEMO_LINE + "SEEN.add(n)",
    "global_dict_memo_in_helper": MEMO_LINE + "MEMO[n] = n * n",
    "default_object_dict_counter": 'box.stats["n"] += 1',
    "default_object_list_of_tensors": "history.items.append(y)",
    "kwonly_default_dict": 'cache["last"] = x * 2',
    "helper_closure_deque": "buf.append(v)",
    "helper_default_object_list": "hist.items.append(v)",
    "helper_closure_nested_list": "converts",      # (a helper's closure lists: carried)
    "hook_dict_model_argument": "converts",
    "hook_list_model_argument": "converts",      # (numbers appended: runtime/appended_lists.py)
}


def _world(fn, args, state):
    out = fn(*args)
    return fingerprint((out, state()))


def _named_line(message, text):
    """The message names this file's line holding ``text``."""
    with open(__file__) as f:
        lines = [n for n, line in enumerate(f.read().splitlines(), 1) if text in line]
    assert any(f"{THIS_FILE}:{n}" in message for n in lines), \
        f"the message names not the line of {text!r}: {message}"


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("name", list(CASES))
def test_reachable_state_equals_eager(name, strict):
    build = globals()["p_" + name]
    expect = CASES[name]
    torch.manual_seed(0)
    fn, inputs, state = build()
    expected = [_world(fn, args, state) for args in inputs]
    torch.manual_seed(0)
    fn, inputs, state = build()
    g = to_graph(fn, strict=strict)
    memo = expect.startswith(MEMO_LINE)
    expect = expect[len(MEMO_LINE):] if memo else expect
    for i, (args, exp) in enumerate(zip(inputs, expected)):
        if memo and i > 0 and args[0].shape != inputs[i - 1][0].shape:
            continue        # (a new size fills the memo again: not compared)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if strict and expect != "converts" and not (memo and i > 0):
                before = fingerprint(state())
                with pytest.raises(ConversionError) as err:
                    g(*args)
                _named_line(str(err.value), expect)
                assert fingerprint(state()) == before, f"call {i}: the refused trace changed the state"
                got = _world(fn, args, state)           # (the caller runs it eagerly)
            else:
                got = _world(g, args, state)
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        assert got == exp, f"call {i}: state or result differs from eager's"
        if expect == "converts" or memo and i > 0:
            assert not fallbacks, fallbacks[0]
        elif not strict and i == 0:      # (said once: the later calls run eagerly)
            assert fallbacks, "expected a FallbackWarning"
            _named_line(fallbacks[0], expect)

