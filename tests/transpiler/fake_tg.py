"""A pure-Python implementation of the operator API the generated code calls (``tg``):
exact Python semantics on plain values, no tensors. It also counts operator calls so tests
can check that conversion really routed through it."""
import collections
import contextlib

calls = collections.Counter()


class Undefined:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f'Undefined({self.name!r})'

    def __getattr__(self, attr):
        raise NameError(f'{self.name!r} is not defined')

    def __bool__(self):
        raise NameError(f'{self.name!r} is not defined')


class Unassigned(Undefined):
    pass


class UndefinedReturn:
    def __repr__(self):
        return 'UndefinedReturn()'


def _count(fn):
    def wrapper(*args, **kwargs):
        calls[fn.__name__] += 1
        return fn(*args, **kwargs)
    wrapper.__name__ = fn.__name__
    return wrapper


@_count
def if_stmt(test, body, orelse, state, names):
    result = body(*state) if test else orelse(*state)
    assert isinstance(result, tuple) and len(result) == len(names), (result, names)
    return result


@_count
def while_stmt(test, body, state, names):
    while test(*state):
        state = body(*state)
        assert len(state) == len(names)
    return state


@_count
def for_stmt(iterable, extra_test, body, state, names):
    for item in iterable:
        if extra_test is not None and not extra_test(*state):
            break
        state = body(item, *state)
        assert len(state) == len(names)
    return state


@_count
def ifexp(test, true_fn, false_fn):
    return true_fn() if test else false_fn()


@_count
def and_(a, *fns):
    for fn in fns:
        if not a:
            return a
        a = fn()
    return a


@_count
def or_(a, *fns):
    for fn in fns:
        if a:
            return a
        a = fn()
    return a


@_count
def not_(x):
    return not x


@_count
def call(f, *args, **kwargs):
    return f(*args, **kwargs)


@_count
def iterated(iterable):
    return iterable


@_count
def assert_stmt(test, msg_fn):
    if not test:
        raise AssertionError(msg_fn()) if msg_fn is not None else AssertionError()


_CONVERSIONS = {'': lambda v: v, 's': str, 'r': repr, 'a': ascii}


@_count
def fstring(*parts):
    return ''.join(p if isinstance(p, str) else format(_CONVERSIONS[p[1]](p[0]), p[2])
                   for p in parts)


@_count
def percent(template, values):
    return template % values


@contextlib.contextmanager
def eager_only(reason):
    calls['eager_only'] += 1
    yield


@contextlib.contextmanager
def try_guard(catches):
    calls['try_guard'] += 1
    yield


@contextlib.contextmanager
def try_body(control_flow):
    yield


def node_mark():
    return 0


@contextlib.contextmanager
def finally_block(mark):
    yield


UNREAD = object()   # a branch's value for a variable no later code reads


@_count
def getitem(obj, index):
    return obj[index]


@_count
def contains(element, container, negate):
    return (element not in container) if negate else (element in container)


class _Module:
    """``tg`` as the generated code sees it."""
    Undefined, Unassigned = Undefined, Unassigned
    UNREAD = UNREAD
    UndefinedReturn = UndefinedReturn
    if_stmt, while_stmt, for_stmt = staticmethod(if_stmt), staticmethod(while_stmt), staticmethod(for_stmt)
    ifexp, and_, or_, not_ = staticmethod(ifexp), staticmethod(and_), staticmethod(or_), staticmethod(not_)
    call, assert_stmt, eager_only = staticmethod(call), staticmethod(assert_stmt), staticmethod(eager_only)
    try_guard, try_body = staticmethod(try_guard), staticmethod(try_body)
    node_mark, finally_block = staticmethod(node_mark), staticmethod(finally_block)
    fstring, percent = staticmethod(fstring), staticmethod(percent)
    getitem, contains = staticmethod(getitem), staticmethod(contains)


tg = _Module()


def convert(fn):
    """The converted function, calling this fake."""
    from transpiler import conversion
    return conversion.convert(fn, {'tg': tg}).fn
