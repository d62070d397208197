"""Python syntax highlighting to HTML spans, with the standard library's ``tokenize``.

    highlight_lines(source) -> [html, ...]   # one string per source line
    highlight(source) -> html                # the same lines joined by newlines

Each token becomes ``<span class="C">text</span>`` with ``C`` one of ``CLASSES``; all other
text (whitespace, line continuations) is copied as is. Every character of the source
appears exactly once, HTML-escaped, so stripping the tags and unescaping gives back the
source. A span that crosses a line end (a triple-quoted string) is closed at the end of
the line and opened again on the next, so each line stands alone. Text that ``tokenize``
cannot read (a fragment, an unterminated string) is copied as plain text from there on.
"""
from __future__ import annotations

import builtins
import html
import io
import keyword
import token
import tokenize
from typing import Iterator, List, Optional, Tuple

CLASSES = {
    "k": "keyword", "b": "builtin name", "s": "string", "n": "number", "c": "comment",
    "d": "decorator", "o": "operator", "f": "name being defined (def/class)",
}
_BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_")) - set(keyword.kwlist)
_STRING_TYPES = {token.STRING} | {getattr(token, n) for n in
                                  ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                                  if hasattr(token, n)}

_LINE_START = (token.NEWLINE, token.NL, token.INDENT, token.DEDENT)
Segment = Tuple[str, Optional[str]]      # (text, class or None for plain text)


def _line_starts(source: str) -> List[int]:
    """Offsets of the first character of each line (tokenize's rows count from 1)."""
    starts = [0, 0]
    for line in source.split("\n")[:-1]:          # tokenize reads lines ending at "\n"
        starts.append(starts[-1] + len(line) + 1)
    return starts


def _classify(tok: tokenize.TokenInfo, prev: Optional[tokenize.TokenInfo],
              in_decorator: bool) -> Optional[str]:
    if tok.type in _STRING_TYPES:
        return "s"
    if tok.type == token.COMMENT:
        return "c"
    if tok.type == token.NUMBER:
        return "n"
    if tok.type == token.OP:
        return "d" if in_decorator and tok.string in "@." else "o"
    if tok.type == token.NAME:
        if in_decorator:
            return "d"
        if keyword.iskeyword(tok.string):
            return "k"
        if prev is not None and prev.string in ("def", "class"):
            return "f"
        if tok.string in _BUILTINS and not (prev is not None and prev.string == "."):
            return "b"
    return None


def _tokens(source: str) -> Iterator[tokenize.TokenInfo]:
    """The tokens of ``source``, stopping quietly where tokenize gives up."""
    try:
        yield from tokenize.generate_tokens(io.StringIO(source).readline)
    except (tokenize.TokenError, SyntaxError):
        return


def segments(source: str) -> List[Segment]:
    """``source`` cut into (text, class) pieces that concatenate to exactly ``source``."""
    starts = _line_starts(source)
    out: List[Segment] = []
    cursor, prev, in_decorator, depth = 0, None, False, 0

    def offset(pos):
        row, col = pos
        return min(starts[min(row, len(starts) - 1)] + col, len(source))

    for tok in _tokens(source):
        if tok.type == token.OP and tok.string == "@":
            in_decorator = depth == 0 and (prev is None or prev.type in _LINE_START)
        elif tok.type != token.NAME and tok.string != ".":
            in_decorator = False       # the decorator's arguments are ordinary code
        if tok.type == token.OP:
            depth += (tok.string in "([{") - (tok.string in ")]}")
        # Positions are clamped to the cursor, so a token that tokenize misplaces can
        # never repeat or drop a character.
        start = max(offset(tok.start), cursor)
        end = max(offset(tok.end), start)
        if start > cursor:
            out.append((source[cursor:start], None))
        cls = _classify(tok, prev, in_decorator)
        if out and out[-1][1] == cls and start == cursor:     # "()" -> one span, not two
            out[-1] = (out[-1][0] + source[start:end], cls)
        elif end > start:
            out.append((source[start:end], cls))
        cursor, prev = end, tok
    if cursor < len(source):
        out.append((source[cursor:], None))
    return out


def _span(text: str, cls: Optional[str]) -> str:
    body = html.escape(text, quote=False)
    return f'<span class="{cls}">{body}</span>' if cls and text else body


def highlight_lines(source: str) -> List[str]:
    """One HTML string per line of ``source`` (split at ``\\n``, which is not included)."""
    lines: List[List[str]] = [[]]
    for text, cls in segments(source):
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            lines[-1].append(_span(part, cls))
    return ["".join(parts) for parts in lines]


def highlight(source: str) -> str:
    """``source`` as highlighted HTML (to go inside a ``<pre>``)."""
    return "\n".join(highlight_lines(source))
