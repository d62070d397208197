"""tograph's logging: ``logging.getLogger("tograph")`` and one child per topic.

    TOGRAPH_LOGS="+graph,code,retrace" python serve.py     # at import
    runtime.logs.set_logs("guards,fallback")               # at run time; "" turns it off

Topics (logger ``tograph.<topic>``): ``graph`` (traced graphs; printed at DEBUG), ``code``
(converted Python, the executor's lowered code at DEBUG), ``guards`` (guards built, which
check failed), ``retrace`` (why a call traced), ``fallback`` (eager fallbacks: reason,
file:line), ``fusion`` (passes that rewrote the graph; fused groups at DEBUG), ``kernels``
(kernel compiles: key, command, time, disk hits), ``cache`` (signature cache: misses,
entries, evictions), ``dynamic`` (dynamic dimensions).

``TOGRAPH_LOGS`` works like ``TORCH_LOGS``: comma-separated topics; ``topic`` logs it at
INFO, ``+topic`` at DEBUG, ``-topic`` silences it (ERROR); ``all`` / ``+all`` / ``-all``
stand for every topic; later items win. With a setting, one stderr handler is put on
``tograph`` (``propagate`` off, so a root handler does not print records twice) and the
topics not named stay at WARNING. Without one, ``tograph`` has only a ``NullHandler``:
nothing is printed unless the application configures logging itself (``logging.basicConfig
(level=logging.DEBUG)`` or a level on ``tograph.<topic>``). Callers keep logging cheap:
lazy ``%s`` arguments, and ``isEnabledFor`` before building costly text (a printed graph);
a cached call logs nothing at all.
"""
from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Dict, Optional

TOPICS = ("graph", "code", "guards", "retrace", "fallback", "fusion", "kernels", "cache",
          "dynamic")
ROOT = "tograph"
ENV = "TOGRAPH_LOGS"
FORMAT = "[%(name)s] %(levelname)s %(message)s"

root = logging.getLogger(ROOT)
if not any(isinstance(h, logging.NullHandler) for h in root.handlers):    # (once: reloads)
    root.addHandler(logging.NullHandler())   # library etiquette: silent unless configured


def get(topic: str) -> logging.Logger:
    """The logger of ``topic`` (one of ``TOPICS``): ``tograph.<topic>``."""
    if topic not in TOPICS:
        raise ValueError(f"unknown tograph log topic {topic!r}; topics: {', '.join(TOPICS)}")
    return logging.getLogger(f"{ROOT}.{topic}")


graph, code, guards, retrace, fallback, fusion, kernels, cache, dynamic = map(get, TOPICS)


class _Handler(logging.StreamHandler):
    """The stderr handler ``set_logs`` installs (told apart from the user's own)."""

    def __init__(self):
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter(FORMAT))

    @property
    def stream(self):               # the current sys.stderr (tests and tools replace it)
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def parse(spec: str) -> Dict[str, int]:
    """``"+graph,code,-fusion"`` -> {topic: level} (topics not named are absent). Unknown
    names are left out with one warning listing the valid topics."""
    levels: Dict[str, int] = {}
    bad = []
    for item in spec.replace(" ", ",").split(","):
        item = item.strip()
        if not item:
            continue
        sign, name = (item[0], item[1:].strip()) if item[0] in "+-" else ("", item)
        level = {"+": logging.DEBUG, "-": logging.ERROR, "": logging.INFO}[sign]
        if name == "all":
            levels.update(dict.fromkeys(TOPICS, level))
        elif name in TOPICS:
            levels[name] = level
        else:
            bad.append(item)
    if bad:
        warnings.warn(f"{ENV}: unknown topic(s) {', '.join(map(repr, bad))} ignored; valid "
                      f"topics: {', '.join(TOPICS)}, all (prefix + for DEBUG, - to silence)",
                      stacklevel=3)
    return levels


def set_logs(spec: Optional[str] = "") -> Dict[str, int]:
    """Set the topics' levels as ``TOGRAPH_LOGS`` would (``"+graph,retrace"``), replacing
    the previous setting; ``""`` or None undoes it (no handler of ours, levels unset,
    ``propagate`` back on). Returns {topic: level} as set."""
    levels = parse(spec or "")
    ours = [h for h in root.handlers if type(h).__name__ == "_Handler"]    # (reloads too)
    if not levels:
        for handler in ours:
            root.removeHandler(handler)
        for topic in TOPICS:
            get(topic).setLevel(logging.NOTSET)
        root.propagate = True
        return levels
    if not ours:                                   # once: set_logs twice adds no second
        root.addHandler(_Handler())
    root.propagate = False
    for topic in TOPICS:
        get(topic).setLevel(levels.get(topic, logging.WARNING))
    return levels


if os.environ.get(ENV):
    set_logs(os.environ[ENV])
