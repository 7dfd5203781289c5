"""Python's indentation for grammars written for lark's ``PythonIndenter``.

A grammar that ``%declare``-s ``_INDENT`` and ``_DEDENT`` (lark's ``python.lark``) is not
context-free as written: a postlexer emits those tokens by comparing each line's
indentation with a stack of enclosing levels, which no CFG can do for any width and any
depth. :class:`IndentedMatcher` is that postlexer in the matcher. It scans the text as
Python's tokenizer does (strings, comments, brackets, backslash continuations), keeps the
indentation stack in its state, and feeds the Earley chart of the rest of the grammar:

* the text itself;
* at the first character of a logical line (outside brackets), the markers the indenter
  would emit there: one :data:`~gramgen.grammar.lark.INDENT_MARKER` byte when the line is
  indented deeper than the top of the stack, one ``DEDENT_MARKER`` per level it closes
  (a width between two levels is an error, as lark's ``DedentError``);
* inside brackets, :data:`~gramgen.grammar.lark.BRACKET_NEWLINE` instead of a line end: an
  ignored lexeme, as the indenter drops those newlines.

None of the three bytes is UTF-8, so no text can contain them. Blank lines and comment-only
lines do not count (they are part of ``_NEWLINE``); tabs count 8 (lark's ``tab_len``). The
text's ends read as Python's tokenizer reads them: the first line is the start of a logical
line (indenting it is an error), and the end adds a line end after a last line without one,
then a dedent for every open level. (Three differences from lark's own ``PythonIndenter``,
which accepts an indented first line, counts the spaces of a trailing comment line at the
very end of a file and rejects trailing spaces there; Python does the opposite each time.)

Masks stay exact and cheap: a token without a line end never crosses a layout decision
except at the start of a logical line, where its leading spaces decide it; tokens are
grouped by that decision and each group takes the mask of the chart with its markers fed
(a marker lexeme absorbs the spaces that follow it, so the token's own leading spaces are
matched there). Only tokens that hold a line end are run through the scanner one by one.
"""

from __future__ import annotations

import numpy as np

from .._lru import LRU
from ..automata import bitmask
from ..automata.token_table import token_table_for
from ..errors import TokenRejected
from ..grammar.lark import BRACKET_NEWLINE, DEDENT_MARKER, INDENT_MARKER
from .matcher import Matcher

__all__ = ["IndentedMatcher", "Layout"]

TAB_WIDTH = 8

# scanner modes
CODE, HELD, COMMENT, STRING, CONT = range(5)
_OPEN = frozenset(b"([{")
_CLOSE = frozenset(b")]}")
_QUOTES = frozenset(b"\"'")
_SPACE, _TAB, _NL, _CR, _HASH, _BACKSLASH = 32, 9, 10, 13, 35, 92


class Layout(tuple):
    """The scanner's state after some text: ``(mode, depth, width, stack, quote, triple,
    escaped, run, nonempty, held, empty_quote)``. Immutable, hashable (a cache key).

    ``depth``: open brackets; ``width``: indentation read so far on a line that has not
    started (mode HELD); ``stack``: the indentation levels, innermost last; for strings the
    quote byte, whether triple-quoted, whether the last byte was a backslash, how many
    closing quotes in a row were seen and whether it has content; ``held``: the comment
    fills its line (its line end keeps the next line's indentation pending);
    ``empty_quote``: the text ends with an empty string ``""`` of that quote (a third
    quote makes it a triple-quoted string's opening).
    """

    __slots__ = ()


#: the start of a file is the start of a logical line (a first line indented is an error,
#: as in Python; lark's indenter, which only looks after newlines, would let it pass)
INITIAL = Layout((HELD, 0, 0, (0,), 0, False, False, 0, False, False, 0))


def _dedents(width: int, stack: tuple) -> tuple[bytes, tuple] | None:
    """The markers a line indented ``width`` gets under ``stack``, and the new stack
    (None: a width between two levels)."""
    top = stack[-1]
    if width > top:
        return bytes((INDENT_MARKER,)), stack + (width,)
    if width == top:
        return b"", stack
    n = len(stack)
    while n > 1 and width < stack[n - 1]:
        n -= 1
    if stack[n - 1] != width:
        return None
    return bytes((DEDENT_MARKER,)) * (len(stack) - n), stack[:n]


def scan(layout: Layout, data: bytes) -> tuple[Layout, bytes] | None:
    """The layout after ``data`` and the bytes the chart is fed for it (markers included);
    None where the indenter fails (a dedent to no level, a closing bracket too many)."""
    mode, depth, width, stack, quote, triple, escaped, run, nonempty, held, empty_quote = layout
    out = bytearray()
    for b in data:
        if b >= BRACKET_NEWLINE:   # the matcher's own bytes are never text
            return None
        if mode == HELD:
            if b == _SPACE:
                width += 1
                out.append(b)
                continue
            if b == _TAB:
                width += TAB_WIDTH
                out.append(b)
                continue
            if b == _NL:
                width = 0
                out.append(b)
                continue
            if b == _CR:
                out.append(b)
                continue
            if b == _HASH:
                mode, held = COMMENT, True
                out.append(b)
                continue
            found = _dedents(width, stack)
            if found is None:
                return None
            markers, stack = found
            out += markers
            mode, width = CODE, 0
            # the byte itself, as code: fall through
        if mode == CODE:
            if empty_quote and b == empty_quote:   # `""` + `"`: a triple-quoted string opens
                mode, quote, triple, escaped, run, nonempty, empty_quote = STRING, b, True, False, 0, False, 0
                out.append(b)
                continue
            empty_quote = 0
            if b == _NL or b == _CR:
                if depth:
                    out.append(BRACKET_NEWLINE)
                elif b == _NL:
                    out.append(b)
                    mode, width = HELD, 0
                else:
                    out.append(b)   # `\r\n`: the `\n` starts the pending line
                continue
            if b in _QUOTES:
                mode, quote, triple, escaped, run, nonempty = STRING, b, False, False, 0, False
            elif b in _OPEN:
                depth += 1
            elif b in _CLOSE:
                if not depth:
                    return None
                depth -= 1
            elif b == _HASH:
                mode, held = COMMENT, False
            elif b == _BACKSLASH:
                mode = CONT
            out.append(b)
            continue
        if mode == STRING:
            out.append(b)
            if escaped:
                escaped, nonempty, run = False, True, 0
            elif b == _BACKSLASH:
                escaped, nonempty, run = True, True, 0
            elif b == quote:
                if not triple:
                    mode, empty_quote = CODE, (0 if nonempty else quote)
                else:
                    run += 1
                    if run == 3:
                        mode, run = CODE, 0
            else:
                nonempty, run = True, 0
            continue
        if mode == COMMENT:
            if b == _NL:
                if held:
                    out.append(b)
                    mode, width = HELD, 0
                elif depth:
                    out.append(BRACKET_NEWLINE)
                    mode = CODE
                else:
                    out.append(b)
                    mode, width = HELD, 0
                continue
            out.append(b)
            continue
        # CONT: after a backslash outside strings, up to its line end
        out.append(b)
        if b == _NL:
            mode = CODE
        elif b not in (_SPACE, _TAB, 12, _CR):
            mode = CODE   # a stray backslash: the chart rejects it
    return Layout((mode, depth, width, stack, quote, triple, escaped, run, nonempty, held, empty_quote)), bytes(out)


def ending(layout: Layout) -> bytes | None:
    """What the end of the text adds (an implicit line end, then a dedent per open
    level), or None where the text cannot end (inside a string or a continuation, or
    with brackets open)."""
    mode, depth, _width, stack, *_ = layout
    if mode in (STRING, CONT) or depth:
        return None
    tail = b"" if mode == HELD or (mode == COMMENT and layout[9]) else b"\n"
    return tail + bytes((DEDENT_MARKER,)) * (len(stack) - 1)


class _TokenLayout:
    """Per vocabulary: what the layout needs to know of every token."""

    #: layouts whose scans of the line-end tokens are kept
    SCAN_LAYOUTS = 256

    def __init__(self, vocab):
        n = vocab.size
        self.has_line_end = np.zeros(n, dtype=bool)   # holds \n or \r: scanned one by one
        self.has_marker = np.zeros(n, dtype=bool)     # holds a byte the matcher inserts
        self.lead_width = np.zeros(n, dtype=np.int64)  # indentation of its leading spaces/tabs
        # after the leading spaces/tabs: 0 nothing (whitespace only), 1 a comment or line
        # end (the line is blank), 2 anything else (the line starts: indentation decided)
        self.lead_kind = np.zeros(n, dtype=np.int8)
        # over the vocabulary's bytes end to end (the token table: non-empty, non-special
        # tokens, in byte order), a few vector passes instead of a loop per token
        tt = token_table_for(vocab)
        ids, lengths = tt.rank_to_id, tt.lengths
        if ids.size:
            blob = np.asarray(tt.blob, dtype=np.uint8)
            starts = tt.offsets[:-1]
            self.has_line_end[ids] = np.logical_or.reduceat((blob == _NL) | (blob == _CR), starts)
            self.has_marker[ids] = np.maximum.reduceat(blob, starts) >= BRACKET_NEWLINE
            is_ws = (blob == _SPACE) | (blob == _TAB)
            within = np.arange(blob.size) - np.repeat(starts, lengths)
            lead = np.minimum(np.minimum.reduceat(np.where(is_ws, blob.size, within), starts), lengths)
            widths = np.concatenate([[0], np.cumsum(np.where(blob == _SPACE, 1, np.where(blob == _TAB, TAB_WIDTH, 0)))])
            self.lead_width[ids] = widths[starts + lead] - widths[starts]
            after = blob[np.minimum(starts + lead, blob.size - 1)]
            kind = np.where((after == _HASH) | (after == _NL) | (after == _CR), 1, 2).astype(np.int8)
            kind[lead == lengths] = 0
            self.lead_kind[ids] = kind
        self.scanned = np.flatnonzero(self.has_line_end)
        self.no_marker_words = bitmask.pack(~self.has_marker)
        self._vocab = vocab
        #: layout -> what the scanner feeds the chart for each of the scanned tokens (see
        #: :meth:`scanned_texts`): the same layouts recur
        self._scans: LRU = LRU(self.SCAN_LAYOUTS)

    def scanned_texts(self, layout: Layout) -> tuple[list[bytes], np.ndarray]:
        """For the tokens of :attr:`scanned` under ``layout``: the bytes the scanner feeds
        the chart for each one it does not refuse, and their indices in ``scanned``. Each
        token is scanned whole (the scanner is a transducer: the same bytes as byte by
        byte); cached per layout."""
        found = self._scans.get(layout)
        if found is None:
            fed, where = [], []
            for i, t in enumerate(self.scanned.tolist()):
                step = scan(layout, self._vocab.token_bytes(t))
                if step is not None:
                    fed.append(step[1])
                    where.append(i)
            found = (fed, np.array(where, dtype=np.int64))
            self._scans.put(layout, found)
        return found


_token_layouts: dict = {}


def token_layout(vocab) -> _TokenLayout:
    """The per-token layout facts of ``vocab`` (computed once per vocabulary)."""
    key = vocab.fingerprint
    found = _token_layouts.get(key)
    if found is None:
        found = _token_layouts[key] = _TokenLayout(vocab)
    return found


class IndentedMatcher(Matcher):
    """A :class:`~gramgen.Matcher` for a grammar with lark's Python indenter (see the
    module docstring). Same interface; the chart it holds is fed the scanned text."""

    __slots__ = ("_layouts",)

    def __init__(self, compiled):
        super().__init__(compiled)
        self._layouts: list[Layout] = [INITIAL]   # after each advanced token (and at start)

    # -- state -----------------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """The scanner's state (bracket depth, indentation stack, ...)."""
        return self._layouts[-1]

    def _try(self, data: bytes) -> bool:
        """Whether ``data`` may follow (state unchanged)."""
        found = scan(self._layouts[-1], data)
        if found is None:
            return False
        n = len(self._chart)
        ok = self._feed(found[1], sign=False)
        del self._chart[n:]
        return ok

    def _try_all(self) -> np.ndarray:
        """:meth:`_try` for each of the tokens that hold a line end (``scanned`` of the
        vocabulary's layout facts), sharing the work of common prefixes: bool per token."""
        vocab = self._cg.vocab
        chart = self._chart
        facts = token_layout(vocab)
        tokens = facts.scanned
        native = self._tables.native
        if native is not None:
            # the scanned texts, tried by the native parser (sorted, prefixes shared)
            fed, where = facts.scanned_texts(self._layouts[-1])
            out = np.zeros(len(tokens), dtype=bool)
            out[where] = np.frombuffer(native.try_texts(chart, fed), dtype=bool)
            return out
        base = len(chart)
        datas = sorted((vocab.token_bytes(t), i) for i, t in enumerate(tokens.tolist()))
        out = np.zeros(len(datas), dtype=bool)
        # path[d] = (layout, chart length) after the first d bytes of the current token
        # (only as far as those bytes were allowed)
        path = [(self._layouts[-1], base)]
        prev = b""
        try:
            for data, i in datas:
                common = 0
                limit = min(len(prev), len(data), len(path) - 1)
                while common < limit and prev[common] == data[common]:
                    common += 1
                del path[common + 1:]
                del chart[path[-1][1]:]
                ok = True
                for d in range(common, len(data)):
                    found = scan(path[-1][0], data[d:d + 1])
                    if found is None or not self._feed(found[1], sign=False):
                        ok = False
                        break
                    path.append((found[0], len(chart)))
                out[i] = ok
                prev = data
        finally:
            del chart[base:]
        return out

    def is_accepting(self) -> bool:
        tail = ending(self._layouts[-1])
        if tail is None:
            return False
        if not tail:
            return self._tables.is_accepting(self._chart[-1])
        n = len(self._chart)
        try:
            return self._feed(tail) and self._tables.is_accepting(self._chart[-1])
        finally:
            del self._chart[n:]

    # -- moves -----------------------------------------------------------------------------

    def check(self, token_id: int) -> bool:
        token_id = self._token_id(token_id)
        if self._terminated:
            return False
        if token_id in self._cg.vocab.eos_token_ids:
            return self.is_accepting()
        words = self._cg.mask_cache.get(self._cache_key())
        if words is not None:
            return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)
        data = self._token_bytes(token_id)
        return bool(data) and self._try(data)

    def advance(self, token_id: int) -> None:
        token_id = self._token_id(token_id)
        position = len(self._tokens)
        if self._terminated:
            raise TokenRejected(token_id, position, "the matcher has already accepted EOS")
        if token_id in self._cg.vocab.eos_token_ids:
            if not self.is_accepting():
                raise TokenRejected(token_id, position, "EOS before the text is complete")
            self._bounds.append(len(self._chart))
            self._tokens.append(token_id)
            self._layouts.append(self._layouts[-1])
            self._terminated = True
            return
        data = self._token_bytes(token_id)
        if not data:
            raise TokenRejected(token_id, position, "special or empty tokens are never allowed")
        found = scan(self._layouts[-1], data)
        n = len(self._chart)
        if found is None:
            raise TokenRejected(token_id, position, f"{data!r} breaks the indentation or the brackets")
        if not self._feed(found[1]):
            raise TokenRejected(token_id, position, f"{data!r} leaves the language")
        self._bounds.append(n)
        self._tokens.append(token_id)
        self._layouts.append(found[0])

    def _scan(self, layout, data: bytes) -> tuple | None:
        return scan(layout, data)

    def _layout_state(self):
        return self._layouts[-1]

    def _restore(self, chart_length: int, layout) -> None:
        del self._chart[chart_length:]
        self._layouts[-1] = layout

    def rollback(self, n_tokens: int) -> None:
        super().rollback(n_tokens)
        del self._layouts[len(self._tokens) + 1:]

    def fork(self) -> "IndentedMatcher":
        other = super().fork()
        other._layouts = list(self._layouts)
        return other

    def forced_bytes(self, limit: int = 4096) -> bytes:
        """Nothing is reported as forced: what may follow depends on the indentation the
        scanner has not seen yet (a drafter then proposes nothing)."""
        return b""

    # -- masks -----------------------------------------------------------------------------

    def _cache_key(self):
        return ("indented", self._chart[-1].sig, self._layouts[-1])

    def _words(self, limit: int | None = None) -> np.ndarray:
        """The mask, combined from the chart's masks after each indentation's markers;
        always complete (a work ``limit`` is not applied here: partial masks of several
        charts are not combined)."""
        cg = self._cg
        if self._terminated:
            return np.zeros(bitmask.n_words(cg.vocab_size), dtype=np.uint32)
        key = self._cache_key()
        words = cg.mask_cache.get(key)
        if words is None:
            words = self._layout_words()
            cg.mask_cache.put(key, words)
        return words

    def _chart_words(self, markers: bytes = b"") -> np.ndarray | None:
        """The chart's own mask after ``markers`` (None when it refuses them)."""
        n = len(self._chart)
        if markers and not self._feed(markers):
            return None
        try:
            return Matcher._words(self).copy()
        finally:
            del self._chart[n:]

    def _layout_words(self) -> np.ndarray:
        facts = token_layout(self._cg.vocab)
        layout = self._layouts[-1]
        words = self._chart_words()
        if layout[0] == HELD:
            # the line starts at the first token byte after its leading spaces: group the
            # tokens by what that indentation decides, each group masked after its markers
            starts = facts.lead_kind == 2
            widths = layout[2] + facts.lead_width[starts]
            ids = np.flatnonzero(starts)
            allowed = bitmask.unpack(words, self._cg.vocab_size).copy()
            allowed[ids] = False
            for width in np.unique(widths):
                group = ids[widths == width]
                found = _dedents(int(width), layout[3])
                if found is None:
                    continue
                group_words = words if not found[0] else self._chart_words(found[0])
                if group_words is None:
                    continue
                allowed[group] = bitmask.unpack(group_words, self._cg.vocab_size)[group]
            words = bitmask.pack(allowed)
        scanned = facts.scanned
        if scanned.size:
            allowed = bitmask.unpack(words, self._cg.vocab_size).copy()
            allowed[scanned] = self._try_all()
            words = bitmask.pack(allowed)
        words = words & facts.no_marker_words
        accepting = self.is_accepting()   # EOS: where the text may end, not the chart
        for eos in self._cg.vocab.eos_token_ids:
            if 0 <= eos < self._cg.vocab_size:
                bit = np.uint32(1 << (eos & 31))
                words[eos >> 5] = (words[eos >> 5] | bit) if accepting else (words[eos >> 5] & ~bit)
        return words
