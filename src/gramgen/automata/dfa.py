"""Lexeme regexes (:mod:`gramgen.grammar.ir`) compiled to minimal, trimmed byte DFAs.

Pipeline: Thompson NFA over bytes (character classes enter as small UTF-8 automata, see
:mod:`.utf8`) -> subset construction over byte equivalence classes -> trim -> Moore/Hopcroft
minimization -> canonical renumbering. The result is *trimmed*: every state is reachable
from the start and can reach acceptance, so "the DFA has a state after these bytes" means
"these bytes are a viable prefix", which the parser relies on.

Everything after the NFA runs in the optional C extension ``_dfabuild`` when it is built
(the same function, ~50x faster: a JSON schema's counted strings have thousands of DFA
states); the Python functions below are the reference and the fallback
(``GRAMGEN_NATIVE=0`` selects them).
"""

from __future__ import annotations

import functools
import os
from array import array
from itertools import chain
from collections import deque
from typing import Iterable, Iterator

import numpy as np

from .._lru import SizedLRU, cleared_with_all
from ..errors import CompileLimitError, GrammarError
from ..grammar.ir import (CONSTANT_LEXEMES, EMPTY, WITHOUT_PREFIXES, Alt, Automaton, ByteRanges, CharRanges,
                          GrammarIR, Regex, Repeat, Rule, Seq, frozen_key, normalize_ranges)
from ..grammar.cpdfa import words_dfa
from ..grammar.split import split_lexemes
from .utf8 import EXIT, utf8_automaton

try:
    from . import _dfabuild
except ImportError:  # built without a C compiler: the Python pipeline below
    _dfabuild = None

#: whether :func:`compile_regex` determinizes and minimizes natively
NATIVE = _dfabuild is not None and os.environ.get("GRAMGEN_NATIVE", "1") != "0"


def regex_key(rx: Regex, memo: dict | None = None) -> tuple:
    """:func:`gramgen.grammar.ir.frozen_key` (an equal tuple), in C when the native builder
    is there: keying the lexemes of a compile in Python took a tenth of it."""
    if NATIVE:
        return _dfabuild.frozen_key(rx, memo, Regex)
    return frozen_key(rx, memo)


#: the classes of a grammar's immutable trees: regex nodes and rules
_TREE_TYPES = (Seq, CharRanges, ByteRanges, Alt, Repeat, Automaton, Rule)


def untrack_trees(*irs: GrammarIR) -> int:
    """Take the rules (and their tuple) and lexeme regexes of ``irs`` (and the tuples and nodes inside them)
    out of the cyclic garbage collector's lists, in C; how many objects that was (0
    without the native builder).

    A compiled grammar keeps its grammar: for a large JSON Schema, tens of thousands of
    nodes, which every full collection walked, inside whichever mask it fell in (10-16 ms
    in the bench for one schema whose grammar held ~19,000 of them). The trees are immutable and built bottom-up, so they cannot
    form a reference cycle: refcounting alone frees them, as it does every untracked
    object (what they hold stays alive through their references)."""
    roots: list = []
    for ir in irs:
        roots.append(ir.rules)   # (the tuple too: the collector keeps a tuple of rules tracked)
        roots.extend(ir.lexemes.values())
    return untrack(roots, _TREE_TYPES)


def untrack(objects: list, types: tuple = ()) -> int:
    """Take ``objects``, and what they reach through exact tuples and instances of exactly
    the classes ``types``, out of the cyclic collector's lists now, in C
    (``_dfabuild.untrack``); how many objects that was (0 without the native builder).
    Only for what holds nothing that could reach it back: immutable trees, tuples of
    atoms. (For fresh tuples of atoms the collector would do it itself, but only in the
    first collection that sees them, walking each item: 9 ms inside some mask for the
    parser tables of a large grammar, eight tuples of 105,000 items.)"""
    return 0 if _dfabuild is None else _dfabuild.untrack(objects, types)


NFA_STATES_PER_DFA_STATE = 20
"""The NFA may have up to ``max(100_000, 20 * max_states)`` states before we give up."""

_Edge = tuple[int, int, int]


class _Rows(dict):
    """State -> its row of ``transitions`` as a tuple of ints, made when first asked for.

    Scalar stepping (``rows[q][byte]``) through tuples is several times faster than
    indexing numpy arrays, but converting every row up front cost more than building the
    DFA (a JSON schema's counted strings have thousands of states, most never visited).
    A dict with ``__missing__``, so a row already made costs one C-level lookup; to its
    readers it is a read-only sequence of rows (length, iteration and equality as a list).
    """

    __slots__ = ("_table",)

    def __init__(self, table: np.ndarray):
        super().__init__()
        self._table = table

    def __missing__(self, state: int) -> tuple[int, ...]:
        if not 0 <= state < len(self._table):
            raise IndexError(f"no DFA state {state}")
        # (a tuple of ints: the cyclic collector stops tracking it, where it would walk
        # a list's 256 items at every full collection)
        row = tuple(self._table[state].tolist())
        self[state] = row
        return row

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self):
        return (self[q] for q in range(len(self._table)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Rows, list)):
            return len(self) == len(other) and all(tuple(a) == tuple(b) for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} DFA rows>"


class _FirstBytes(_Rows):
    """State -> the bytes that keep the DFA alive from it, as an int bitmask (bit b set
    iff ``transitions[state, b] >= 0``), made on first use like :class:`_Rows`."""

    __slots__ = ()

    def __missing__(self, state: int) -> int:
        if not 0 <= state < len(self._table):
            raise IndexError(f"no DFA state {state}")
        bits = np.packbits(self._table[state] >= 0, bitorder="little")
        mask = self[state] = int.from_bytes(bits.tobytes(), "little")
        return mask


class ByteDFA:
    """An immutable, trimmed, minimal DFA over bytes; state 0 is the start.

    ``transitions[s, b]`` is the next state or -1 (no viable continuation). ``rows[s]`` is
    the same row as a Python list (made on first use, see :class:`_Rows`) because scalar
    stepping through lists is several times faster than indexing numpy arrays;
    ``first_bytes[s]`` is the int bitmask of the bytes defined from ``s``. Treat both as
    read-only.
    """

    __slots__ = ("transitions", "accepting", "rows", "first_bytes", "n_states", "_sink", "_classes")

    transitions: np.ndarray
    accepting: np.ndarray
    rows: _Rows
    first_bytes: _FirstBytes
    n_states: int

    def __init__(self, transitions: np.ndarray, accepting: np.ndarray):
        transitions = np.array(transitions, dtype=np.int32).reshape(-1, 256)  # own copies
        accepting = np.array(accepting, dtype=bool).reshape(-1)
        if len(accepting) != len(transitions):
            raise ValueError("transitions and accepting disagree on the number of states")
        transitions.flags.writeable = False
        accepting.flags.writeable = False
        self._init(transitions, accepting, None)

    @classmethod
    def _adopt(cls, transitions: np.ndarray, accepting: np.ndarray, sink,
               classes: np.ndarray | None = None) -> "ByteDFA":
        """A DFA over arrays the caller hands over (read-only, int32 ``[n, 256]``, bool
        ``[n]``), without the defensive copies; ``sink`` is :meth:`sink_table` and
        ``classes`` :meth:`byte_classes` (or a finer partition) if known."""
        if transitions.flags.writeable or accepting.flags.writeable:
            raise ValueError("adopted arrays must be read-only")
        self = object.__new__(cls)
        self._init(transitions, accepting, sink, classes)
        return self

    def _init(self, transitions: np.ndarray, accepting: np.ndarray, sink, classes=None) -> None:
        set_ = object.__setattr__
        set_(self, "transitions", transitions)
        set_(self, "accepting", accepting)
        set_(self, "rows", _Rows(transitions))
        set_(self, "first_bytes", _FirstBytes(transitions))
        set_(self, "n_states", len(accepting))
        set_(self, "_sink", sink)
        set_(self, "_classes", classes)

    def sink_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The table with an explicit sink state (index ``n``, last) in place of -1, and
        the accepting flags with the sink's (False): the form the vocabulary kernels
        take. Made once per DFA (shared by every grammar that reuses it)."""
        sink = self._sink
        if sink is None:
            n = self.n_states
            table = np.empty((n + 1, 256), dtype=np.int32)
            table[:n] = np.where(self.transitions < 0, n, self.transitions)
            table[n] = n
            acc = np.zeros(n + 1, dtype=bool)
            acc[:n] = self.accepting
            table.flags.writeable = False
            acc.flags.writeable = False
            sink = (table, acc)
            object.__setattr__(self, "_sink", sink)
        return sink

    def byte_classes(self) -> np.ndarray:
        """uint8[256]: a class per byte such that bytes of one class lead every state to
        the same state (equal columns of the table; possibly finer, as the native
        builder's classes of its NFA). Made once per DFA."""
        classes = self._classes
        if classes is None:
            classes = _column_classes(self.transitions)
            classes.flags.writeable = False
            object.__setattr__(self, "_classes", classes)
        return classes

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ByteDFA is immutable")

    def agreement_depth(self, q1: int, q2: int, cap: int, max_pairs: int = 4096,
                        other: "ByteDFA | None" = None, probe: bytes | None = None) -> int:
        """The largest ``d <= cap`` such that state ``q1`` and state ``q2`` of ``other``
        (default: this DFA) agree on every byte string of at most ``d`` bytes (both dead
        after it, or both alive and equally accepting).

        Two such states classify every token of at most ``d`` bytes alike, so the
        classification of one serves the other for those (the states of a counted
        repeat differ only in how much is left, far beyond most tokens; the bodies of two
        strings in different lexemes agree until they end). Pairs of states are explored
        breadth-first; after ``max_pairs`` of them the depth verified so far is the
        answer (smaller is always sound). ``probe``: the bytes to try, one per class of
        bytes that both DFAs treat alike (:func:`probe_bytes`); default all 256.
        """
        other = self if other is None else other
        if not 0 <= q1 < self.n_states:
            raise ValueError(f"no DFA state {q1}")
        if not 0 <= q2 < other.n_states:
            raise ValueError(f"no DFA state {q2}")
        t1, a1 = self.sink_table()
        t2, a2 = other.sink_table()
        if NATIVE:
            if probe is None:
                return _dfabuild.agreement_depth(t1, a1, int(q1), t2, a2, int(q2), int(cap), int(max_pairs))
            return _dfabuild.agreement_depth(t1, a1, int(q1), t2, a2, int(q2), int(cap), int(max_pairs), probe)
        return _agreement_depth_numpy(t1, a1, q1, t2, a2, q2, cap, max_pairs, probe)

    def __reduce__(self):
        return (ByteDFA, (self.transitions, self.accepting))

    def __repr__(self) -> str:
        return f"ByteDFA({self.n_states} states, nullable={self.nullable})"

    def run(self, data: bytes, state: int = 0) -> int:
        """The state after reading ``data`` from ``state``, or -1 once no prefix is viable."""
        if state < 0 or state >= self.n_states:
            return -1
        rows = self.rows
        for b in data:
            state = rows[state][b]
            if state < 0:
                return -1
        return state

    def matches(self, data: bytes) -> bool:
        s = self.run(data)
        return s >= 0 and bool(self.accepting[s])

    def is_live_prefix(self, data: bytes) -> bool:
        """True when some continuation of ``data`` (possibly empty) is accepted."""
        return self.run(data) >= 0

    @property
    def nullable(self) -> bool:
        return self.n_states > 0 and bool(self.accepting[0])

    @property
    def is_empty(self) -> bool:
        return self.n_states == 0


#: compiled DFAs kept for reuse, by (the regex's frozen_key, max_states), up to this many table bytes in all:
#: the lexemes of one schema repeat (the same bounded string under several properties) and
#: schemas compiled in one process share most of theirs (strings, numbers, formats)
DFA_CACHE_BYTES = 64 << 20
_cache: SizedLRU[ByteDFA] = SizedLRU(DFA_CACHE_BYTES, lambda d: d.transitions.nbytes)


def clear_cache() -> None:
    """Forget the DFAs kept for reuse (benchmarks of cold compiles; memory)."""
    _cache.clear()


#: the DFAs of standard lexemes, by the same key as :data:`_cache`, kept for the process's
#: life: the values and punctuation that every JSON Schema grammar of a layout shares,
#: registered once per layout from fixed schemas (``runtime.json_standard``), never from a
#: user's grammar (the frontends' constants are kept apart: :data:`_constants`);
#: :func:`clear_cache` and ``gramgen._lru.clear_all`` leave them
_standard: dict[tuple, ByteDFA] = {}
#: most standard DFAs kept, and the most states of one. At most this size a layout's ~40
#: hold ~6 MB (beside ~16 MB of the layout's classes at 128k tokens). The two largest (~900
#: states, 1.8 MB each with their sink tables) are the 64-character block of a long
#: string's count and the rest of its last block, which every string with a long
#: ``maxLength`` repeats exactly (built, they cost ~0.6 ms each a schema). Larger ones (a
#: whole string of 256 characters, 3,600 states) would add ~7 MB each for lexemes that a
#: user's schema rarely repeats exactly.
MAX_STANDARD = 512
MAX_STANDARD_STATES = 1024


def keep_standard(ir: GrammarIR, dfas: dict[str, ByteDFA], max_states: int) -> None:
    """Keep the DFAs of ``ir``'s lexemes (a grammar made from fixed schemas) for every
    later compile whose lexemes equal them, up to :data:`MAX_STANDARD` of at most
    :data:`MAX_STANDARD_STATES` states."""
    memo: dict = {}
    tails = []   # (the memo is by id: they must outlive it)
    for name, rx in ir.lexemes.items():
        if len(_standard) >= MAX_STANDARD:
            return
        dfa = dfas.get(name)
        if dfa is not None and dfa.n_states <= MAX_STANDARD_STATES:
            _standard.setdefault((regex_key(rx, memo), max_states), dfa)
        # and the DFA of what follows its literal prefix: a user's key of that value type
        # is a chain of states before it (see compile_regexes)
        split = literal_prefix(rx)
        if split is not None:
            tails.append(split[1])
            key = (regex_key(split[1], memo), max_states)
            if key not in _standard:
                try:
                    rest = _compile_regex(split[1], max_states)
                except (CompileLimitError, GrammarError):
                    continue
                if rest.n_states <= MAX_STANDARD_STATES:
                    _standard[key] = rest


def _kept(key: tuple) -> ByteDFA | None:
    """The DFA kept under ``key``: a standard one, else one in the cache."""
    found = _standard.get(key)
    return found if found is not None else _cache.get(key)


def compile_regex(rx: Regex, *, max_states: int = 10_000) -> ByteDFA:
    """The minimal trimmed byte DFA of ``rx``; identical input gives identical arrays.

    Raises :class:`CompileLimitError` when the NFA or the determinized automaton would
    exceed its budget (``max_states`` bounds the automaton *before* minimization, which
    bounds the work, not just the result). DFAs are immutable, so equal regexes share
    one (a bounded cache, :data:`DFA_CACHE_BYTES`).
    """
    return next(compile_regexes([rx], max_states=max_states))


def compile_regexes(rxs: Iterable[Regex], *, max_states: int = 10_000) -> Iterator[ByteDFA]:
    """:func:`compile_regex` of each regex in turn (the lexemes of one grammar). The
    native builder reads them all from one program, so that a subtree they share (the
    JSON string body, whitespace, a format) is serialized once.

    A regex that starts with single characters (a JSON key and its quotes, a keyword) is
    a chain of states before the DFA of the rest (:func:`with_prefix`) where that DFA is
    kept already (the standard ones: a key of a standard value type) or where another
    regex of the list shares that rest (the properties of one type): the rest is built
    once, each key costs a chain."""
    program = _Program() if NATIVE else None
    rxs = list(rxs)   # (the program and the memo refer to nodes by id(): they outlive both)
    memo: dict = {}   # (frozen keys of shared subtrees)
    rest_rxs = []     # (the rests, made here, kept as long as rxs for the same reason)
    keys: list = [None] * len(rxs)
    kept: list = [None] * len(rxs)   # (the standard DFAs found: each key hashed once for them)
    rests: list = [None] * len(rxs)
    shared: dict = {}
    for i, rx in enumerate(rxs):
        try:
            keys[i] = key = (regex_key(rx, memo), max_states)
        except TypeError:
            continue   # (raised again below, in its turn)
        kept[i] = _standard.get(key)
        if kept[i] is not None:
            continue
        split = literal_prefix(rx)
        if split is not None:
            rest_rxs.append(split[1])
            try:
                rest_key = (regex_key(split[1], memo), max_states)
            except TypeError:
                continue
            rests[i] = (split[0], split[1], rest_key)
            shared[rest_key] = shared.get(rest_key, 0) + 1
    for i, rx in enumerate(rxs):
        key = keys[i] if keys[i] is not None else (regex_key(rx, memo), max_states)
        found = kept[i] if kept[i] is not None else _cache.get(key)
        if found is None:
            rest = rests[i]
            if rest is not None:
                data, rest_rx, rest_key = rest
                rest_dfa = _kept(rest_key)
                if rest_dfa is None and shared[rest_key] > 1:
                    try:
                        rest_dfa = _compile_regex(rest_rx, max_states, program=program)
                    except (CompileLimitError, GrammarError):
                        pass   # (the builder decides for the whole regex)
                    else:
                        _cache.put(rest_key, rest_dfa)
                if rest_dfa is not None:
                    found = with_prefix(data, rest_dfa, max_states)
            if found is None:
                found = _compile_regex(rx, max_states, program=program)
            _cache.put(key, found)
        yield found


#: a character repeated more than this many times ends a literal prefix
MAX_LITERAL_REPEAT = 4096


def _repeated_literal_bytes(item: Regex) -> bytes | None:
    """:func:`_literal_bytes`, or for a character repeated a fixed number of times (``ll``,
    which ``seq`` merges into ``l{2}``), its bytes that many times (what a literal prefix
    reads; the program encoder keeps such a repeat a node)."""
    if item.__class__ is Repeat:
        times = item.min
        if times.__class__ is not int or item.max.__class__ is not int or item.max != times \
                or not 1 <= times <= MAX_LITERAL_REPEAT:
            return None
        one = _literal_bytes(item.item)
        return None if one is None else one * times
    return _literal_bytes(item)


def _literal_bytes(item: Regex) -> bytes | None:
    """The UTF-8 bytes of ``item`` when it is one character or one byte (a character of a
    literal), else None (a class, another node, a surrogate, a byte out of range)."""
    cls = item.__class__
    if cls is not CharRanges and cls is not ByteRanges:
        return None
    ranges = item.ranges
    if len(ranges) != 1:
        return None
    lo, hi = ranges[0]
    if lo != hi:
        return None
    if cls is ByteRanges:
        return bytes((lo,)) if 0 <= lo <= 255 else None
    if 0 <= lo <= 0x10FFFF and not 0xD800 <= lo <= 0xDFFF:
        return chr(lo).encode()
    return None


def literal_prefix(rx: Regex) -> tuple[bytes, Regex] | None:
    """``(data, tail)`` when ``rx`` is a concatenation that starts with single characters
    (a JSON key and its quotes, a keyword): their UTF-8 bytes and the regex of the rest
    (``EMPTY`` when nothing is left); None otherwise."""
    if rx.__class__ is not Seq:
        return None
    items = rx.items
    if NATIVE and items.__class__ is tuple:
        data, k = _dfabuild.literal_run(items, CharRanges, ByteRanges, Repeat)
    else:
        data, k = bytearray(), 0
        for item in items:
            one = _repeated_literal_bytes(item)
            if one is None:
                break
            data += one
            k += 1
    if not data:
        return None
    rest = items[k:]
    return bytes(data), (EMPTY if not rest else rest[0] if len(rest) == 1 else Seq(rest))


def with_prefix(data: bytes, tail: ByteDFA, max_states: int = 10_000) -> ByteDFA | None:
    """The minimal DFA of ``data`` followed by the language of ``tail`` (a minimal DFA,
    states numbered breadth-first as the builder does): a chain of ``len(data)`` states
    before ``tail``'s, which is what the builder gives, numbering included. None where
    that is not minimal (a state of ``tail`` that, not accepting, has the last byte of
    ``data`` as its only way on, into ``tail``'s start: then the chain's last state
    equals it), where ``tail`` or ``data`` is empty, or where the result has more than
    ``max_states`` states.

    The chain's states are pairwise distinct (their shortest words differ in length), and
    one of them can only equal a state of ``tail`` if the next one does too, down to the
    last, so that check suffices."""
    m, n = len(data), tail.n_states
    if not m or n == 0 or m + n > max_states:
        return None
    if NATIVE:
        made = _dfabuild.with_prefix(bytes(data), tail.sink_table()[0], tail.accepting, tail.byte_classes(),
                                     int(max_states))
        if made is None:
            return None
        trans, sink, accepting, total, classes = made
        return _adopt_native(trans, sink, accepting, total, classes)
    trans = tail.transitions
    into_start = (trans[:, data[-1]] == 0) & ~tail.accepting
    if into_start.any() and ((trans[into_start] >= 0).sum(axis=1) == 1).any():
        return None
    total = m + n
    at = np.frombuffer(bytes(data), dtype=np.uint8)
    chain = np.arange(m, dtype=np.intp)
    table = np.full((total, 256), -1, dtype=np.int32)
    table[chain, at] = chain + 1
    np.add(trans, m, out=table[m:], where=trans >= 0)
    accepting = np.zeros(total, dtype=bool)
    accepting[m:] = tail.accepting
    table.flags.writeable = False
    accepting.flags.writeable = False
    return ByteDFA._adopt(table, accepting, None, None)


#: rounds of :func:`compile_lexemes` splitting lexemes that are still too big
MAX_SPLIT_ROUNDS = 64


def compile_lexemes(ir: GrammarIR, *, max_states: int = 10_000) -> tuple[GrammarIR, dict[str, ByteDFA]]:
    """The DFA of every lexeme of ``ir``, and the grammar they belong to: ``ir`` itself, or,
    where a lexeme's DFA would exceed ``max_states`` (a long counted repeat), ``ir`` with
    that lexeme rewritten as rules over smaller ones (:func:`gramgen.grammar.split.split_lexemes`).

    Raises :class:`GrammarError` naming a lexeme that cannot be compiled, and
    :class:`CompileLimitError` when a too-big lexeme cannot be split (an ignored lexeme,
    a single character class)."""
    dfas: dict[str, ByteDFA] = {}
    pending = list(ir.lexemes)
    recipes = ir.meta.get(WITHOUT_PREFIXES)
    if recipes:
        pending = [name for name in pending if not _from_recipe(ir, name, recipes.get(name), max_states, dfas)]
    constants = ir.meta.get(CONSTANT_LEXEMES)
    if constants:
        pending = [name for name in pending if not _from_constants(ir, name, constants.get(name), max_states, dfas)]
    for _ in range(MAX_SPLIT_ROUNDS):
        too_big: dict[str, CompileLimitError] = {}
        built = compile_regexes([ir.lexemes[n] for n in pending], max_states=max_states)
        for i, name in enumerate(pending):
            try:
                dfas[name] = next(built)
            except CompileLimitError as exc:
                too_big[name] = exc
                # a generator that raised is finished: go on with the rest
                built = compile_regexes([ir.lexemes[n] for n in pending[i + 1:]], max_states=max_states)
            except GrammarError as exc:
                raise GrammarError(f"lexeme {name!r}: {exc.message}", exc.line, exc.column,
                                   exc.source or ir.source) from exc
        if not too_big:
            _keep_constants(ir, dfas, max_states)
            return ir, dfas
        try:
            ir, pending = split_lexemes(ir, too_big)
        except CompileLimitError as exc:
            name, first = next(iter(too_big.items()))
            raise CompileLimitError(f"lexeme {name!r}: {first}; {exc}") from None
    raise CompileLimitError(f"lexemes still too big after {MAX_SPLIT_ROUNDS} rounds of splitting: "
                            f"{', '.join(too_big)}")


def _keep_constants(ir: GrammarIR, dfas: dict[str, ByteDFA], max_states: int) -> None:
    """Keep the DFAs of ``ir``'s lexemes that are constants of its frontend
    (``ir.meta[CONSTANT_LEXEMES]``: a JSON Schema format's spelling, 0.2-30 ms to build,
    ~8 MB for every format's), up to :data:`MAX_STANDARD_STATES` states each, in
    :data:`_constants`."""
    constants = ir.meta.get(CONSTANT_LEXEMES)
    if not constants:
        return
    for name, rx in constants.items():
        dfa = dfas.get(name)
        if dfa is None or ir.lexemes.get(name) is not rx or dfa.n_states > MAX_STANDARD_STATES \
                or len(_constants) >= MAX_STANDARD:
            continue
        _constants.setdefault((id(rx), max_states), (rx, dfa))


def _from_constants(ir: GrammarIR, name: str, rx: Regex | None, max_states: int, dfas: dict) -> bool:
    """The DFA of lexeme ``name`` into ``dfas`` where it is a frontend's constant whose DFA
    :data:`_constants` keeps; False otherwise."""
    if rx is None or ir.lexemes[name] is not rx:
        return False
    found = _constants.get((id(rx), max_states))
    if found is None or found[0] is not rx:
        return False
    dfas[name] = found[1]
    return True


#: (id of a frontend's constant regex, max_states) -> (the regex, its DFA), kept for the
#: process's life as :data:`_standard` is (see :data:`~gramgen.grammar.ir.CONSTANT_LEXEMES`):
#: by the regex object, not its key (the key of a format's spelling took 1 ms to make)
_constants: dict[tuple[int, int], tuple[Regex, ByteDFA]] = {}


def _no_words() -> ByteDFA:
    """The DFA of the empty language: no states."""
    return ByteDFA(np.zeros((0, 256), np.int32), np.zeros(0, bool))


def _from_recipe(ir: GrammarIR, name: str, recipe: tuple | None, max_states: int, dfas: dict) -> bool:
    """Build lexeme ``name`` as the words of another regex without some prefixes, as
    ``recipe`` (``ir.meta[WITHOUT_PREFIXES][name]``) says, into ``dfas``; False where there
    is no such recipe for the lexeme as it is, or the result would be too big (its regex
    is then built, or split, as any other)."""
    if recipe is None:
        return False
    rx, base, prefixes = recipe
    if ir.lexemes[name] is not rx:
        return False   # (rewritten since the hint was made)
    try:
        base_key = (regex_key(base), max_states)
    except TypeError:
        return False
    key = ("without", base_key, prefixes)
    found = _cache.get(key)
    if found is None:
        try:
            base_dfa = _kept(base_key)
            if base_dfa is None:
                base_dfa = _compile_regex(base, max_states)
                _cache.put(base_key, base_dfa)
            found = without_prefixes(base_dfa, prefixes, max_states)
        except (CompileLimitError, GrammarError):
            return False
        _cache.put(key, found)
    dfas[name] = found
    return True


def without_prefixes(dfa: ByteDFA, prefixes, max_states: int = 10_000) -> ByteDFA:
    """The minimal DFA of the words of ``dfa`` that start with none of ``prefixes`` (byte
    strings): ``dfa`` with the paths of the prefixes' trie cut where one ends (a JSON key
    other than some names: any key, but not a name's spelling and its closing quote), in
    C where the native builder is there. :class:`CompileLimitError` past ``max_states``
    states in the product."""
    prefixes = [bytes(p) for p in prefixes]
    if NATIVE:
        sink, acc = dfa.sink_table()
        status, trans, sink_t, accepting, n_states, classes = _dfabuild.without_prefixes(
            sink, acc[:dfa.n_states], dfa.byte_classes(), prefixes, int(max_states))
        if status == 1:
            raise CompileLimitError(f"DFA exceeds max_states={max_states}")
        if not n_states:
            return _no_words()
        return _adopt_native(trans, sink_t, accepting, n_states, classes)
    return _without_prefixes_py(dfa, prefixes, max_states)


def _without_prefixes_py(dfa: ByteDFA, prefixes: list[bytes], max_states: int) -> ByteDFA:
    """:func:`without_prefixes` in Python (the reference: the same tables)."""
    n = dfa.n_states
    # the prefixes' trie, made by the code-point one (a byte read as the code point of its value)
    trie = words_dfa(p.decode("latin-1") for p in prefixes)
    children = [{c: t for c, _, t in out} for out in trie.edges] or [{}]
    ends = list(trie.accepting) or [False]
    if not n or ends[0]:
        return _no_words()
    table = dfa.transitions.tolist()
    # the trie nodes on live paths first (each with the one state its path reaches), then
    # the DFA's states
    node_state, ids, stack = {0: 0}, {}, [0]
    while stack:
        t = stack.pop()
        ids[t] = len(ids)
        for b, c in children[t].items():
            q = table[node_state[t]][b]
            if q >= 0 and not ends[c]:
                node_state[c] = q
                stack.append(c)
    m = len(ids)
    if m + n > max_states:
        raise CompileLimitError(f"DFA exceeds max_states={max_states}")
    trans: list = [None] * m + [[q + m if q >= 0 else -1 for q in row] for row in table]   # (nodes below)
    accepting = [False] * m + [bool(a) for a in dfa.accepting]
    for t, i in ids.items():
        q = node_state[t]
        trans[i] = [r + m if r >= 0 else -1 for r in table[q]]
        for b, c in children[t].items():
            trans[i][b] = ids.get(c, -1)
        accepting[i] = bool(dfa.accepting[q])
    trans, accepting = _renumber(trans, accepting)   # (what the start reaches)
    trans, accepting = _trim(trans, accepting)
    if not accepting:
        return _no_words()
    trans, accepting = _minimize(trans, accepting)
    trans, accepting = _renumber(trans, accepting)
    return ByteDFA(np.array(trans, dtype=np.int32).reshape(-1, 256), np.array(accepting, bool))


def _compile_regex(rx: Regex, max_states: int, native: bool | None = None,
                   program: _Program | None = None) -> ByteDFA:
    budget = max(100_000, NFA_STATES_PER_DFA_STATE * max_states)
    if NATIVE if native is None else native:
        # the C builder stops at the NFA budget itself, within milliseconds
        return _native_dfa(rx, budget, max_states, program)
    nfa = _NFA(budget)
    nfa.check_size(rx)
    start = nfa.state()
    final = nfa.build(rx, start)
    classes, class_of = _byte_classes(nfa.edges)
    trans, accepting = _determinize(nfa, final, class_of, max_states)
    trans, accepting = _trim(trans, accepting)
    if not accepting:
        return _no_words()
    trans, accepting = _minimize(trans, accepting)
    trans, accepting = _renumber(trans, accepting)
    table = np.array(trans, dtype=np.int32).reshape(len(trans), len(classes))
    return ByteDFA(table[:, np.array(class_of, dtype=np.intp)], np.array(accepting, bool))


def _native_dfa(rx: Regex, budget: int, max_states: int, program: _Program | None = None) -> ByteDFA:
    """Thompson NFA, determinization, trim, minimization and renumbering in C (the same
    DFA as the Python path, which the tests check). ``program``: one shared with other
    regexes (only the part reachable from this one's root is read)."""
    if _dfabuild is None:
        raise RuntimeError("gramgen's native DFA builder (gramgen.automata._dfabuild) is not built")
    if program is None:
        program = _Program()
    try:
        root = program.node(rx)
    except RecursionError:
        raise CompileLimitError("regex is nested too deeply") from None
    status, trans, sink, accepting, n_states, classes = _dfabuild.compile_program(
        program.code, root, budget, max_states, _work_budget(max_states))
    if status == 1:
        raise CompileLimitError(f"regex DFA exceeds max_states={max_states}")
    if status == 2:
        raise CompileLimitError("regex is too expensive to determinize")
    if status == 5:
        raise CompileLimitError(f"regex needs more than {budget} NFA states")
    if status == 6:
        raise CompileLimitError("regex is nested too deeply")
    if not n_states:
        return _no_words()
    return _adopt_native(trans, sink, accepting, n_states, classes)


def _adopt_native(trans: bytes, sink: bytes, accepting: bytes, n_states: int, classes: bytes | None) -> ByteDFA:
    """A DFA over the bytes that ``_dfabuild`` made (table, sink table, accepting flags with
    the sink's last, byte classes or None), as read-only views: nothing is copied again
    (arrays made straight over the bytes: this ran for every lexeme of a compile)."""
    sink_acc = np.ndarray((n_states + 1,), _BOOL, accepting)
    return ByteDFA._adopt(np.ndarray((n_states, 256), _INT32, trans), sink_acc[:n_states],
                          (np.ndarray((n_states + 1, 256), _INT32, sink), sink_acc),
                          None if classes is None else np.ndarray((256,), _UINT8, classes))


_INT32, _BOOL, _UINT8 = np.dtype(np.int32), np.dtype(bool), np.dtype(np.uint8)


def canonical_form(table: np.ndarray, acc: np.ndarray, state: int, max_states: int) -> bytes | None:
    """The future of ``state`` in a DFA in sink form (``ByteDFA.sink_table()``): its reachable
    part numbered breadth-first, as bytes; equal for two states (of any DFAs) whose futures
    are isomorphic, hence whose languages are equal. None when more than ``max_states``
    states are reachable, or without the native builder."""
    if _dfabuild is None or not NATIVE:
        return None
    return _dfabuild.canonical_form(table, acc, int(state), int(max_states))


def probe_bytes(d1: ByteDFA, d2: ByteDFA) -> bytes:
    """One byte per class of bytes that both DFAs treat alike (the smallest of each): the
    only ones :meth:`ByteDFA.agreement_depth` needs to try."""
    joint = d1.byte_classes().astype(np.int32) * 256 + d2.byte_classes()
    _, first = np.unique(joint, return_index=True)
    return bytes(np.sort(first).astype(np.uint8))


def _column_classes(table: np.ndarray) -> np.ndarray:
    """uint8[256]: bytes whose columns in ``table`` are equal share a class (numbered by
    first byte). Columns are grouped by a random linear hash, then checked."""
    if not table.shape[0]:
        return np.zeros(256, dtype=np.uint8)
    weights = np.random.default_rng(0).integers(1, 1 << 61, size=table.shape[0], dtype=np.int64)
    hashed = (table.astype(np.int64) * weights[:, None]).sum(axis=0)  # wraps: fine for a hash
    _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
    rep = first[inverse.reshape(-1)]
    if not np.array_equal(table[:, rep], table):  # a collision: group exactly
        _, first, inverse = np.unique(table.T, axis=0, return_index=True, return_inverse=True)
        rep = first[inverse.reshape(-1)]
    # number the classes in order of their first byte
    _, classes = np.unique(rep, return_inverse=True)
    return classes.reshape(-1).astype(np.uint8)


def _agreement_depth_numpy(t1: np.ndarray, a1: np.ndarray, q1: int, t2: np.ndarray, a2: np.ndarray, q2: int,
                           cap: int, max_pairs: int, probe: bytes | None = None) -> int:
    """:meth:`ByteDFA.agreement_depth` without the C extension (the same answer)."""
    if probe is not None:
        cols = np.frombuffer(probe, dtype=np.uint8).astype(np.intp)
        t1, t2 = (t1[:, cols], t2[:, cols]) if t1 is not t2 else (t1[:, cols],) * 2
    same = t1 is t2
    if same and q1 == q2:
        return cap
    sink1, sink2 = len(t1) - 1, len(t2) - 1
    frontier = [(q1, q2)]
    seen: set[tuple[int, int]] = set()
    for level in range(cap):
        nxt = []
        for a, b in frontier:
            ra, rb = t1[a], t2[b]
            dead_a, dead_b = ra == sink1, rb == sink2
            keep = ~(dead_a & dead_b)
            if same:
                keep &= ra != rb
            ra, rb, dead_a, dead_b = ra[keep], rb[keep], dead_a[keep], dead_b[keep]
            if dead_a.any() or dead_b.any() or (a1[ra] != a2[rb]).any():
                return level
            for pair in zip(ra.tolist(), rb.tolist()):
                if pair not in seen:
                    seen.add(pair)
                    nxt.append(pair)
        if not nxt:
            return cap
        if len(seen) > max_pairs:
            return level + 1
        frontier = nxt
    return cap


_NODE_TYPES = (Seq, CharRanges, ByteRanges, Alt, Repeat, Automaton)


class _Program:
    """A regex as a flat int32 program for ``_dfabuild.compile_program``: each node is a
    kind followed by its operands, referred to by its offset; a shared subtree (or an
    equal character class) is encoded once, so the program stays as small as the tree
    even where counted repeats make the NFA large."""

    BYTES, CHARS, SEQ, ALT, REPEAT, AUTOMATON, STRING = range(7)

    def __init__(self):
        self.code = array("i")
        self._by_id: dict[int, int] = {}
        self._leaves: dict[Regex, int] = {}

    def node(self, rx: Regex) -> int:
        """The offset of ``rx`` in the program, encoding it (and what it holds) first if
        it is not there yet; in C when the native builder is there (the same words)."""
        if _dfabuild is not None and NATIVE:
            return _dfabuild.encode(rx, self.code, self._by_id, self._leaves, self._leaf_words, _NODE_TYPES)
        return self.node_py(rx)

    def node_py(self, rx: Regex) -> int:
        """:meth:`node` in Python (the reference for the native encoder)."""
        at = self._by_id.get(id(rx))
        if at is not None:
            return at
        cls = rx.__class__
        if cls not in _NODE_TYPES:  # a subclass of a node type: encoded as its base
            cls = next((c for c in _NODE_TYPES if isinstance(rx, c)), None)
        if cls is Seq:
            at = self._seq(rx.items)
        elif cls is CharRanges or cls is ByteRanges:
            # leaves by value (their hash is memoized): equal classes are frequent
            # distinct objects, one per character of every literal
            try:
                at = self._leaves.get(rx)
                if at is None:
                    at = self._leaves[rx] = self._leaf(rx)
            except TypeError:  # ranges given as lists: not hashable
                at = self._leaf(rx)
        elif cls is Alt:
            node = self.node_py
            at = self._counted(self.ALT, [node(item) for item in rx.items])
        elif cls is Repeat:
            item = self.node_py(rx.item)
            at = self._emit((self.REPEAT, item, rx.min, -1 if rx.max is None else rx.max))
        elif cls is Automaton:
            labels = [(a, self.node_py(label), b) for a, label, b in rx.edges]
            accepting = list(rx.accepting)
            at = self._emit([self.AUTOMATON, rx.n_states, rx.start, len(accepting), *accepting,
                             len(labels), *chain.from_iterable(labels)])
        else:
            raise TypeError(f"not a regex node: {rx!r}")
        self._by_id[id(rx)] = at
        return at

    def _seq(self, items) -> int:
        """A concatenation; runs of single characters (property names, punctuation, enum
        values) become byte strings."""
        kids: list[int] = []
        run = bytearray()
        node = self.node_py
        for item in items:
            one = _literal_bytes(item)
            if one is not None:
                run += one
                continue
            if run:
                kids.append(self._string(run))
                run = bytearray()
            kids.append(node(item))
        if run:
            kids.append(self._string(run))
        if len(kids) == 1:
            return kids[0]
        if not kids:  # the empty concatenation: an empty string
            return self._string(run)
        return self._counted(self.SEQ, kids)

    def _string(self, data: bytearray) -> int:
        return self._counted(self.STRING, data)

    def _counted(self, kind: int, words) -> int:
        """A node of ``kind`` followed by how many words it has and those words."""
        code = self.code
        at = len(code)
        code.append(kind)
        code.append(len(words))
        code.extend(words)
        return at

    def _leaf(self, rx: CharRanges | ByteRanges) -> int:
        return self._emit(self._leaf_words(rx))

    def _leaf_words(self, rx: CharRanges | ByteRanges) -> list[int]:
        if isinstance(rx, ByteRanges):
            ranges = [(max(lo, 0), min(hi, 255)) for lo, hi in normalize_ranges(rx.ranges)]
            ranges = [r for r in ranges if r[0] <= r[1]]
            return [self.BYTES, len(ranges), *chain.from_iterable(ranges)]
        ranges = normalize_ranges(rx.ranges)   # (as it is when normal already)
        if ranges and ranges[-1][1] < 0x80 and ranges[0][0] >= 0:
            # ASCII: one state whose edges are the ranges (what utf8_automaton gives),
            # without building it (a few dozen such classes per schema: digits, hex)
            words = [self.CHARS, 1, len(ranges)]
            for lo, hi in ranges:
                words += (lo, hi, -1)
            return words
        automaton = _char_automaton(rx.ranges)
        words = [self.CHARS, len(automaton)]
        for edges in automaton:
            words.append(len(edges))
            for lo, hi, target in edges:
                words += (lo, hi, -1 if target == EXIT else target)
        return words

    def _emit(self, words: list[int]) -> int:
        at = len(self.code)
        self.code.extend(words)
        return at


def _work_budget(max_states: int) -> int:
    """Epsilon-closure steps allowed while determinizing (both implementations count them)."""
    return 500 * max(max_states, 1000)


# ---------------------------------------------------------------------------- NFA


class _NFA:
    """Thompson-style NFA: per state, epsilon targets and byte-range edges."""

    def __init__(self, budget: int):
        self.budget = budget
        self.eps: list[list[int]] = []
        self.edges: list[list[_Edge]] = []

    def state(self) -> int:
        if len(self.eps) >= self.budget:
            raise CompileLimitError(f"regex needs more than {self.budget} NFA states")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def check_size(self, rx: Regex) -> None:
        """Estimate the NFA size up front so huge counted repeats fail fast."""
        memo: dict[int, int] = {}

        def size(r: Regex) -> int:
            key = id(r)
            if key in memo:
                return memo[key]
            if isinstance(r, CharRanges):
                n = len(_char_automaton(r.ranges))
            elif isinstance(r, ByteRanges):
                n = 1
            elif isinstance(r, (Seq, Alt)):
                n = 1 + sum(size(i) for i in r.items)
            elif isinstance(r, Repeat):
                copies = r.max if r.max is not None else r.min + 1
                n = 2 + copies * (size(r.item) + 1) if copies else 1
            elif isinstance(r, Automaton):
                n = 1 + r.n_states + sum(size(label) for _, label, _ in r.edges)
            else:
                raise TypeError(f"not a regex node: {r!r}")
            memo[key] = n
            return n

        try:
            total = size(rx)
        except RecursionError:
            raise CompileLimitError("regex is nested too deeply") from None
        if total > self.budget:
            raise CompileLimitError(
                f"regex needs about {total} NFA states, more than the limit of {self.budget}")

    def build(self, rx: Regex, src: int) -> int:
        """Add ``rx`` starting at ``src``; return the state reached after matching it.

        Loops only ever return to a fresh loop-head state, so attaching several
        constructs to one source state cannot create paths the regex does not have.
        """
        if isinstance(rx, CharRanges):
            return self._chars(rx, src)
        if isinstance(rx, ByteRanges):
            dst = self.state()
            for lo, hi in normalize_ranges(rx.ranges):
                lo, hi = max(lo, 0), min(hi, 255)
                if lo <= hi:
                    self.edges[src].append((lo, hi, dst))
            return dst
        if isinstance(rx, Seq):
            for item in rx.items:
                src = self.build(item, src)
            return src
        if isinstance(rx, Alt):
            dst = self.state()
            for item in rx.items:
                self.eps[self.build(item, src)].append(dst)
            return dst
        if isinstance(rx, Repeat):
            return self._repeat(rx, src)
        if isinstance(rx, Automaton):
            return self._automaton(rx, src)
        raise TypeError(f"not a regex node: {rx!r}")

    def _chars(self, rx: CharRanges, src: int) -> int:
        automaton = _char_automaton(rx.ranges)
        dst = self.state()
        ids = [src] + [self.state() for _ in range(len(automaton) - 1)]
        for i, edges in enumerate(automaton):
            out = self.edges[ids[i]]
            for lo, hi, target in edges:
                out.append((lo, hi, dst if target == EXIT else ids[target]))
        return dst

    def _automaton(self, rx: Automaton, src: int) -> int:
        # every automaton state gets a fresh NFA state; edges enter it by epsilon so that
        # a label's own loops can never leak into another edge's path
        ids = [self.state() for _ in range(rx.n_states)]
        self.eps[src].append(ids[rx.start])
        for a, label, b in rx.edges:
            self.eps[self.build(label, ids[a])].append(ids[b])
        dst = self.state()
        for q in rx.accepting:
            self.eps[ids[q]].append(dst)
        return dst

    def _repeat(self, rx: Repeat, src: int) -> int:
        lo, hi = rx.min, rx.max
        if hi is not None and hi < lo:
            dst = self.state()  # matches nothing: an unreachable exit
            return dst
        for _ in range(lo):
            src = self.build(rx.item, src)
        if hi is None:
            head = self.state()
            self.eps[src].append(head)
            self.eps[self.build(rx.item, head)].append(head)
            return head
        if hi == lo:
            return src
        dst = self.state()
        for _ in range(hi - lo):
            self.eps[src].append(dst)
            src = self.build(rx.item, src)
        self.eps[src].append(dst)
        return dst


def _char_automaton(ranges) -> list:
    """The UTF-8 automaton of a character class (shared: lexemes repeat a few classes)."""
    try:
        return _cached_char_automaton(ranges)
    except TypeError:  # ranges given as lists: not hashable
        return utf8_automaton(normalize_ranges(ranges))


@cleared_with_all
@functools.lru_cache(maxsize=8192)
def _cached_char_automaton(ranges) -> list:
    return utf8_automaton(normalize_ranges(ranges))


def _byte_classes(edges: list[list[_Edge]]) -> tuple[list[tuple[int, int]], list[int]]:
    """Partition 0..255 into intervals that no edge distinguishes."""
    cuts = {0, 256}
    for out in edges:
        for lo, hi, _ in out:
            cuts.add(lo)
            cuts.add(hi + 1)
    bounds = sorted(cuts)
    classes = [(bounds[i], bounds[i + 1] - 1) for i in range(len(bounds) - 1)]
    class_of = [0] * 256
    for ci, (lo, hi) in enumerate(classes):
        for b in range(lo, hi + 1):
            class_of[b] = ci
    return classes, class_of


# ------------------------------------------------------------------ determinize


def _determinize(nfa: _NFA, final: int, class_of: list[int],
                 max_states: int) -> tuple[list[list[int]], list[bool]]:
    """Subset construction over byte classes; DFA states are sets of NFA states that
    have byte edges (plus the final state), which merges subsets differing only in
    epsilon-only states."""
    n_classes = max(class_of) + 1
    cedges = [[(class_of[lo], class_of[hi], t) for lo, hi, t in out] for out in nfa.edges]
    eps = nfa.eps
    ids: dict[frozenset[int], int] = {}
    order: list[frozenset[int]] = []
    closed: dict[frozenset[int], int] = {}
    work_budget = _work_budget(max_states)
    work = 0

    def state_of(seeds: Iterable[int]) -> int:
        nonlocal work
        seed_key = frozenset(seeds)
        sid = closed.get(seed_key)
        if sid is not None:
            return sid
        seen = set(seed_key)
        stack = list(seed_key)
        while stack:
            for t in eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        work += len(seen)
        if work > work_budget:
            raise CompileLimitError("regex is too expensive to determinize")
        key = frozenset(s for s in seen if cedges[s] or s == final)
        if not key:
            sid = -1
        else:
            sid = ids.get(key, -2)
            if sid == -2:
                if len(order) >= max_states:
                    raise CompileLimitError(f"regex DFA exceeds max_states={max_states}")
                sid = ids[key] = len(order)
                order.append(key)
        closed[seed_key] = sid
        return sid

    state_of([0])
    trans: list[list[int]] = []
    accepting: list[bool] = []
    i = 0
    while i < len(order):
        members = order[i]
        i += 1
        accepting.append(final in members)
        row = [-1] * n_classes
        events: list[tuple[int, int, int]] = []
        for s in members:
            for c0, c1, t in cedges[s]:
                events.append((c0, 1, t))
                events.append((c1 + 1, -1, t))
        events.sort()
        active: dict[int, int] = {}
        prev = 0
        k = 0
        while k < len(events):
            pos = events[k][0]
            if active and pos > prev:
                sid = state_of(active)
                if sid >= 0:
                    for c in range(prev, pos):
                        row[c] = sid
            while k < len(events) and events[k][0] == pos:
                _, delta, t = events[k]
                count = active.get(t, 0) + delta
                if count:
                    active[t] = count
                else:
                    del active[t]
                k += 1
            prev = pos
        trans.append(row)
    return trans, accepting


# ---------------------------------------------------------------- trim/minimize


def _trim(trans: list[list[int]], accepting: list[bool]) -> tuple[list[list[int]], list[bool]]:
    """Drop states that cannot reach acceptance (all states are already reachable)."""
    n = len(trans)
    preds: list[list[int]] = [[] for _ in range(n)]
    for s, row in enumerate(trans):
        for t in set(row):
            if t >= 0:
                preds[t].append(s)
    live = [False] * n
    queue = deque(s for s in range(n) if accepting[s])
    for s in queue:
        live[s] = True
    while queue:
        for p in preds[queue.popleft()]:
            if not live[p]:
                live[p] = True
                queue.append(p)
    if not n or not live[0]:
        return [], []
    # Keep indices (start stays 0); cut edges into dead states; unreachable dead states
    # are removed by renumbering later.
    new_trans = [[t if t >= 0 and live[t] else -1 for t in row] for row in trans]
    return new_trans, list(accepting)


MOORE_ROUNDS = 32


def _minimize(trans: list[list[int]], accepting: list[bool]) -> tuple[list[list[int]], list[bool]]:
    """The quotient by Myhill-Nerode equivalence; the start stays state 0.

    Moore's refinement, vectorized with numpy, converges in a few rounds for typical
    lexemes however wide their byte alphabet; long chains (``a{1000}``) need as many
    rounds as states, so after :data:`MOORE_ROUNDS` we finish with Hopcroft's algorithm.
    """
    block, done = _moore(trans, accepting)
    if not done:
        block = _hopcroft(trans, block)
    firsts: dict[int, int] = {}
    for s, b in enumerate(block):
        firsts.setdefault(b, s)
    order = sorted(firsts, key=firsts.__getitem__)  # block of state 0 first
    new_id = {b: i for i, b in enumerate(order)}
    out_trans = [[new_id[block[t]] if t >= 0 else -1 for t in trans[firsts[b]]] for b in order]
    return out_trans, [accepting[firsts[b]] for b in order]


def _moore(trans: list[list[int]], accepting: list[bool]) -> tuple[list[int], bool]:
    n = len(trans)
    table = np.array(trans, dtype=np.int32).reshape(n, -1)
    table[table < 0] = n  # -1 becomes an extra "block" below
    block = np.array(accepting, dtype=np.int32)
    count = len(set(accepting))
    for _ in range(MOORE_ROUNDS):
        ext = np.append(block, np.int32(-1))
        sig = np.ascontiguousarray(np.column_stack([block, ext[table]]))
        rows = sig.view(np.dtype((np.void, sig.dtype.itemsize * sig.shape[1]))).ravel()
        uniq, new = np.unique(rows, return_inverse=True)
        block = new.reshape(-1).astype(np.int32)
        if len(uniq) == count:
            return block.tolist(), True
        count = len(uniq)
    return block.tolist(), False


def _hopcroft(trans: list[list[int]], block_of: list[int]) -> list[int]:
    """Refine the partition ``block_of`` to the coarsest stable one.

    The DFA is partial (no sink), so every initial block starts in the worklist
    (Valmari & Lehtinen); splitting only follows real edges.
    """
    n = len(trans)
    inv: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s, row in enumerate(trans):
        for c, t in enumerate(row):
            if t >= 0:
                inv[t].append((c, s))
    ids = {b: i for i, b in enumerate(dict.fromkeys(block_of))}
    block_of = [ids[b] for b in block_of]
    blocks: list[set[int]] = [set() for _ in ids]
    for s, b in enumerate(block_of):
        blocks[b].add(s)
    work = set(range(len(blocks)))
    while work:
        by_class: dict[int, list[int]] = {}
        for t in blocks[work.pop()]:
            for c, s in inv[t]:
                by_class.setdefault(c, []).append(s)
        for preds in by_class.values():
            touched: dict[int, list[int]] = {}
            for s in preds:
                touched.setdefault(block_of[s], []).append(s)
            for b, members in touched.items():
                if len(members) == len(blocks[b]):
                    continue
                new = len(blocks)
                part = set(members)
                blocks[b] -= part
                blocks.append(part)
                for s in part:
                    block_of[s] = new
                if b in work:
                    work.add(new)
                else:
                    work.add(new if len(part) <= len(blocks[b]) else b)
    return block_of


def _renumber(trans: list[list[int]], accepting: list[bool]) -> tuple[list[list[int]], list[bool]]:
    """Breadth-first numbering from state 0 in byte order: a canonical form, and it
    drops states not reachable from the start."""
    new_id = {0: 0}
    order = [0]
    i = 0
    while i < len(order):
        for t in trans[order[i]]:
            if t >= 0 and t not in new_id:
                new_id[t] = len(order)
                order.append(t)
        i += 1
    return ([[new_id[t] if t >= 0 else -1 for t in trans[old]] for old in order],
            [accepting[old] for old in order])
