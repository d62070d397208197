"""Python effects reached inside tensor control flow, and grad mode in tensor branches.

A tensor ``if`` traces both branches and a tensor loop traces its body once, so Python
code there runs once per trace. A change it makes to Python state the region does not
carry (a context manager counting entries, an inner function bumping a ``nonlocal``, a
helper appending to a list it closes over, a property or descriptor writing its object)
must fall back (default: eager's result and one FallbackWarning naming the line that
reaches the state; strict: ConversionError), never run once per trace. Programs that only
read such state, or change state the region carries, still convert.

``requires_grad`` of results and of ``t.requires_grad`` read in the program follows the
branch taken at run time, with ``no_grad``/``enable_grad`` nested inside tensor branches.
"""
import inspect
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
BOTH = [(POS,), (NEG,)]


def line_of(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def falls_back_at(fn, inputs, marker):
    """Default: one FallbackWarning naming ``file:line`` of the marked line and eager's
    results on every input; strict: ConversionError at that line."""
    where = f"{inspect.getsourcefile(fn)}:{line_of(fn, marker)}:"
    g = to_graph(fn)
    for i, args in enumerate(inputs):
        exp = fn(*_clone(args))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(*_clone(args))
        warned = [str(x.message) for x in w if issubclass(x.category, FallbackWarning)]
        assert len(warned) == (1 if i == 0 else 0), warned
        if i == 0:
            assert warned[0].startswith(where), (warned[0], where)
        assert_same(got, exp)
    with pytest.raises(ConversionError) as info:
        to_graph(fn, strict=True)(*_clone(inputs[0]))
    assert f"{info.value.filename}:{info.value.lineno}:" == where, str(info.value)


def converts(fn, inputs):
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            exp = fn(*_clone(args))
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*_clone(args))
            assert_same(got, exp)


# --------------------------------------------------------------------------- helpers
class CM:
    """Counts entries and records exits, as the fuzzer's context manager does."""

    def __init__(self):
        self.enters = 0
        self.exits = 0
        self.log = []

    def __enter__(self):
        self.enters += 1
        return self

    def __exit__(self, *exc):
        self.exits += 1
        self.log.append("exit")
        return False


class Quiet:
    """A context manager with no state at all: nothing for a graph to repeat."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1

    @property
    def next(self):
        self.n += 1                     # a property with an effect
        return self.n


class Counted:
    """A descriptor that counts reads in the instance's dict."""

    def __get__(self, obj, objtype=None):
        obj.__dict__["reads"] = obj.__dict__.get("reads", 0) + 1
        return 2.0


class Holder:
    scale = Counted()


LOG = []
GLOBAL_CM = CM()


def log_it(v):
    LOG.append(v)                       # a helper's effect on a global list
    return v


# --------------------------------------------------------------------------- context managers
def cm_in_branch(x):
    cm = CM()
    if x.sum() > 0:
        with cm:                        # <- effect
            x = x + 1
    return x, cm.enters, cm.exits, len(cm.log)


def cm_in_else(x):
    cm = CM()
    if x.sum() > 0:
        x = x * 2
    else:
        with cm as c:                   # <- effect
            x = x - c.enters
    return x, cm.enters


def cm_in_while(x):
    cm = CM()
    i = torch.tensor(0)
    while i < x.abs().sum():
        i += 1
        with cm:                        # <- effect
            x = x * 0.5
    return x, cm.enters


def cm_in_for_rows(x):
    cm = CM()
    total = torch.zeros(())
    for row in x.reshape(3, 1):
        with cm:                        # <- effect
            total = total + row.sum()
    return total, cm.exits


def cm_swallowing(x):
    class Swallow(CM):
        def __exit__(self, *exc):
            self.exits += 1
            return True                 # swallows the exception
    cm = Swallow()
    if x.sum() > 0:
        with cm:                        # <- effect
            x = x + 1
    return x, cm.exits


# (cm_in_while and cm_in_for_rows now convert: their counters and the log growing by
# "exit" per iteration are carried -- tests/e2e/test_fidelity_region_state.py)


def cm_around_branch(x):
    cm = CM()
    with cm:                            # outside tensor control flow: once per call
        if x.sum() > 0:
            x = x + 1
        else:
            x = x - 1
    return x, cm.enters, cm.exits


def quiet_cm_in_loop(x):
    i = torch.tensor(0)
    while i < 3:
        i += 1
        with Quiet():
            x = x * 2
    return x


def no_grad_in_branch(x):
    if x.sum() > 0:
        with torch.no_grad():
            x = x * 2
    return x


@pytest.mark.parametrize("fn", [cm_around_branch, quiet_cm_in_loop, no_grad_in_branch])
def test_context_managers_without_repeated_effects_convert(fn):
    converts(fn, BOTH)


def cm_argument(x, cm):
    with cm:                            # <- effect
        y = x + 1
    return y


def cm_global(x):
    with GLOBAL_CM:                     # <- effect
        y = x + 1
    return y


def test_context_manager_from_outside_falls_back_every_call():
    g = to_graph(cm_argument)
    cm = CM()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g(POS, cm)
        g(NEG, cm)
    assert cm.enters == 2 and cm.exits == 2      # both calls entered it, as eagerly
    assert any(issubclass(x.category, FallbackWarning) for x in w)
    with pytest.raises(ConversionError):
        to_graph(cm_argument, strict=True)(POS, CM())
    before = GLOBAL_CM.enters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        to_graph(cm_global)(POS)
        to_graph(cm_global)(POS)
    assert GLOBAL_CM.enters == before + 2


def test_a_global_context_manager_with_counters_converts():
    """Its counters are carried and its log's text appends are graph effects (h93):
    every call enters and exits it as eagerly, strict mode included."""
    g = to_graph(cm_global, strict=True)
    for x in (POS, NEG, POS):
        state = (GLOBAL_CM.enters, GLOBAL_CM.exits, list(GLOBAL_CM.log))
        got = g(x)
        assert torch.equal(got, x + 1)
        assert (GLOBAL_CM.enters, GLOBAL_CM.exits) == (state[0] + 1, state[1] + 1)
        assert GLOBAL_CM.log == state[2] + ["exit"]


# --------------------------------------------------------------------------- nonlocal / calls
def nonlocal_in_loop(x):
    n = 0

    def bump():
        nonlocal n
        n += 1
    i = torch.tensor(0)
    while i < x.abs().sum():
        i += 1
        bump()                          # <- effect
        x = x * 0.5
    return x, n


def nonlocal_in_branch(x):
    hits = [0]

    def hit():
        hits[0] += 1
    if x.sum() > 0:
        hit()                           # <- effect
        x = x + 1
    return x, hits[0]


def method_of_local_object(x):
    c = Counter()
    for row in x.reshape(3, 1):
        c.bump()                        # <- effect
        x = x + row
    return x, c.n


def property_with_effect(x):
    c = Counter()
    if x.sum() > 0:
        x = x * c.next                  # <- effect
    return x, c.n


def descriptor_with_effect(x):
    h = Holder()
    if x.sum() > 0:
        x = x * h.scale                 # <- effect
    return x, h.__dict__.get("reads", 0)


def global_helper_appends(x):
    del LOG[:]
    if x.sum() > 0:
        x = log_it(x + 1)               # <- effect
    return x, len(LOG)


def closure_list_appended_by_helper(x):
    seen = []

    def note(v):
        seen.append(1)
        return v
    i = torch.tensor(0)
    while i < 2:
        i += 1
        x = note(x * 2)                 # <- effect
    return x, len(seen)


@pytest.mark.parametrize("fn", [descriptor_with_effect,
                                global_helper_appends, closure_list_appended_by_helper])
def test_effects_through_calls_fall_back_at_the_call_line(fn):
    falls_back_at(fn, BOTH, "# <- effect")


def reads_closure_object(x):
    c = Counter()
    c.n = 3

    def scale():
        return c.n * 0.5                # reads only
    if x.sum() > 0:
        x = x * scale()
    return x, c.n


class Box:
    pass


def assigns_local_object_attribute(x):
    b = Box()
    b.v = x
    b.k = 0
    if x.sum() > 0:
        b.v = x * 2                     # carried as the branch's state
        b.k = 1
    return b.v, b.k


def appends_in_loop(x):
    out = []
    for row in x.reshape(3, 1):
        out.append(row * 2)             # the list becomes a TensorList: carried
    return out


@pytest.mark.parametrize("fn", [reads_closure_object, assigns_local_object_attribute,
                                appends_in_loop,
                                nonlocal_in_branch])    # (a number item: region_numbers)
def test_state_read_or_carried_still_converts(fn):
    converts(fn, BOTH)


# --------------------------------------------------------------------------- grad mode
W = torch.tensor([0.5, -1.0, 2.0])


def grad_args(x):
    return (x.clone(), W.clone().requires_grad_())


GRAD_INPUTS = [grad_args(POS), grad_args(NEG)]


def no_grad_in_untaken_branch(x, w):
    if x.sum() > 0:
        with torch.no_grad():
            t = w * 2
    else:
        t = w * 3
    return t, t.requires_grad


def nested_no_grad_in_branch(x, w):
    t = x * w
    if x.sum() > 0:
        with torch.no_grad():
            with torch.no_grad():
                t = t * w
            t = t * w                   # still under the outer no_grad
    else:
        t = x - w
    return t, t.requires_grad


def enable_grad_inside_no_grad(x, w):
    with torch.no_grad():
        if x.sum() > 0:
            with torch.enable_grad():
                t = w * 2
        else:
            t = w * 3
    return t, t.requires_grad


def grad_flag_after_loop(x, w):
    t = x
    i = torch.tensor(0)
    while i < x.sum():                  # runs 0 times for NEG: t stays x
        i += 1
        t = t * w
    return t, t.requires_grad, (t * 2).requires_grad


def grad_flag_known_statically(x, w):
    u = w * 2
    v = u.detach()
    return u.requires_grad, v.requires_grad, (u > 0).requires_grad, torch.zeros_like(u) \
        .requires_grad, u


@pytest.mark.parametrize("fn", [no_grad_in_untaken_branch, nested_no_grad_in_branch,
                                enable_grad_inside_no_grad, grad_flag_after_loop,
                                grad_flag_known_statically])
def test_requires_grad_follows_the_path_taken(fn):
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in GRAD_INPUTS:
            exp = fn(*_clone(args))
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*_clone(args))
            assert_same(got, exp)
            for a, b in zip(got, exp):
                if isinstance(b, torch.Tensor):
                    assert a.requires_grad == b.requires_grad, (fn.__name__, a, b)
            assert torch.is_grad_enabled()      # the trace left grad mode as it was


def test_gradients_through_branch_with_no_grad():
    g = to_graph(nested_no_grad_in_branch, strict=True)
    for x in (POS, NEG):
        w1, w2 = W.clone().requires_grad_(), W.clone().requires_grad_()
        t1, _ = nested_no_grad_in_branch(x, w1)
        t2, _ = g(x, w2)
        if t1.requires_grad:
            t1.sum().backward()
            t2.sum().backward()
            torch.testing.assert_close(w2.grad, w1.grad)
        else:
            assert not t2.requires_grad


def test_grad_mode_of_the_caller_is_part_of_the_signature():
    def f(x, w):
        with torch.enable_grad():
            t = w * 2
        return t * 3, torch.is_grad_enabled()
    g = to_graph(f, strict=True)
    for mode in (True, False, True):
        with torch.set_grad_enabled(mode):
            got, exp = g(POS, W.clone().requires_grad_()), f(POS, W.clone().requires_grad_())
            assert got[0].requires_grad == exp[0].requires_grad
            assert bool(got[1]) == exp[1] == mode
            assert torch.is_grad_enabled() == mode
