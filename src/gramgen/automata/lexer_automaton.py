"""The bigram lexer: which byte strings can be split into lexemes that may follow each other.

A token that ends the lexeme being matched somewhere inside it (an *exit* token, see
``lexeme_tokens``) normally has to be walked through the parser, in every new parser
context. Most exit tokens of a large vocabulary are hopeless for a reason that needs no
parser at all: after the lexeme ends, the rest of the token cannot even be cut into
lexemes that may follow one another (``" the"`` after JSON whitespace: no JSON lexeme
starts with ``th``). This module recognises exactly the strings that *can* be cut that
way: a nondeterministic automaton over (lexeme, DFA state) pairs whose lexeme-to-lexeme
moves follow :attr:`ParserTables.follow_lexemes`, determinised lazily.

It over-approximates the language (every word of the grammar is such a sequence), so
dropping the exit tokens it rejects keeps masks exact; the parser still decides the rest.
Subset states and their transitions are built on demand, only for the (state, byte) pairs
that the vocabulary actually reaches, and memoised for all later runs. Past a state
budget it stops building and answers "maybe" (alive), which is always sound.
"""

from __future__ import annotations

import threading

import numpy as np

from . import lexeme_tokens
from .lexeme_tokens import dfa_step

_UNKNOWN = -2
_DEAD = -1


class LexerAutomaton:
    """Lazily determinised bigram lexer over the lexemes of one grammar."""

    def __init__(self, tables, max_states: int = 20_000):
        self._rows = tables.lex_rows
        self._accept = tables.lex_accept
        self._follow = tables.follow_lexemes
        self._max_states = max_states
        self._states: list[frozenset] = []
        self._ids: dict[frozenset, int] = {}
        self._table = np.full((64, 256), _UNKNOWN, dtype=np.int32)
        self._starts: dict[int, list[tuple]] = {}  # follow bitmask -> per byte, started pairs
        self._lock = threading.Lock()
        self.gave_up = False

    def state_of(self, pairs) -> int:
        """The id of the subset state holding these (lexeme, DFA state) pairs."""
        with self._lock:
            return self._intern(frozenset(pairs))

    def _intern(self, subset: frozenset) -> int:
        sid = self._ids.get(subset)
        if sid is None:
            sid = len(self._states)
            self._states.append(subset)
            self._ids[subset] = sid
            if sid >= self._table.shape[0]:
                grown = np.full((2 * self._table.shape[0], 256), _UNKNOWN, dtype=np.int32)
                grown[: self._table.shape[0]] = self._table
                self._table = grown
        return sid

    def _started(self, follow: int) -> list[tuple]:
        """Per byte: the (lexeme, state) pairs that begin when a lexeme whose followers are
        ``follow`` has just ended and this byte comes."""
        found = self._starts.get(follow)
        if found is None:
            per_byte: list[list] = [[] for _ in range(256)]
            k, mask = 0, follow
            while mask:
                if mask & 1 and self._accept[k]:  # the lexeme's DFA has states
                    for b, q in enumerate(self._rows[k][0]):
                        if q >= 0:
                            per_byte[b].append((k, q))
                mask >>= 1
                k += 1
            found = self._starts[follow] = [tuple(p) for p in per_byte]
        return found

    def _fill(self, sid: int, byte: int) -> int:
        """Compute and record the transition of subset ``sid`` on ``byte`` (lock held)."""
        rows, accept = self._rows, self._accept
        nxt = set()
        follow = 0
        for k, q in self._states[sid]:
            q2 = rows[k][q][byte]
            if q2 >= 0:
                nxt.add((k, q2))
            if accept[k][q]:
                follow |= self._follow[k]
        if follow:
            nxt.update(self._started(follow)[byte])
        target = self._intern(frozenset(nxt)) if nxt else _DEAD
        self._table[sid, byte] = target
        return target

    def alive(self, tt, sid: int, ranks: np.ndarray, depth: int = 0) -> np.ndarray:
        """bool per token in ``ranks`` (byte-sorted ranks of ``tt``): whether the bytes
        ``depth:`` of the token can be read from subset state ``sid`` (the automaton is
        still alive at the token's end)."""
        n = ranks.shape[0]
        ok = np.zeros(n, dtype=bool)
        if self.gave_up:
            ok[:] = True
            return ok
        if lexeme_tokens.NATIVE:
            return self._alive_native(tt, sid, ranks, depth)
        lengths = tt.lengths[ranks]
        ok[lengths <= depth] = True
        pos_idx = np.flatnonzero(lengths > depth)
        st = np.full(pos_idx.shape[0], sid, dtype=np.int64)
        for pos in range(depth, tt.max_len):
            if not pos_idx.size:
                break
            col = tt.columns[pos][ranks[pos_idx]].astype(np.int64)
            table = self._table
            nxt = dfa_step(table, st, col)
            unknown = nxt == _UNKNOWN
            if unknown.any():
                pairs = np.unique(st[unknown] * 256 + col[unknown])
                with self._lock:
                    for code in pairs.tolist():
                        s, b = divmod(code, 256)
                        if self._table[s, b] == _UNKNOWN:
                            self._fill(s, b)
                    if len(self._states) > self._max_states:
                        self.gave_up = True
                if self.gave_up:
                    ok[pos_idx] = True
                    return ok
                nxt = dfa_step(self._table, st, col)
            live = nxt >= 0
            pos_idx, st = pos_idx[live], nxt[live]
            ending = lengths[pos_idx] == pos + 1
            if ending.any():
                ok[pos_idx[ending]] = True
                keep = ~ending
                pos_idx, st = pos_idx[keep], st[keep]
        return ok

    def _alive_native(self, tt, sid: int, ranks: np.ndarray, depth: int) -> np.ndarray:
        """:meth:`alive` by the C kernel: run every token as far as the table is known,
        fill the transitions where tokens got stuck, run those tokens again."""
        ranks = np.ascontiguousarray(ranks, dtype=np.int64)
        ok = np.zeros(ranks.shape[0], dtype=bool)
        todo = np.arange(ranks.shape[0])
        while todo.size:
            sub = ranks[todo]
            ok_sub = np.zeros(sub.shape[0], dtype=np.uint8)
            stuck = np.empty(sub.shape[0], dtype=np.int64)
            lexeme_tokens._tokenwalk.lazy_walk(self._table, int(sid), sub, int(depth), tt.blob, tt.offsets,
                                               ok_sub, stuck)
            ok[todo] = ok_sub.view(bool)
            waiting = stuck >= 0
            if not waiting.any():
                break
            with self._lock:
                for code in np.unique(stuck[waiting]).tolist():
                    s, b = divmod(code, 256)
                    if self._table[s, b] == _UNKNOWN:
                        self._fill(s, b)
                gave_up = len(self._states) > self._max_states
                if gave_up:
                    self.gave_up = True
            if gave_up:
                ok[todo[waiting]] = True
                break
            todo = todo[waiting]
        return ok
