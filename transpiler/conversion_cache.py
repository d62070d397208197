"""On-disk cache of converted functions: a new process skips converting unchanged code.

    found = conversion_cache.load(directory, key)   # (code, source, line_map, hidden) or None
    conversion_cache.store(directory, key, code, source, line_map, hidden)

Converting is most of a model's first call (transformers' forward functions: ~30-40 of
them, 1 s of CPU); the result depends only on what ``key`` hashes: the function's source
text as the parser reads it (``inspect.getsourcelines``), its file and first line, the
names its code object uses (free variables and globals: the namer avoids them), its name
(lambdas parse apart), the extra names and probed variables asked for, the Python, gast
and astunparse versions and the converter's own source files. An entry is one file
``<directory>/<key>.conv``: ``marshal`` of (key, generated source, line map, code object,
the generated functions that are no frame of eager's: ``pyct.qualnames``), then the sha256 of those bytes; it is written to a temporary file and renamed into place,
and read back only if the digest and the key inside match (anything else is a miss). The
directory is used only if it is this user's own and no one else may write to it (the
cache holds code that will run). Loaded code gets a new fake file name
(``loader.fake_filename``), as freshly compiled code does.
"""
import functools
import hashlib
import inspect
import linecache
import marshal
import os
import sys
import tempfile

import astunparse
import gast

FORMAT = 2
_HERE = os.path.dirname(os.path.abspath(__file__))
_CONVERTER_SOURCES = ('conversion.py', 'errors.py', 'pyct', 'converters', 'analysis')


@functools.lru_cache(maxsize=None)
def _converter_digest():
    """sha256 of the converter's own source files (any edit is another cache)."""
    h = hashlib.sha256()
    for entry in _CONVERTER_SOURCES:
        path = os.path.join(_HERE, entry)
        files = [path] if entry.endswith('.py') else sorted(
            os.path.join(path, f) for f in os.listdir(path) if f.endswith('.py'))
        for f in files:
            with open(f, 'rb') as handle:
                h.update(f.encode() + b'\0' + handle.read() + b'\0')
    return h.hexdigest()


def key(fn, extra_names, probed):
    """The cache key of converting ``fn`` (a plain function), or None (no source).

    The source enters as the digest of its whole file (as ``linecache`` has it, checked
    against the file's size and time as ``inspect`` does) and the function's first line:
    finding the function's own lines (``inspect.getsourcelines``: a tokenizer run over
    them, 1-3 ms for a transformers forward) was a third of a warm first call."""
    code = fn.__code__
    try:
        filename = inspect.getsourcefile(code) or code.co_filename
    except TypeError:
        return None
    text = _file_digest(filename, fn.__globals__)
    if text is None:
        return None
    parts = (FORMAT, _converter_digest(), sys.version, getattr(gast, '__version__', ''),
             getattr(astunparse, '__version__', ''), filename, text,
             code.co_firstlineno, code.co_freevars, code.co_names, fn.__name__,
             tuple(sorted(extra_names)), tuple(probed))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


_digests = {}     # file name -> (the line list linecache holds, sha256 of its text)


def _file_digest(filename, module_globals):
    """sha256 of the source file's text (None when there is none), per line list."""
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, module_globals)
    if not lines:
        return None
    known = _digests.get(filename)
    if known is None or known[0] is not lines:
        known = _digests[filename] = (lines, hashlib.sha256(''.join(lines).encode(
            'utf-8', 'surrogatepass')).hexdigest())
    return known[1]


@functools.lru_cache(maxsize=16)
def _usable(directory):
    """Whether ``directory`` (made if missing) is this user's and writable by no one else."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.stat(directory)
    except OSError:
        return False
    owner = os.getuid() if hasattr(os, 'getuid') else st.st_uid
    return st.st_uid == owner and not st.st_mode & 0o022 and os.access(directory, os.W_OK)


def load(directory, entry_key):
    """(code, source, line_map, hidden) stored under ``entry_key``, or None."""
    if not directory or entry_key is None or not _usable(directory):
        return None
    try:
        with open(os.path.join(directory, entry_key + '.conv'), 'rb') as f:
            data = f.read()
    except OSError:
        return None
    payload, digest = data[:-32], data[-32:]
    if len(data) <= 32 or hashlib.sha256(payload).digest() != digest:
        return None
    try:
        stored_key, source, line_map, code, hidden = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if stored_key != entry_key or not isinstance(source, str) or \
            not isinstance(line_map, dict) or not isinstance(hidden, frozenset):
        return None
    return code, source, line_map, hidden


def store(directory, entry_key, code, source, line_map, hidden):
    """Write the entry (best effort: a failure leaves no file and is not an error)."""
    if not directory or entry_key is None or not _usable(directory):
        return
    try:
        payload = marshal.dumps((entry_key, source, dict(line_map), code, frozenset(hidden)))
    except ValueError:
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + entry_key[:16], suffix='.tmp')
        with os.fdopen(fd, 'wb') as f:
            f.write(payload + hashlib.sha256(payload).digest())
        os.replace(tmp, os.path.join(directory, entry_key + '.conv'))
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def renamed(code, filename):
    """``code`` and the code objects inside it with ``co_filename`` = ``filename``."""
    consts = tuple(renamed(c, filename) if isinstance(c, type(code)) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
