"""Which tokens a lexeme decides on its own, from one of its DFA states.

This is XGrammar's split between context-independent and context-dependent tokens,
applied at the level of lexemes. Starting from DFA state ``q`` of a lexeme that the
parser is currently matching, a token is

* **inside** if all its bytes keep the lexeme alive: it is allowed whatever the parser
  stack holds, because a live lexeme state can always be finished and the lexeme was
  expected (every symbol of a compiled grammar is productive);
* an **exit** if the lexeme could end at some byte strictly inside the token: its rest
  must be checked against the parser, so the matcher walks these through the parser;
* otherwise **rejected** by this lexeme.

Computed once per (lexeme, state) and cached in the compiled grammar: by the native
kernel ``_tokenwalk`` (a depth-first walk over the vocabulary's trie, in C) when it was
built, else with numpy over the whole vocabulary at once (all tokens step together
through the DFA). The two give identical results; the tests compare them.
"""

from __future__ import annotations

import bisect
import os
import threading

import numpy as np

from .bitmask import count, pack, positions, set_bits, take_few
from .dfa import untrack
from .token_table import TokenTable

try:
    from . import _tokenwalk
except ImportError:  # not built (no C compiler at install, or a source checkout)
    _tokenwalk = None


#: whether :func:`classify_tokens` uses the native kernel; ``GRAMGEN_NATIVE=0`` turns it off
NATIVE = _tokenwalk is not None and os.environ.get("GRAMGEN_NATIVE", "1") != "0"


class LexemeTokens:
    """The tokens one lexeme state decides: ``inside`` (a packed uint32 mask by token id)
    and ``exits`` (the exit tokens that are not inside, packed by *rank*), ``n_exits`` of
    them.

    Each set is held packed, or as its sorted positions when it has at most
    :data:`FEW_TOKENS` members (most states: a literal, a digit, a closing quote). A packed
    set is V/8 bytes (16 KB each with a 128k vocabulary), and a state is classified where
    its first mask needs it: fresh memory, whose page faults cost more than a sparse
    state's walk. Read them with :meth:`or_inside` / :meth:`or_exits` / :meth:`exit_ranks`;
    ``inside`` and ``exits`` build the packed form. Immutable, and off the cyclic
    collector's lists (it holds arrays and ints only, so it cannot be in a cycle; a
    compiled grammar's thousands of classified states would lengthen every collection)."""

    __slots__ = ("_inside", "_exits", "n_exits", "_n_words", "_n_rank_words")

    def __init__(self, inside: np.ndarray, exits: np.ndarray, n_exits: int):
        """Both sets packed."""
        self._inside, self._exits, self.n_exits = inside, exits, int(n_exits)
        self._n_words, self._n_rank_words = inside.shape[0], exits.shape[0]
        untrack([self], (LexemeTokens,))

    @classmethod
    def held(cls, inside, exits, n_exits: int, n_words: int, n_rank_words: int) -> "LexemeTokens":
        """Each set packed (uint32 words) or as positions (int64, ascending)."""
        lt = cls.__new__(cls)
        lt._inside, lt._exits, lt.n_exits = inside, exits, int(n_exits)
        lt._n_words, lt._n_rank_words = n_words, n_rank_words
        untrack([lt], (LexemeTokens,))
        return lt

    @staticmethod
    def _packed(held: np.ndarray, n: int) -> np.ndarray:
        if held.dtype == np.uint32:
            return held
        out = np.zeros(n, dtype=np.uint32)
        set_bits(out, held)
        return out

    @property
    def inside(self) -> np.ndarray:
        return self._packed(self._inside, self._n_words)

    @property
    def exits(self) -> np.ndarray:
        return self._packed(self._exits, self._n_rank_words)

    @staticmethod
    def _or(held: np.ndarray, words: np.ndarray, within: np.ndarray | None) -> None:
        if held.dtype == np.uint32:
            if within is None:
                np.bitwise_or(words, held, out=words)
            else:
                words |= held & within
        elif held.size:
            if within is not None:
                held = held[((within[held >> 5] >> (held & 31).astype(np.uint32)) & 1) != 0]
            set_bits(words, held)

    def or_inside(self, words: np.ndarray, within: np.ndarray | None = None) -> None:
        """``words |= inside`` (``& within``, packed by id, when given), in place."""
        self._or(self._inside, words, within)

    def or_exits(self, words: np.ndarray, within: np.ndarray | None = None) -> None:
        """``words |= exits`` (``& within``, packed by rank), in place."""
        self._or(self._exits, words, within)

    def exit_ranks(self) -> np.ndarray:
        """The exit tokens' ranks, ascending (int64)."""
        if self._exits.dtype == np.uint32:
            return positions(self._exits, 32 * self._n_rank_words)
        return self._exits

    def with_exits(self, ranks: np.ndarray) -> "LexemeTokens":
        """The same inside tokens, and these exit ranks (ascending, int64) instead."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if ranks.size > FEW_TOKENS:
            packed = np.zeros(self._n_rank_words, dtype=np.uint32)
            set_bits(packed, ranks)
            ranks = packed
        return LexemeTokens.held(self._inside, ranks, ranks.size if ranks.dtype == np.int64 else count(ranks),
                                 self._n_words, self._n_rank_words)

    @property
    def nbytes(self) -> int:
        return self._inside.nbytes + self._exits.nbytes


#: a classified set of at most this many tokens is held as its positions (see LexemeTokens)
FEW_TOKENS = 512


class _Scratch(threading.local):
    """Per thread, zeroed masks to classify into (see :func:`_classify_native`)."""

    def __init__(self):
        self.masks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


_SCRATCH = _Scratch()


def _scratch(n_words: int, n_rank_words: int) -> tuple[np.ndarray, np.ndarray]:
    found = _SCRATCH.masks.get((n_words, n_rank_words))
    if found is None:
        found = _SCRATCH.masks[(n_words, n_rank_words)] = (np.zeros(n_words, dtype=np.uint32),
                                                           np.zeros(n_rank_words, dtype=np.uint32))
    return found


def _held(scratch: np.ndarray) -> np.ndarray:
    """A scratch mask's content as :class:`LexemeTokens` holds it (few: positions; else a
    packed copy), the scratch left zeroed."""
    few = take_few(scratch, FEW_TOKENS)
    if few is not None:
        return few
    out = scratch.copy()
    scratch[:] = 0
    return out


#: a state with at least this many self-looping bytes first sets aside the tokens made
#: only of those bytes (a cheap bit test per token) before running the DFA on the others
SELF_LOOP_SHORTCUT = 16


def dfa_step(table: np.ndarray, states: np.ndarray, column: np.ndarray) -> np.ndarray:
    """``table[states, column]`` for a C-contiguous ``[n, 256]`` table, as one gather on
    the flat table (about 3x faster than numpy's two-array fancy indexing)."""
    idx = np.left_shift(states, 8)
    idx |= column
    return table.ravel().take(idx)


#: a state whose live first bytes start fewer than this share of the tokens runs the DFA
#: only over those tokens (contiguous rank ranges) and builds its masks from rank lists
SPARSE_SHARE = 0.25


def classify_tokens(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int,
                    follow: np.ndarray | None = None, memo: np.ndarray | None = None) -> LexemeTokens:
    """``table``/``acc``: a DFA with its sink state last (``ByteDFA.sink_table()``); ``follow``:
    bool[256], the bytes that may come right after the lexeme ends (a token that ends the
    lexeme and continues with another byte is rejected outright); ``memo``: see
    :func:`chain_memo`."""
    if NATIVE:
        return classify_tokens_native(tt, table, acc, state, follow, memo)
    return classify_tokens_numpy(tt, table, acc, state, follow)


def single_chain(table: np.ndarray, acc: np.ndarray, state: int, max_len: int) -> tuple[bytes, int]:
    """The string a DFA (``ByteDFA.sink_table()``) reads from ``state`` while each state on
    the way takes a single byte and does not accept, at most ``max_len`` bytes, and the
    state after it (see :func:`chain_tokens`)."""
    if _tokenwalk is not None:
        return _tokenwalk.single_chain(table, _as_u8(acc), int(state), int(max_len))
    sink = table.shape[0] - 1
    rest = bytearray()
    q = int(state)
    while len(rest) < max_len and q != sink and not acc[q]:
        alive = np.flatnonzero(table[q] != sink)
        if alive.size != 1:
            break
        rest.append(int(alive[0]))
        q = int(table[q, alive[0]])
    return bytes(rest), q


def chain_tokens(tt: TokenTable, rest: bytes, table: np.ndarray, acc: np.ndarray, end: int,
                 follow: np.ndarray | None = None) -> LexemeTokens:
    """:func:`classify_tokens` for a state from which the DFA reads one string ``rest``
    (non-empty, accepting nowhere before its end) to state ``end``: the tokens inside are
    the prefixes of ``rest`` and, of those that go beyond it, what the DFA decides from
    ``end`` over their remaining bytes. The tokens that start with ``rest`` are found by
    bisection in the byte-sorted tokens and only those are walked (a property name among
    hundreds, first met together after an object's opening quote, costs a few
    bisections, not a walk of every token that starts with its first letter)."""
    if not rest:
        raise ValueError("chain_tokens needs a non-empty string")
    prefix_ids, lo, hi = prefix_span(tt, rest)
    inside = [prefix_ids]
    exits = np.zeros(0, dtype=np.int64)
    if lo < hi:
        longer = np.arange(lo, hi, dtype=np.int64)
        follows = _ALL_BYTES if follow is None else follow
        alive, may_end = run_suffixes(tt, table, acc, follows, end, longer, len(rest))
        if acc[end]:
            # the lexeme may end right after rest, before a byte that may follow it
            may_end = may_end | follows[tt.columns[len(rest)][longer]]
        inside.append(tt.rank_to_id[longer[alive]])
        exits = longer[may_end & ~alive]
    inside_a = np.sort(np.concatenate(inside)) if len(inside) > 1 else inside[0]
    n_exits = exits.size
    if inside_a.size > FEW_TOKENS:
        inside_a = LexemeTokens._packed(inside_a, tt.n_words)
    if exits.size > FEW_TOKENS:
        exits = LexemeTokens._packed(exits, tt.n_rank_words)
    return LexemeTokens.held(inside_a, exits, n_exits, tt.n_words, tt.n_rank_words)


def prefix_span(tt: TokenTable, data: bytes) -> tuple[np.ndarray, int, int]:
    """The ids of the tokens whose bytes are a prefix of ``data`` (``data`` included),
    ascending, and the ranks ``[lo, hi)`` of the longer tokens that start with ``data``:
    what :func:`chain_tokens` looks up for a key, in one descent of the byte-sorted
    tokens by the C kernel (each lookup of its own went to memory the first masks of a
    schema had not touched yet)."""
    if _tokenwalk is not None:
        ids, lo, hi = _tokenwalk.prefix_span(tt.blob, tt.offsets, data, tt.rank_to_id)
        return np.frombuffer(ids, dtype=np.int64), lo, hi
    sorted_bytes = tt.sorted_bytes
    ids = np.sort(tt.rank_to_id[tt.prefix_ranks(data)])
    lo = bisect.bisect_left(sorted_bytes, data)
    hi = tt.prefix_end(data, lo)
    while lo < hi and len(sorted_bytes[lo]) == len(data):
        lo += 1
    return ids, lo, hi


def chain_memo(table: np.ndarray) -> np.ndarray | None:
    """A buffer the native walk keeps what it learns of the states of ``table`` in (which
    bytes step each one along a chain, and how far), for later calls on the same table
    with the same token table; None without the native kernel. Threads may share it."""
    if _tokenwalk is None:
        return None
    return np.zeros(_tokenwalk.memo_size(table.shape[0]), dtype=np.uint8)


_ALL_BYTES = np.ones(256, dtype=bool)


def first_tokens(tt: TokenTable, table: np.ndarray, state: int) -> int:
    """How many tokens start with a byte that ``state`` of ``table`` (a DFA with its sink
    state last) takes: the tokens a walk from it visits at all."""
    if _tokenwalk is not None:
        return _tokenwalk.first_tokens(table, int(state), tt.first_start)
    return int(np.diff(tt.first_start)[table[state] != table.shape[0] - 1].sum())


def classify_tokens_native(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int,
                           follow: np.ndarray | None = None, memo: np.ndarray | None = None) -> LexemeTokens:
    """:func:`classify_tokens` by the C kernel (requires ``_tokenwalk``)."""
    return _classify_native(tt, table, acc, state, follow, False, memo)


def classify_tokens_excepted(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int,
                             follow: np.ndarray | None = None, memo: np.ndarray | None = None
                             ) -> LexemeTokens | None:
    """:func:`classify_tokens` when the state's chain takes all but a few tokens whole
    (a string body), which makes the classes cheap: only those few are walked (the C
    kernel's exception path). None, at the cost of a few hundred byte tests, for any
    other state, or without the native kernel."""
    if not (NATIVE and EXCEPTED) or tt.max_len >= 0xFFFF or not len(tt.sorted_bytes):
        return None
    return _classify_native(tt, table, acc, state, follow, True, memo)


def _classify_native(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int,
                     follow: np.ndarray | None, only_excepted: bool, memo: np.ndarray | None) -> LexemeTokens | None:
    if _tokenwalk is None:
        raise RuntimeError("gramgen's native kernel (gramgen.automata._tokenwalk) is not built")
    n_rank_words = tt.n_rank_words
    if not len(tt.sorted_bytes):
        return LexemeTokens(inside=np.zeros(tt.n_words, dtype=np.uint32),
                            exits=np.zeros(n_rank_words, dtype=np.uint32), n_exits=0)
    fields = _chain_fields(tt)
    if fields and EXCEPTED:  # the exception path's fields: then the flag, and the memo if kept
        fields += (only_excepted,) + (() if memo is None else (memo,))
    # classified into this thread's zeroed scratch masks, then held as LexemeTokens holds
    # them (few tokens: their positions, without touching fresh memory)
    inside, exits = _scratch(tt.n_words, n_rank_words)
    try:
        n_exits = _tokenwalk.classify(
            np.ascontiguousarray(table, dtype=np.int32), _as_u8(acc),
            _as_u8(_ALL_BYTES if follow is None else follow), int(state),
            tt.blob, tt.offsets, tt.lcp, tt.max_len, tt.first_start, tt.rank_to_id, inside, exits, *fields)
    except BaseException:
        inside[:] = 0
        exits[:] = 0
        raise
    if n_exits < 0:
        return None  # (nothing written)
    return LexemeTokens.held(_held(inside), _held(exits), n_exits, tt.n_words, n_rank_words)


#: whether :func:`classify_tokens_native` passes the fields of the exception path (a
#: state whose chain takes all but a few tokens whole walks only those; see _tokenwalk.c)
EXCEPTED = True


def _chain_fields(tt: TokenTable) -> tuple:
    """The token table's fields for the native walk's chain shortcut and exception path
    (none, which turns both off, for tokens so long that their character counts would not
    fit 16 bits)."""
    if tt.max_len >= 0xFFFF:
        return ()
    chain = (tt.char_len, tt.rest_bits, tt.rest_utf8, tt.rest_chars)
    if not EXCEPTED:
        return chain
    return chain + (tt.rare_start, tt.rare_ranks, tt.by_chars, tt.more_chars, tt.real_ids, tt.long_ids,
                    tt.long_ranks)


def classify_tokens_from(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int, follow: np.ndarray,
                         state2: int, ref: LexemeTokens) -> LexemeTokens:
    """:func:`classify_tokens` for ``state`` given ``ref``, the classes of ``state2`` of the
    same DFA: only the tokens on which the two states part ways are classified again
    (``_tokenwalk.classify_pair``). Requires the native kernel."""
    if _tokenwalk is None:
        raise RuntimeError("gramgen's native kernel (gramgen.automata._tokenwalk) is not built")
    inside, exits = ref.inside.copy(), ref.exits.copy()  # (packed copies: written below)
    if len(tt.sorted_bytes):
        _tokenwalk.classify_pair(
            np.ascontiguousarray(table, dtype=np.int32), _as_u8(acc), _as_u8(follow), int(state), int(state2),
            tt.blob, tt.offsets, tt.lcp, tt.max_len, tt.first_start, tt.rank_to_id, inside, exits)
    return LexemeTokens(inside=inside, exits=exits, n_exits=count(exits))


def classify_tokens_numpy(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int,
                          follow: np.ndarray | None = None) -> LexemeTokens:
    """:func:`classify_tokens` with numpy: every token steps through the DFA together."""
    sink = table.shape[0] - 1
    n_ranks = len(tt.sorted_bytes)
    live = np.flatnonzero(table[state] != sink)
    sizes = tt.first_start[live + 1] - tt.first_start[live]
    if sizes.sum() < SPARSE_SHARE * n_ranks:
        return _classify_sparse(tt, table, acc, state, follow, live, sizes)
    inside = np.zeros(n_ranks, dtype=bool)
    exit_flag = np.zeros(n_ranks, dtype=bool)
    idx = tt.by_length  # ranks, longest first
    loops = table[state] == state
    if loops.sum() >= SELF_LOOP_SHORTCUT:
        # tokens made only of bytes that loop on ``state`` (the body of a string) stay
        # alive and come back to it: inside, without running the DFA over them
        stay = tt.made_only_of(loops)
        inside[stay] = True
        idx = idx[~stay[idx]]
    else:
        stay = _uniform_chain(tt, table, acc, state)
        if stay is not None:
            inside[stay] = True
            idx = idx[~stay[idx]]
    ended, exiting = _walk(tt, table, acc, state, follow, idx)
    for part in ended:
        inside[part] = True
    for part in exiting:
        exit_flag[part] = True
    by_id = np.zeros(tt.vocab_size, dtype=bool)
    by_id[tt.rank_to_id[inside]] = True
    exits = exit_flag & ~inside
    return LexemeTokens(inside=pack(by_id), exits=pack(exits), n_exits=int(exits.sum()))


def _walk(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int, follow: np.ndarray | None,
          idx: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Run the DFA from ``state`` over the tokens ``idx`` (ranks, longest first), all
    positions at once. Returns the ranks alive at their end and the ranks that may end
    the lexeme before their end with a byte that can follow it, as lists of arrays."""
    sink = table.shape[0] - 1
    lengths = tt.lengths
    ended: list[np.ndarray] = []
    exiting: list[np.ndarray] = []
    st = np.full(idx.shape[0], state, dtype=np.int32)
    for pos in range(tt.max_len):
        if idx.size == 0:
            break
        st = dfa_step(table, st, tt.columns[pos][idx])
        alive = st != sink
        if not alive.all():
            idx, st = idx[alive], st[alive]
        # tokens of length pos+1 sit at the tail (lengths descend)
        k = int(np.searchsorted(-lengths[idx], -(pos + 1), side="left"))
        if k < idx.size:
            ended.append(idx[k:])
        idx, st = idx[:k], st[:k]
        if not idx.size:
            break
        ends = acc[st]
        if follow is not None:
            ends &= follow[tt.columns[pos + 1][idx]]
        if ends.any():
            exiting.append(idx[ends])
    return ended, exiting


def _uniform_chain(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int) -> np.ndarray | None:
    """The tokens decided without a DFA run from a state where many bytes ``B`` all lead
    to one next state, and from there again all to one state, and so on (a string of
    bounded length: each character advances a counter): a token made only of ``B`` bytes
    and no longer than that chain stays alive. None when there is no such chain, or when
    the lexeme could end inside it (those tokens would be exits, decided by the full run).
    """
    sink = table.shape[0] - 1
    row = table[state]
    targets, counts = np.unique(row[row != sink], return_counts=True)
    if not counts.size or counts.max() < SELF_LOOP_SHORTCUT:
        return None
    first = int(targets[np.argmax(counts)])
    chars = row == first
    chain = [first]
    while len(chain) < tt.max_len:
        nxt = table[chain[-1]][chars]
        if nxt[0] == sink or not (nxt == nxt[0]).all():
            break
        chain.append(int(nxt[0]))
    if len(chain) < 2 or acc[chain[:-1]].any():
        return None
    # chain[i] is the state after i + 1 bytes of ``chars``: tokens up to len(chain) long
    return tt.made_only_of(chars) & (tt.lengths <= len(chain))


def _classify_sparse(tt: TokenTable, table: np.ndarray, acc: np.ndarray, state: int,
                     follow: np.ndarray | None, live: np.ndarray, sizes: np.ndarray) -> LexemeTokens:
    """:func:`classify_tokens` for a state few tokens can even start from (a literal, a
    digit, a closing quote): the same walk over only the tokens whose first byte is live,
    whose ranks are contiguous runs in byte order."""
    lengths = tt.lengths
    starts = tt.first_start[live]
    total = int(sizes.sum())
    # the ranks of every run, concatenated: arange shifted by each run's start
    ranks = np.arange(total, dtype=np.int64) + np.repeat(starts - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    idx = ranks[np.argsort(-lengths[ranks], kind="stable")]  # longest first, as tt.by_length
    inside_parts, exit_parts = _walk(tt, table, acc, state, follow, idx)
    inside = np.concatenate(inside_parts) if inside_parts else np.zeros(0, dtype=np.int64)
    exits = np.concatenate(exit_parts) if exit_parts else np.zeros(0, dtype=np.int64)
    if exits.size and inside.size:
        exits = np.setdiff1d(exits, inside)
    elif exits.size:
        exits = np.unique(exits)
    by_id = np.zeros(tt.n_words, dtype=np.uint32)
    set_bits(by_id, tt.rank_to_id[inside])
    exit_words = np.zeros(tt.n_rank_words, dtype=np.uint32)
    set_bits(exit_words, exits)
    return LexemeTokens(inside=by_id, exits=exit_words, n_exits=int(exits.size))


def run_suffixes(tt: TokenTable, table: np.ndarray, acc: np.ndarray, follow: np.ndarray,
                 state: int, ranks: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Run one lexeme DFA from ``state`` over the bytes ``depth:`` of each token in ``ranks``
    (all longer than ``depth``). Returns (alive at the token's end, may end the lexeme
    before the end with a byte that can follow it), as bool arrays aligned with ``ranks``."""
    if NATIVE:
        ranks = np.ascontiguousarray(ranks, dtype=np.int64)
        alive_end = np.zeros(ranks.shape[0], dtype=np.uint8)
        may_end = np.zeros(ranks.shape[0], dtype=np.uint8)
        _tokenwalk.run_suffixes(table, _as_u8(acc), _as_u8(follow), int(state), ranks, int(depth),
                                tt.blob, tt.offsets, alive_end, may_end)
        return alive_end.view(bool), may_end.view(bool)
    return run_suffixes_numpy(tt, table, acc, follow, state, ranks, depth)


def pass_split(tt: TokenTable, dfas: list[tuple[np.ndarray, np.ndarray, np.ndarray]], starts: list[int],
               ranks: list[int], depth: int) -> tuple[list[int], list[int]] | None:
    """Run lexeme DFAs (``(table, acc, follow)``, ``ByteDFA.sink_table()`` and the bytes
    that may follow the lexeme) from ``starts`` over the bytes ``depth:`` of each token.
    Returns (the tokens no longer than ``depth`` or that keep some DFA alive to their end;
    the others that may end a lexeme before a byte that can follow it), in the order of
    ``ranks``; None without the native kernel."""
    if not NATIVE:
        return None
    return _tokenwalk.pass_split(tuple(t for t, _, _ in dfas), tuple(_as_u8(a) for _, a, _ in dfas),
                                 tuple(_as_u8(f) for _, _, f in dfas), np.array(starts, dtype=np.int32), ranks,
                                 int(depth), tt.blob, tt.offsets)


def jump_plan(tt: TokenTable, dfas: list[tuple[np.ndarray, np.ndarray]], starts: list[int], ranks,
              depth: int) -> tuple | None:
    """The tokens of ``ranks`` on which one of the lexeme DFAs (``ByteDFA.sink_table()``),
    run side by side from ``starts`` over the bytes ``depth:``, first accepts, grouped by
    that position and the state of each DFA after its byte, in ascending order of those:
    ``(position, states before it (-1: dead), byte, ranks)`` per group, the ranks sorted
    by their bytes after that one (those of the group's first token, in the order given,
    for the states and byte)."""
    if NATIVE:
        return _tokenwalk.jump_plan(tuple(t for t, _ in dfas), tuple(_as_u8(a) for _, a in dfas),
                                    np.array(starts, dtype=np.int32), ranks, int(depth), tt.blob, tt.offsets)
    return jump_plan_numpy(tt, dfas, starts, ranks, depth)


def jump_plan_numpy(tt: TokenTable, dfas: list[tuple[np.ndarray, np.ndarray]], starts: list[int], ranks,
                    depth: int) -> tuple:
    """:func:`jump_plan` with numpy."""
    arr = np.asarray(ranks, dtype=np.int64)
    pos, before = first_ends(tt, dfas, starts, arr, depth)
    sel = np.flatnonzero(pos >= 0)
    if not sel.size:
        return ()
    p_sel = pos[sel]
    byte = tt.blob[tt.offsets[arr[sel]] + p_sel].astype(np.int64)
    bef = before[sel]
    codes = np.empty((sel.size, 1 + len(dfas)), dtype=np.int64)
    codes[:, 0] = p_sel
    for i, (table, _) in enumerate(dfas):
        b_i = bef[:, i]
        after = table[np.where(b_i < 0, table.shape[0] - 1, b_i), byte]
        codes[:, 1 + i] = np.where(after == table.shape[0] - 1, -1, after)
    # one group per (position, states after its byte), by position first
    order = np.lexsort(codes.T[::-1])
    codes, members, bef, byte = codes[order], arr[sel][order], bef[order], byte[order]
    cut = np.flatnonzero((codes[1:] != codes[:-1]).any(axis=1)) + 1
    plan = []
    spell = tt.sorted_bytes
    for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), codes.shape[0]]):
        p = int(codes[lo, 0])
        group = tuple(sorted(members[lo:hi].tolist(), key=lambda r: spell[r][p + 1:]))
        plan.append((p, tuple(bef[lo].tolist()), int(byte[lo]), group))
    return tuple(plan)


def _as_u8(flags: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(flags).view(np.uint8) if flags.dtype == bool else np.ascontiguousarray(flags, np.uint8)


def first_ends(tt: TokenTable, dfas: list[tuple[np.ndarray, np.ndarray]], starts: list[int],
               ranks: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Run several lexeme DFAs (``ByteDFA.sink_table()``) side by side from
    ``starts`` over the bytes ``depth:`` of each token. Returns, per token, the first
    position whose byte takes one of them to an accepting state (-1: none before the token
    ends or all die) and int32[n, len(dfas)], the state of each before that byte (-1: dead
    by then; meaningful where the position is not -1)."""
    ranks = np.ascontiguousarray(ranks, dtype=np.int64)
    n, m = ranks.shape[0], len(dfas)
    pos = np.full(n, -1, dtype=np.int64)
    before = np.full((n, m), -1, dtype=np.int32)
    if NATIVE:
        _tokenwalk.first_ends(tuple(t for t, _ in dfas), tuple(_as_u8(a) for _, a in dfas),
                              np.array(starts, dtype=np.int32), ranks, int(depth), tt.blob, tt.offsets,
                              pos, before)
        return pos, before
    sinks = np.array([t.shape[0] - 1 for t, _ in dfas], dtype=np.int32)
    lengths = tt.lengths[ranks]
    idx = np.arange(n)
    st = np.array([starts], dtype=np.int32).repeat(n, axis=0)
    for p in range(depth, tt.max_len):
        more = lengths[idx] > p
        idx, st = idx[more], st[more]
        if not idx.size:
            break
        col = tt.columns[p][ranks[idx]]
        nxt = np.empty_like(st)
        live = np.zeros(idx.shape[0], dtype=bool)
        done = np.zeros(idx.shape[0], dtype=bool)
        for i, (table, acc) in enumerate(dfas):
            nxt[:, i] = dfa_step(table, st[:, i], col)
            alive_i = nxt[:, i] != sinks[i]
            live |= alive_i
            done |= alive_i & acc[nxt[:, i]]
        idx, st, nxt, done = idx[live], st[live], nxt[live], done[live]
        pos[idx[done]] = p
        before[idx[done]] = np.where(st[done] == sinks, -1, st[done])
        idx, st = idx[~done], nxt[~done]
    return pos, before


def run_suffixes_numpy(tt: TokenTable, table: np.ndarray, acc: np.ndarray, follow: np.ndarray,
                       state: int, ranks: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`run_suffixes` with numpy."""
    sink = table.shape[0] - 1
    n = ranks.shape[0]
    alive_end = np.zeros(n, dtype=bool)
    may_end = np.zeros(n, dtype=bool)
    pos_idx = np.arange(n)
    lengths = tt.lengths[ranks]
    st = np.full(n, state, dtype=np.int32)
    for pos in range(depth, tt.max_len):
        if not pos_idx.size:
            break
        st = dfa_step(table, st, tt.columns[pos][ranks[pos_idx]])
        live = st != sink
        if not live.all():
            pos_idx, st = pos_idx[live], st[live]
        ending = lengths[pos_idx] == pos + 1
        if ending.any():
            alive_end[pos_idx[ending]] = True
            keep = ~ending
            pos_idx, st = pos_idx[keep], st[keep]
        if not pos_idx.size:
            break
        ends = acc[st] & follow[tt.columns[pos + 1][ranks[pos_idx]]]
        may_end[pos_idx[ends]] = True
    return alive_end, may_end
