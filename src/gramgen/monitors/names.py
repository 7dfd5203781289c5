"""Which tokens may come next when the text must continue into one of a set of names.

A monitor that has fired knows the names valid at its trigger (``S``) and the identifier
characters typed since (``typed``). For a token ``t`` let ``s = typed + bytes(t)``; in
``"member"`` mode (after ``obj.``) the token is allowed iff

(a) ``s`` is a prefix of a name in ``S`` (the identifier is still growing), or
(b) ``s = n + r`` with ``n`` in ``S`` and ``r`` starting with a character that is not an
    identifier character (``(``, ``.``, space, ...): the identifier ended on a name and
    ``r`` is someone else's business (the grammar's, the next trigger's).

All of it is bytes: a token may end inside a UTF-8 character, and then (a) asks whether
``s`` is a byte prefix of a name's UTF-8 and (b) whether the character ``r`` begins can
still become a non-identifier character. Invalid UTF-8 reads as U+FFFD, which ends an
identifier.

Two more modes relax (a)/(b) where an identifier is optional:

* ``"optional"`` (``from m import |``): whitespace first is allowed; if an identifier
  starts it must obey (a)/(b); any other character ends the restriction;
* ``"keyword"`` (``f(x, |``): whitespace first is allowed; any identifier may be written
  (a positional argument), but one followed by ``=`` (not ``==``), directly or after
  whitespace (``name = value``; newlines too, as the call's brackets are open), must be in
  ``S``. In this mode ``typed`` holds the identifier and the whitespace written after it.

:meth:`NameSet.mask` computes a mode's mask for the whole vocabulary by walking the
token trie (the byte-sorted :class:`~gramgen.automata.token_table.TokenTable`) in lock
step with the trie of the names, so the cost is the number of (token prefix, name
prefix) pairs that exist, not the vocabulary size; masks are cached per
(``typed``, mode, token prefix).
"""

from __future__ import annotations

import bisect
import codecs
import threading
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from .._lru import LRU
from ..automata.token_table import TokenTable, token_table_for
from ..automata.utf8 import completions
from ..automata.vocabulary import Vocabulary

__all__ = ["MODES", "NameSet", "VocabIndex", "can_end_identifier", "char_class", "index_for",
           "is_identifier_char"]

#: how names restrict the text after a trigger (see the module docstring)
MODES = ("member", "optional", "keyword")
#: whitespace that "optional" and "keyword" modes let through before an identifier
WHITESPACE = b" \t\f\r\n"

_IDENT, _OTHER, _HIGH = 0, 1, 2
#: per byte: 0 an ASCII identifier character, 1 another ASCII character, 2 a byte >= 0x80
_ASCII_CLASS = np.full(256, _OTHER, dtype=np.uint8)
for _b in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_":
    _ASCII_CLASS[_b] = _IDENT
_ASCII_CLASS[0x80:] = _HIGH


@lru_cache(maxsize=65536)
def is_identifier_char(char: str) -> bool:
    """Whether ``char`` may continue a Python identifier (``str.isidentifier`` rules)."""
    return ("a" + char).isidentifier()


@lru_cache(maxsize=4096)
def can_end_identifier(pending: bytes) -> bool:
    """Whether the incomplete character ``pending`` can still become a character that is
    not an identifier character (so an identifier may end before it)."""
    return any(not is_identifier_char(c) for c in completions(pending))


def _split_char(data: bytes) -> tuple[str | None, int]:
    """(the first character of non-empty ``data``, its length in bytes; U+FFFD for invalid
    bytes, as Python's ``replace`` decoder reads them), or (None, len(data)) when
    ``data`` is a valid but incomplete character."""
    if data[0] < 0x80:
        return chr(data[0]), 1
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data[:4])
    if not text:
        return None, len(data)
    char = text[0]
    return char, (1 if char == "\ufffd" else len(char.encode("utf-8")))


def char_class(data: bytes) -> int:
    """0 if the character ``data`` starts with is an identifier character, 1 if it is not
    (or is invalid), 2 if ``data`` is an incomplete character that can become either,
    3 if it is incomplete and can only become an identifier character."""
    char, _ = _split_char(data)
    if char is None:
        if not can_end_identifier(bytes(data)):
            return 3
        return 2
    return _IDENT if is_identifier_char(char) else _OTHER


class VocabIndex:
    """What the walks need of a vocabulary, built once per vocabulary."""

    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        self.table: TokenTable = token_table_for(vocab)
        table = self.table
        self.size = vocab.size
        self.n_ranks = len(table.sorted_bytes)
        #: ranks with one of ``.(,`` strictly inside them, or a whitespace after a ``t``: a
        #: trigger can fire there with bytes of the same token after it
        mid, eq, cont = [], [], []
        for rank, data in enumerate(table.sorted_bytes):
            if any(data[i] in b".(," or (data[i] in b" \t\f" and data[i - 1] == 0x74)
                   for i in range(1, len(data) - 1)):
                mid.append(rank)
            if 0x3D in data:
                eq.append(rank)
            if 0x80 <= data[0] < 0xC0:
                cont.append(rank)
        self.mid_ranks = np.array(mid, dtype=np.int64)
        self.eq_ranks = np.array(eq, dtype=np.int64)
        #: ranks starting with a UTF-8 continuation byte (they complete a pending character)
        self.cont_ranks = np.array(cont, dtype=np.int64)
        self.eos = frozenset(vocab.eos_token_ids)
        #: token ids without a rank (special, empty): neutral for a monitor, except EOS
        ranked = np.zeros(self.size, dtype=bool)
        ranked[table.rank_to_id] = True
        self.unranked = np.flatnonzero(~ranked)

    def range(self, prefix: bytes, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
        """The ranks of the tokens that start with ``prefix`` (within ``lo:hi``)."""
        data = self.table.sorted_bytes
        hi = self.n_ranks if hi is None else hi
        start = bisect.bisect_left(data, prefix, lo, hi)
        return start, min(self.table.prefix_end(prefix, start), hi)

    def exact_end(self, lo: int, hi: int, length: int) -> int:
        """In a prefix range ``lo:hi`` of prefix length ``length``, the end of the ranks
        that are exactly the prefix (they sort first)."""
        lengths = self.table.lengths
        end = lo
        while end < hi and lengths[end] == length:
            end += 1
        return end

    def to_ids(self, by_rank: np.ndarray, neutral: bool = True) -> np.ndarray:
        """A mask by rank as a mask by token id; tokens without a rank get ``neutral``."""
        out = np.full(self.size, neutral, dtype=bool)
        out[self.table.rank_to_id] = by_rank
        return out


_INDEXES: LRU[str, VocabIndex] = LRU(8)
_INDEX_LOCK = threading.Lock()


def index_for(vocab: Vocabulary) -> VocabIndex:
    """The shared :class:`VocabIndex` of ``vocab``."""
    key = vocab.fingerprint
    with _INDEX_LOCK:
        found = _INDEXES.get(key)
        if found is None:
            found = VocabIndex(vocab)
            _INDEXES.put(key, found)
        return found


_END = -1  # key of the "a name ends here" mark in a trie node


class NameSet:
    """A set of names with its byte trie, and the masks they give per typed prefix.

    Immutable; the cached masks are shared by every sequence and monitor that meets the
    same names (see :func:`name_set`)."""

    def __init__(self, names: Iterable[str], index: VocabIndex):
        self.names = frozenset(names)
        self.index = index
        self.trie: dict = {}
        for name in self.names:
            node = self.trie
            for b in name.encode("utf-8"):
                node = node.setdefault(b, {})
            node[_END] = True
        self._masks: LRU[tuple, np.ndarray] = LRU(256)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __len__(self) -> int:
        return len(self.names)

    def node(self, typed: bytes) -> dict | None:
        """The trie node reached by ``typed`` (None: no name starts with it)."""
        node = self.trie
        for b in typed:
            node = node.get(b)
            if node is None:
                return None
        return node

    def is_prefix(self, data: bytes) -> bool:
        return self.node(data) is not None

    # -- masks -------------------------------------------------------------------------------

    def mask(self, typed: bytes, mode: str, start: bytes = b"", free_other: bool = False) -> np.ndarray:
        """The tokens that start with ``start`` and obey ``mode`` after ``typed``, by rank
        (tokens outside the ``start`` range are False). ``start`` is token bytes consumed
        before the identifier (the trigger itself, when a token carries it).
        ``free_other``: in "member" mode, a non-identifier character before the identifier
        starts lifts the restriction instead of being refused (a trigger whose names were
        never asked for: only identifiers are refused)."""
        key = (typed, mode, start, free_other)
        found = self._masks.get(key)
        if found is None:
            found = self._compute(typed, mode, start, free_other)
            found.flags.writeable = False
            self._masks.put(key, found)
        return found

    def _compute(self, typed: bytes, mode: str, start: bytes, free_other: bool) -> np.ndarray:
        index = self.index
        out = np.zeros(index.n_ranks, dtype=bool)
        if mode == "keyword":
            self._keyword(out, typed, start)
        elif typed:
            node = self.node(typed)
            if node is not None:
                self._member(out, node, start)
        else:
            self._opening(out, start, skip_space=(mode == "optional"),
                          free_other=free_other or mode == "optional")
        return out

    def _opening(self, out: np.ndarray, prefix: bytes, skip_space: bool, free_other: bool) -> None:
        """typed == b"": whitespace (if skipped), then a name by (a)/(b) or, if free, any
        non-identifier character."""
        index = self.index
        lo, hi = index.range(prefix)
        if lo == hi:
            return
        exact = index.exact_end(lo, hi, len(prefix))
        out[lo:exact] = True   # the token ends at the trigger or in the whitespace after it
        if exact == hi:
            return
        column = len(prefix)
        classes = _ASCII_CLASS[index.table.columns[column][exact:hi]]
        if free_other:
            other = classes == _OTHER
            if skip_space:
                col = index.table.columns[column][exact:hi]
                other &= ~np.isin(col, np.frombuffer(WHITESPACE, dtype=np.uint8))
            out[exact:hi] |= other
            for r in np.flatnonzero(classes == _HIGH):
                kind = char_class(index.table.sorted_bytes[exact + r][column:])
                if kind in (_OTHER, 2):
                    out[exact + r] = True
        if skip_space:
            for b in WHITESPACE:
                self._opening(out, prefix + bytes([b]), skip_space, free_other)
        self._member(out, self.trie, prefix)

    def _member(self, out: np.ndarray, node: dict, prefix: bytes) -> None:
        """Rules (a)/(b) below trie ``node``, for the tokens starting with ``prefix``."""
        index = self.index
        table = index.table
        stack = [(node, prefix, 0, index.n_ranks)]
        while stack:
            node, prefix, lo, hi = stack.pop()
            lo, hi = index.range(prefix, lo, hi)
            if lo == hi:
                continue
            exact = index.exact_end(lo, hi, len(prefix))
            out[lo:exact] = True                              # (a): still a prefix of a name
            if node.get(_END) and exact < hi:                 # (b): a name ends here
                column = len(prefix)
                classes = _ASCII_CLASS[table.columns[column][exact:hi]]
                out[exact:hi] |= classes == _OTHER
                for r in np.flatnonzero(classes == _HIGH):
                    if char_class(table.sorted_bytes[exact + r][column:]) in (_OTHER, 2):
                        out[exact + r] = True
            for b, child in node.items():
                if b != _END:
                    stack.append((child, prefix + bytes([b]), lo, hi))

    def _keyword(self, out: np.ndarray, typed: bytes, start: bytes) -> None:
        """Every token of the ``start`` range, except those that write ``ident=`` (not
        ``==``) with ``ident`` not a name."""
        index = self.index
        lo, hi = index.range(start)
        out[lo:hi] = True
        eq = index.eq_ranks
        data = index.table.sorted_bytes
        for r in eq[(eq >= lo) & (eq < hi)].tolist():
            if not keyword_allows(self.names, typed, data[r][len(start):]):
                out[r] = False


def keyword_allows(names, typed: bytes, data: bytes) -> bool:
    """Whether ``data`` after ``typed`` obeys "keyword" mode (see the module docstring):
    an identifier followed by ``=`` (and not ``==``), with or without whitespace between,
    must be in ``names``."""
    text = typed + data
    pos = 0
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    start = pos
    while pos < len(text):
        char, size = _split_char(text[pos:])
        if char is None:
            return True           # a character still being written: undecided
        if not is_identifier_char(char):
            break
        pos += size
    ident = text[start:pos]
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    if pos >= len(text) or text[pos] != 0x3D or not ident:
        return True
    if pos + 1 < len(text) and text[pos + 1] == 0x3D:
        return True               # "==": a comparison, not a keyword argument
    return ident.decode("utf-8") in names


_NAME_SETS: LRU[tuple, NameSet] = LRU(256)
_NAME_LOCK = threading.Lock()


def name_set(names: Iterable[str], vocab: Vocabulary) -> NameSet:
    """The shared :class:`NameSet` of ``names`` for ``vocab`` (its masks are cached)."""
    frozen = frozenset(names)
    key = (vocab.fingerprint, frozen)
    with _NAME_LOCK:
        found = _NAME_SETS.get(key)
        if found is None:
            found = NameSet(frozen, index_for(vocab))
            _NAME_SETS.put(key, found)
        return found
