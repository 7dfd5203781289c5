"""Infilling: can a partial text, holes and all, still be completed to a word of the grammar?

A partial text is a list of *segments*: known bytes and :class:`Hole`\\ s. The texts it
stands for form a regular set (each hole reads any bytes, a bounded number of bytes, or a
number of whole vocabulary tokens), laid out as a lattice of byte positions and parsed by
Earley's algorithm over that lattice (``automata/lattice.py``). The answer is exact for
every kind of hole; a witness (one complete word filling every hole) comes with each yes.

Decoders ask the same question many times with small changes (one token placed in one
hole), so the parse of the longest shared leading part is kept and reused, and a work
budget bounds each check: running out of it answers "no" (``exhausted``), which keeps a
decoder safe (it never commits a text that cannot be completed) at the cost of a candidate.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

import numpy as np

from ..automata.lattice import ANY, EPS, LatticeParser, LexemeMoves, OutOfWork
from ..errors import ConfigurationError
from .compiled import CompiledGrammar


def _size(value, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigurationError(f"Hole {name}= takes a whole number, not {value!r}")
    if value < 0:
        raise ConfigurationError(f"Hole {name}= must not be negative (got {value})")
    return int(value)


class Hole:
    """A gap in a partial text.

    ``Hole()`` holds any bytes (any length, empty included); ``Hole(min_bytes=, max_bytes=)``
    between ``min_bytes`` and ``max_bytes`` bytes (``None``: no upper bound);
    ``Hole(tokens=n)`` exactly ``n`` non-empty vocabulary tokens (a run of ``n`` masked
    slots of a diffusion canvas); ``Hole(max_tokens=n)`` between 0 and ``n`` tokens (the
    tail of a canvas whose last slots may be EOS padding).
    """

    __slots__ = ("min_bytes", "max_bytes", "tokens", "max_tokens")

    def __init__(self, min_bytes: int = 0, max_bytes: int | None = None, *, tokens: int | None = None,
                 max_tokens: int | None = None):
        lo, hi = _size(min_bytes, "min_bytes"), _size(max_bytes, "max_bytes")
        n, m = _size(tokens, "tokens"), _size(max_tokens, "max_tokens")
        if n is not None and m is not None:
            raise ConfigurationError("give a Hole tokens= (exactly n) or max_tokens= (at most n), not both")
        if (n is not None or m is not None) and (lo != 0 or hi is not None):
            raise ConfigurationError("a Hole counts bytes (min_bytes=, max_bytes=) or tokens "
                                     "(tokens=, max_tokens=), not both")
        if hi is not None and lo > hi:
            raise ConfigurationError(f"Hole min_bytes={lo} is more than max_bytes={hi}")
        set_ = object.__setattr__
        set_(self, "min_bytes", lo)
        set_(self, "max_bytes", hi)
        set_(self, "tokens", n)
        set_(self, "max_tokens", m)

    def __setattr__(self, name, value):
        raise AttributeError("Hole is immutable")

    @property
    def counts_tokens(self) -> bool:
        return self.tokens is not None or self.max_tokens is not None

    def _key(self) -> tuple:
        return (self.min_bytes, self.max_bytes, self.tokens, self.max_tokens)

    def __eq__(self, other) -> bool:
        return isinstance(other, Hole) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("Hole",) + self._key())

    def __reduce__(self):
        return (_hole, self._key())

    def __repr__(self) -> str:
        if self.tokens is not None:
            return f"Hole(tokens={self.tokens})"
        if self.max_tokens is not None:
            return f"Hole(max_tokens={self.max_tokens})"
        args = []
        if self.min_bytes:
            args.append(f"min_bytes={self.min_bytes}")
        if self.max_bytes is not None:
            args.append(f"max_bytes={self.max_bytes}")
        return f"Hole({', '.join(args)})"


def _hole(lo, hi, n, m) -> Hole:
    return Hole(lo, hi, tokens=n, max_tokens=m)


@dataclass
class InfillResult:
    """The answer of :meth:`Infiller.check`.

    ``feasible``: some filling of every hole makes the text a word of the grammar.
    ``exhausted``: the work budget ran out first (then ``feasible`` is False: undecided,
    answered "no"). ``work``: the parser steps this check took. ``witness``: one complete
    word that fills every hole (None unless feasible); ``fillings``: what each hole holds
    in it, in order.
    """

    feasible: bool
    exhausted: bool = False
    work: int = 0
    _spell: object = field(default=None, repr=False, compare=False)
    _spelled: tuple | None = field(default=None, repr=False, compare=False)
    _first: object = field(default=None, repr=False, compare=False)

    def _spelling(self) -> tuple:
        if self._spelled is None:
            self._spelled = self._spell() if self.feasible else (None, None)
        return self._spelled

    @property
    def witness(self) -> bytes | None:
        return self._spelling()[0]

    @property
    def fillings(self) -> tuple[bytes, ...] | None:
        return self._spelling()[1]

    def any_fillings(self) -> tuple[bytes, ...] | None:
        """What each hole holds in *some* witness (not necessarily the shortest): read off
        the check's own parse, so far cheaper than :attr:`fillings`, which parses again."""
        if not self.feasible:
            return None
        if self._spelled is not None or self._first is None:
            return self.fillings
        return self._first()


@dataclass
class _Run:
    """One parse kept for reuse: its normalised parts, the parser, where each part began
    (the last position before it), and the positions each hole made (first, last)."""

    parts: tuple
    parser: LatticeParser
    marks: list
    ranges: list
    last: int | None  # the final position, None when the parse died


class Infiller:
    """Feasibility of partial texts (segments of bytes and holes) under one compiled grammar.

    ``budget`` bounds the parser steps of one check (None: unbounded). Keeps the parses of
    the last few checks to reuse their shared beginnings; one lock makes it safe to share.
    """

    DEFAULT_BUDGET = 2_000_000
    KEEP = 8  # parses kept for reuse

    def __init__(self, compiled: CompiledGrammar, *, budget: int | None = DEFAULT_BUDGET):
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError(f"Infiller takes a gramgen.CompiledGrammar (gramgen.compile(grammar, vocab)), "
                                     f"not {type(compiled).__name__}")
        if compiled.grammar.ir.meta.get("indenter"):
            raise ConfigurationError("infilling does not support indentation-sensitive grammars "
                                     "(this grammar declares _INDENT/_DEDENT)")
        self.budget = _budget(budget)
        self.compiled = compiled
        self.vocab = compiled.vocab
        self._tables = compiled.tables
        self._moves = LexemeMoves(compiled.tables)
        self._tt = compiled.token_table
        self._eos = frozenset(compiled.vocab.eos_token_ids)
        self._runs: list[_Run] = []
        self._shortest_runs: list[_Run] = []  # the same, of the parses for shortest witnesses
        self._classes: dict = {}  # (lexeme, state, depth) -> per-token outcome (see _token_classes)
        self._lock = threading.RLock()

    # -- the questions ------------------------------------------------------------------

    def check(self, segments, *, budget: int | None | str = "default") -> InfillResult:
        """Whether ``segments`` can be completed, with a witness when it can."""
        parts, holes = _normalise(segments)
        budget = self.budget if budget == "default" else _budget(budget)
        with self._lock:
            try:
                run = self._parse(parts, budget)
            except OutOfWork as exc:
                return InfillResult(False, exhausted=True, work=exc.args[0] if exc.args else 0)
        ok = run.last is not None and run.parser.accepts(run.last)
        if not ok:
            return InfillResult(False, work=run.parser.work)
        return InfillResult(True, work=run.parser.work, _spell=lambda: self._spell(run.parts, holes),
                            _first=lambda: self._fillings(run.parser, run.last, run.ranges, holes)[1])

    def feasible(self, segments) -> bool:
        return self.check(segments).feasible

    def place(self, segments, slot: int, token: int, at: int = 0) -> list:
        """``segments`` with ``token`` put into the hole ``segments[slot]`` (see :meth:`allows`)."""
        placed = self._placed(segments, slot, token, at)
        if placed is None:
            raise ConfigurationError(f"token {token} cannot go into {segments[slot]!r} at {at}: "
                                     "a special token, or EOS before known text")
        return placed

    def allows(self, segments, slot: int, token: int, at: int = 0) -> bool:
        """Whether the text stays completable with ``token`` in hole ``segments[slot]``.

        In a token hole, ``at`` is the token's slot in it (``0 <= at < n``) and the hole
        splits around it. In a byte hole, ``at=0`` puts the token at its start and ``at=-1``
        at its end; the hole's bounds shrink by the token's length. EOS ends the text:
        it is allowed in a ``max_tokens`` hole, or a byte hole, that is the last segment.
        """
        placed = self._placed(segments, slot, token, at)
        return placed is not None and self.check(placed).feasible

    def mask(self, segments, slot: int, at: int = 0) -> np.ndarray:
        """bool[vocab size]: :meth:`allows` for every token, walking the token trie so that
        tokens sharing a prefix share its parse and a dead prefix drops all its tokens."""
        segments = list(segments)
        hole = self._hole_at(segments, slot)
        self._check_at(hole, at)
        out = np.zeros(self.vocab.size, dtype=bool)
        bounded = not hole.counts_tokens and (hole.min_bytes or hole.max_bytes is not None)
        if bounded and at == -1:  # what comes before the token depends on its length: one by one
            for t in range(self.vocab.size):
                out[t] = self.allows(segments, slot, t, at)
            return out
        before, after = self._split(segments, slot, hole, at)
        before_parts = _normalise(before)[0] if before else ()
        after_parts = _normalise(after)[0] if after else ()
        by_length: dict = {}  # token length -> the parts after it (a bounded hole shrinks by it)

        def after_token(n: int):
            if not bounded:
                return after_parts
            if n not in by_length:
                rest = None
                if hole.max_bytes is None or n <= hole.max_bytes:
                    shrunk = Hole(max(0, hole.min_bytes - n), None if hole.max_bytes is None else hole.max_bytes - n)
                    rest = _normalise([shrunk] + after[1:])[0]
                by_length[n] = rest
            return by_length[n]

        with self._lock:
            try:
                run = self._parse(before_parts, self.budget)
            except OutOfWork:
                return out
            if run.last is None:
                return out
            parser = run.parser.truncate(run.last + 1)
            parser.budget = self.budget
            try:
                for pos, ranks in self._token_ends(parser, run.last):
                    rest = after_token(int(self._tt.lengths[ranks[0]]))
                    if rest is None:
                        continue
                    sub = parser.truncate(len(parser.sets))
                    end = self._build(sub, pos, rest, [], [])
                    if end is not None and sub.accepts(end):
                        out[self._tt.rank_to_id[ranks]] = True
            except OutOfWork:
                pass  # the tokens not reached stay refused: never a false yes
        for eos in self._eos:
            out[eos] = self.allows(segments, slot, eos, at)
        return out

    # -- placing a token ----------------------------------------------------------------

    def _hole_at(self, segments, slot) -> Hole:
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)) or not -len(segments) <= slot < len(segments):
            raise ConfigurationError(f"slot {slot!r} is not an index into {len(segments)} segments")
        hole = segments[slot]
        if not isinstance(hole, Hole):
            raise ConfigurationError(f"segments[{slot}] is {type(hole).__name__}, not a Hole")
        return hole

    @staticmethod
    def _check_at(hole: Hole, at) -> None:
        if isinstance(at, bool) or not isinstance(at, (int, np.integer)):
            raise ConfigurationError(f"at= takes a whole number, not {at!r}")
        if hole.counts_tokens:
            n = hole.tokens if hole.tokens is not None else hole.max_tokens
            if not 0 <= at < n:
                raise ConfigurationError(f"at={at} is outside {hole!r} (0 <= at < {n})")
        elif at not in (0, -1):
            raise ConfigurationError(f"in a byte hole a token goes at its start (at=0) or end (at=-1), not at={at}")

    @staticmethod
    def _split(segments, slot, hole: Hole, at) -> tuple[list, list]:
        """What comes before and after a token put at ``at`` in ``hole`` (its length unknown:
        byte bounds are shrunk by the caller when the token is known)."""
        slot = slot % len(segments)
        head, tail = segments[:slot], segments[slot + 1:]
        if hole.tokens is not None:
            return head + [Hole(tokens=at)], [Hole(tokens=hole.tokens - at - 1)] + tail
        if hole.max_tokens is not None:
            return head + [Hole(tokens=at)], [Hole(max_tokens=hole.max_tokens - at - 1)] + tail
        if at == 0:
            return head, [hole] + tail
        return head + [hole], tail

    def _placed(self, segments, slot: int, token: int, at: int) -> list | None:
        segments = list(segments)
        hole = self._hole_at(segments, slot)
        self._check_at(hole, at)
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < self.vocab.size:
            raise ConfigurationError(f"token {token!r} is not an id of a vocabulary of {self.vocab.size}")
        slot = slot % len(segments)
        last = slot == len(segments) - 1
        data = self.vocab.token_bytes(int(token))
        head, tail = segments[:slot], segments[slot + 1:]
        if int(token) in self._eos:
            if not last or hole.tokens is not None:
                return None
            if hole.max_tokens is not None:
                return head + [Hole(tokens=at)]
            if at == 0:
                return (head or [b""]) if hole.min_bytes == 0 else None
            return segments
        if not data:
            return None
        if hole.counts_tokens:
            before, after = self._split(segments, slot, hole, at)
            return before + [data] + after
        n = len(data)
        if hole.max_bytes is not None and n > hole.max_bytes:
            return None
        rest = Hole(max(0, hole.min_bytes - n), None if hole.max_bytes is None else hole.max_bytes - n)
        return head + ([data, rest] if at == 0 else [rest, data]) + tail

    # -- parsing ------------------------------------------------------------------------

    def _parse(self, parts: tuple, budget: int | None, shortest: bool = False) -> _Run:
        """Parse ``parts`` from the longest beginning a kept parse shares with them (a
        ``shortest`` parse from a kept shortest one: its facts carry their lengths)."""
        runs = self._shortest_runs if shortest else self._runs
        best, keep_part, keep_bytes, keep_sets = None, 0, 0, 1
        for run in runs:
            started = len(run.marks)  # parts the run began (it may have died in the last)
            i = 0
            while i < len(parts) and i < started and run.parts[i] == parts[i]:
                i += 1
            if i == started:  # the run's parts all recur (a finished run began every part)
                if run.last is None or i == len(parts):  # it died the same way, or it is the same parse
                    runs.remove(run)
                    runs.insert(0, run)
                    return run
                n_sets, j = run.last + 1, 0
            else:
                j = 0
                a = parts[i] if i < len(parts) else None
                b = run.parts[i]
                if isinstance(a, bytes) and isinstance(b, bytes):
                    while j < len(a) and j < len(b) and a[j] == b[j]:
                        j += 1
                n_sets = min(run.marks[i] + 1 + j, len(run.parser.sets))
                j = n_sets - run.marks[i] - 1
            if n_sets > keep_sets:
                best, keep_part, keep_bytes, keep_sets = run, i, j, n_sets
        if best is None:
            parser = LatticeParser(self._tables, self._moves, budget, shortest=shortest)
            marks, ranges, last, done_parts = [], [], 0, 0
        else:
            parser = best.parser.truncate(keep_sets)
            parser.budget = budget
            marks = best.marks[:keep_part]
            ranges = best.ranges[:sum(isinstance(p, Hole) for p in parts[:keep_part])]
            last, done_parts = keep_sets - 1, keep_part
        try:
            if keep_bytes:
                marks.append(last - keep_bytes)
                last = self._build(parser, last, (parts[done_parts][keep_bytes:],), [], [], count=False)
                done_parts += 1
            if last is not None:
                last = self._build(parser, last, parts[done_parts:], marks, ranges)
        except OutOfWork:
            raise OutOfWork(parser.work) from None
        run = _Run(parts, parser, marks, ranges, last)
        runs.insert(0, run)
        del runs[self.KEEP:]
        return run

    def _build(self, parser: LatticeParser, last: int, parts, marks: list, ranges: list,
               count: bool = True) -> int | None:
        """Extend ``parser`` from position ``last`` over ``parts``; the final position, or
        None as soon as no parse survives. Records each part's start in ``marks`` and each
        hole's positions in ``ranges``."""
        for part in parts:
            if count:
                marks.append(last)
            if isinstance(part, bytes):
                for b in part:
                    last = parser.extend(((last, b),))
                    if last is None:
                        return None
                continue
            first = len(parser.sets)
            last = self._hole(parser, last, part)
            if last is None:
                return None
            ranges.append((first, len(parser.sets) - 1))
        return last

    def _spell(self, parts: tuple, n_holes: int) -> tuple[bytes, tuple[bytes, ...]]:
        """A shortest witness of feasible ``parts`` and what each hole holds in it (parsed
        again, shortest text first: asked for less often than checks, which do not pay for
        it; kept parses of this kind are reused the same way)."""
        with self._lock:
            run = self._parse(parts, None, shortest=True)
        return self._fillings(run.parser, run.last, run.ranges, n_holes)

    @staticmethod
    def _fillings(parser: LatticeParser, last: int, ranges: list, n_holes: int):
        """The witness ``parser`` spells up to ``last``, and the bytes of it in each hole."""
        spelled = parser.witness(last)
        starts = [lo for lo, _ in ranges]
        fills = [bytearray() for _ in ranges]
        for pos, b in spelled:
            k = bisect.bisect_right(starts, pos) - 1
            if k >= 0 and pos <= ranges[k][1]:
                fills[k].append(b)
        if len(fills) != n_holes:
            raise AssertionError(f"{len(fills)} holes spelled for {n_holes}")
        return bytes(b for _, b in spelled), tuple(bytes(f) for f in fills)

    def _hole(self, parser: LatticeParser, last: int, hole: Hole) -> int | None:
        if hole.counts_tokens:
            n = hole.tokens if hole.tokens is not None else hole.max_tokens
            ends = [last]
            for _ in range(n):
                found = [pos for pos, _ in self._token_ends(parser, last)]
                if not found:
                    break
                last = parser.extend([(p, EPS) for p in found])
                ends.append(last)
            if hole.tokens is not None:
                return last if len(ends) == n + 1 else None
            return parser.extend([(p, EPS) for p in ends]) if len(ends) > 1 else last
        for _ in range(hole.min_bytes):
            last = parser.extend(((last, ANY),))
            if last is None:
                return None
        if hole.max_bytes is None:
            return parser.extend(((last, EPS),), loop=True)
        for _ in range(hole.max_bytes - hole.min_bytes):
            last = parser.extend(((last, ANY), (last, EPS)))
        return last

    #: a trie node inside lexemes only (no parser items) with at least this many tokens
    #: below it is classified for all of them at once (see :meth:`_jumps`)
    JUMP_MIN = 24

    def _token_ends(self, parser: LatticeParser, root: int):
        """Walk the vocabulary's byte trie from position ``root``: yields (position after a
        whole token, the ranks of the tokens spelled there), pruning dead prefixes.

        Below a node where only lexemes are being matched, the tokens that cannot end a
        lexeme before their last byte are moved to their end in one step per distinct
        outcome (:meth:`_jumps`); only the others are walked byte by byte."""
        spelled = self._tt.sorted_bytes
        stack = [(root, 0, 0, len(spelled), None, True)]
        while stack:
            pos, depth, lo, hi, only, may_jump = stack.pop()
            ends = lo
            while ends < hi and len(spelled[ends]) == depth:
                ends += 1
            if ends > lo and depth:
                ranks = [r for r in range(lo, ends) if only is None or only[r]]
                if ranks:
                    yield pos, ranks
            lo = ends
            if lo >= hi:
                continue
            here = parser.sets[pos]
            if may_jump and depth and not here.items and not here.loop and hi - lo >= self.JUMP_MIN:
                walk = yield from self._jumps(parser, pos, depth, lo, hi, only)
                if walk is not None:
                    stack.append((pos, depth, lo, hi, walk, False))
                continue
            count = None if only is None else np.concatenate(([0], np.cumsum(only[lo:hi])))
            allowed = parser.allowed_bytes(pos)
            groups = []
            while lo < hi:
                b = spelled[lo][depth]
                top = hi if b == 255 else bisect.bisect_left(spelled, spelled[lo][:depth] + bytes((b + 1,)), lo, hi)
                if (allowed >> b) & 1 and (count is None or count[top - ends] > count[lo - ends]):
                    groups.append((b, lo, top))
                lo = top
            for b, g_lo, g_hi in reversed(groups):
                nxt = parser.extend(((pos, b),))
                if nxt is not None:
                    stack.append((nxt, depth + 1, g_lo, g_hi, only, True))

    def _jumps(self, parser: LatticeParser, pos: int, depth: int, lo: int, hi: int, only):
        """The tokens of ranks ``lo..hi`` (sharing their first ``depth`` bytes, read up to
        position ``pos``, where only lexemes are being matched): yields (position, ranks)
        for those that no lexeme can end inside, one position per distinct set of end
        states; returns the ranks to walk byte by byte (a bool array, or None)."""
        keys = list(parser.sets[pos].scans)
        n = hi - lo
        alive = np.zeros(n, dtype=bool)
        exits = np.zeros(n, dtype=bool)
        outcome = np.empty((len(keys), n), dtype=np.int32)
        for i, (k, d) in enumerate(keys):
            end, exit_ = self._token_classes(k, d, depth)
            outcome[i] = end[lo:hi]
            alive |= end[lo:hi] >= 0
            exits |= exit_[lo:hi]
        if only is not None:
            alive &= only[lo:hi]
            exits &= only[lo:hi]
        parser.work += n // 16 + 1
        jump = np.flatnonzero(alive & ~exits)
        if len(jump):
            groups, which = np.unique(outcome[:, jump], axis=1, return_inverse=True)
            which = which.reshape(-1)
            order = np.argsort(which, kind="stable")
            bounds = np.searchsorted(which[order], np.arange(groups.shape[1] + 1))
            spelled = self._tt.sorted_bytes
            for g in range(groups.shape[1]):
                members = jump[order[bounds[g]:bounds[g + 1]]] + lo
                moves = [(k, d, int(groups[i, g])) for i, (k, d) in enumerate(keys) if groups[i, g] >= 0]
                nxt = parser.jump(pos, spelled[members[0]][depth:], moves)
                if nxt is not None:
                    yield nxt, members.tolist()
        if not exits.any():
            return None
        walk = np.zeros(len(self._tt.sorted_bytes), dtype=bool)
        walk[lo:hi] = exits
        return walk

    def _token_classes(self, k: int, d: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Lexeme ``k`` from DFA state ``d`` over every token's bytes after its first
        ``depth``: per rank, the state after them (-1: dead, or too short), and whether the
        lexeme can end before the token's last byte. Made once per (k, d, depth)."""
        key = (k, d, depth)
        found = self._classes.get(key)
        if found is None:
            tt = self._tt
            table, acc = self.compiled.sink_tables[k]
            sink = len(acc) - 1
            lengths = tt.lengths
            state = np.full(len(lengths), sink, dtype=np.int32)
            longer = lengths > depth
            state[longer] = d
            exits = np.zeros(len(lengths), dtype=bool)
            for at in range(depth, tt.max_len):
                idx = np.flatnonzero(lengths > at)
                if not len(idx):
                    break
                idx = idx[state[idx] != sink]
                state[idx] = table[state[idx], tt.columns[at, idx]]
                inner = idx[lengths[idx] > at + 1]
                exits[inner] |= acc[state[inner]]
            end = np.where(state == sink, -1, state).astype(np.int32)
            found = self._classes[key] = (end, exits)
        return found


def _budget(budget) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget <= 0:
        raise ConfigurationError(f"budget= takes a positive whole number of parser steps or None, not {budget!r}")
    return int(budget)


def _normalise(segments) -> tuple[tuple, tuple[int, ...]]:
    """Segments as a tuple of non-empty bytes (adjacent ones joined) and holes, and the
    number of holes; refuses anything else with the index of the offender."""
    if isinstance(segments, (bytes, str, Hole)) or not hasattr(segments, "__iter__"):
        raise ConfigurationError(f"segments must be a list of bytes and gramgen.Hole, not {type(segments).__name__}")
    parts: list = []
    n = 0
    for i, seg in enumerate(segments):
        if isinstance(seg, Hole):
            parts.append(seg)
            n += 1
        elif isinstance(seg, (bytes, bytearray, memoryview)):
            data = bytes(seg)
            if not data:
                continue
            if parts and isinstance(parts[-1], bytes):
                parts[-1] += data
            else:
                parts.append(data)
        elif isinstance(seg, str):
            raise ConfigurationError(f"segment {i} is str; segments are bytes (encode it: {seg[:20]!r}.encode())")
        else:
            raise ConfigurationError(f"segment {i} is {type(seg).__name__}; segments are bytes or gramgen.Hole")
    if not parts and n == 0 and not list(segments):
        raise ConfigurationError("segments is empty: give at least one bytes segment or Hole")
    return tuple(parts), n
