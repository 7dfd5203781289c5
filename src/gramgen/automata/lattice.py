"""Earley parsing over a lattice of byte positions: the grammar intersected with a regular
set of texts (Bar-Hillel), searched implicitly.

Infilling asks whether *some* text of a regular shape (known bytes, holes of any bytes,
holes of a bounded length, holes of whole tokens) is a word of the grammar. The shape is a
lattice: positions joined by edges that read one given byte, one arbitrary byte, or
nothing; a position may also loop on every byte (a hole of any length). Earley's algorithm
runs unchanged over such a lattice when origins are positions instead of offsets: each
position's set is the union over every path that reaches it, so the work is polynomial in
the lattice, not in the number of texts it spells. A looping position is a fixed point:
a lexeme started there may already have ended there, so completions with that position as
origin are remembered and applied to items that arrive later (as for nullable symbols).

Every fact (item, completion, lexeme scan) keeps the first derivation that made it. The
derivations only point at facts made before, so following them always ends, and spells
one text of the lattice that the grammar accepts: the witness. With ``shortest=True`` each
position runs its agenda shortest text first (Knuth's generalisation of Dijkstra's
algorithm), so the first derivation of every fact, and the witness, is a shortest one.

Sets are never changed once the next position is built, so a lattice that shares a prefix
with another shares those sets (:meth:`LatticeParser.truncate`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .earley import END, ParserTables

#: edge labels besides a byte value (0..255)
ANY = -1   # exactly one byte, whichever
EPS = -2   # no byte


class OutOfWork(Exception):
    """The parse needed more work than its budget allowed (undecided: treat as a no)."""


class PositionSet:
    """What Earley knows at one lattice position.

    ``items``: (item, origin) -> derivation; ``waiting``: symbol -> items before it;
    ``done``: (symbol, origin) -> derivation, symbols matched from origin to here;
    ``scans``: (lexeme, dfa state) -> {origin: derivation}, lexemes being matched.
    """

    __slots__ = ("items", "waiting", "done", "scans", "loop", "predicted", "boundary", "costs")

    def __init__(self, loop: bool, shortest: bool = False):
        self.items: dict = {}
        self.waiting: dict = {}
        self.done: dict = {}
        self.scans: dict = {}
        self.loop = loop
        self.predicted: set = set()
        self.boundary = False
        self.costs: dict | None = {} if shortest else None  # fact -> length of its text

    def __bool__(self) -> bool:
        return bool(self.items or self.scans)


class LexemeMoves:
    """Per (lexeme, DFA state): where one arbitrary byte leads, and where any non-empty
    string leads (with a shortest such string), made on first use and kept."""

    def __init__(self, tables: ParserTables):
        self.tables = tables
        self._one: dict = {}
        self._reach: dict = {}

    def one(self, k: int, d: int) -> list[tuple[int, int]]:
        """(next state, a byte leading there) for each distinct live next state."""
        key = (k, d)
        found = self._one.get(key)
        if found is None:
            row = self.tables.lex_dfas[k].transitions[d]
            targets, first = np.unique(row, return_index=True)
            found = [(int(t), int(b)) for t, b in zip(targets, first) if t >= 0]
            self._one[key] = found
        return found

    def reach(self, k: int, d: int) -> dict[int, bytes]:
        """Every state reachable from ``d`` by one or more bytes -> a shortest such string."""
        key = (k, d)
        found = self._reach.get(key)
        if found is None:
            found = {}
            queue = deque()
            for t, b in self.one(k, d):
                if t not in found:
                    found[t] = bytes((b,))
                    queue.append(t)
            while queue:
                s = queue.popleft()
                path = found[s]
                for t, b in self.one(k, s):
                    if t not in found:
                        found[t] = path + bytes((b,))
                        queue.append(t)
            self._reach[key] = found
        return found


class LatticeParser:
    """An Earley chart over lattice positions, built one position at a time.

    ``extend(edges, loop)`` adds a position reached by ``edges`` (``(source position,
    label)``, label a byte, :data:`ANY` or :data:`EPS`) and returns its index, or None
    when no parse reaches it (then nothing is added). ``accepts()`` tells whether the last
    position completes a word; ``witness()`` spells one.
    """

    def __init__(self, tables: ParserTables, moves: LexemeMoves, budget: int | None = None,
                 shortest: bool = False):
        self.tables = tables
        self.shortest = shortest
        self.moves = moves
        self.sets: list[PositionSet] = []
        self.work = 0
        self.budget = budget
        t = tables
        self._item_next, self._item_lhs = t.item_next, t.item_lhs
        self._N = t.n_nonterminals
        self._is_ignore = t.is_ignore
        self._ignore = t.ignore_lexemes
        self._rows, self._accept = t.lex_rows, t.lex_accept
        # the items a position reached without reading (an ignored lexeme, an empty edge)
        # takes over: those with something before the dot, or waiting at the start of the
        # start rule, or accepting; an item with nothing read is predicted there anew
        starts = set(t.rule_first[1:])
        self._carried = frozenset(i for i, nxt in enumerate(t.item_next)
                                  if i not in starts and (nxt != END or i == t.accept_item))
        # over ignored text: not the items inside a lexeme split into rules (grammar.split)
        self._resumed = self._carried.difference(i for i, g in enumerate(t.glued) if g)
        self._glued = t.glued
        start = PositionSet(False, shortest)
        self.sets.append(start)
        self._close(start, 0, [("i", t.rules_of[0][0], 0, ("P",))])

    # -- building -----------------------------------------------------------------------

    def truncate(self, n: int) -> "LatticeParser":
        """A parser holding the first ``n`` positions of this one (shared, not copied)."""
        other = object.__new__(LatticeParser)
        other.__dict__.update(self.__dict__)
        other.sets = self.sets[:n]
        other.work = 0
        return other

    def extend(self, edges, loop: bool = False) -> int | None:
        q = len(self.sets)
        new = PositionSet(loop, self.shortest)
        agenda: list = []
        rows, accept = self._rows, self._accept
        for src, label in edges:
            old = self.sets[src]
            if label == EPS:
                how = ("C", src)
                carried = self._carried
                for key in old.items:
                    if key[0] in carried:
                        agenda.append(("i", key[0], key[1], how))
                for (k, d), origins in old.scans.items():
                    for o in origins:
                        agenda.append(("s", k, d, o, ("C", src)))
                continue
            for (k, d), origins in old.scans.items():
                if label == ANY:
                    targets = self.moves.one(k, d)
                else:
                    d2 = rows[k][d][label]
                    if d2 < 0:
                        continue
                    targets = ((d2, label),)
                for d2, b in targets:
                    for o in origins:
                        agenda.append(("s", k, d2, o, ("B", src, b, d)))
        if not agenda:
            return None
        self._close(new, q, agenda)
        if not new:
            return None
        self.sets.append(new)
        return q

    def jump(self, src: int, data: bytes, moves) -> int | None:
        """Add a position reached from ``src`` over ``data`` by lexemes that go on matching
        through all of it: ``moves`` lists ``(lexeme, state at src, state after data)``
        (the caller knows no lexeme can end strictly inside ``data``)."""
        scans = self.sets[src].scans
        agenda = [("s", k, d2, o, ("M", src, data, d)) for k, d, d2 in moves for o in scans[(k, d)]]
        if not agenda:
            return None
        q = len(self.sets)
        new = PositionSet(False, self.shortest)
        self._close(new, q, agenda)
        if not new:
            return None
        self.sets.append(new)
        return q

    def _close(self, here: PositionSet, q: int, agenda: list) -> None:
        """Run the agenda to a fixed point in the set at position ``q``."""
        if here.costs is not None:
            return self._close_shortest(here, q, agenda)
        sets = self.sets
        item_next, item_lhs, N = self._item_next, self._item_lhs, self._N
        is_ignore, accept = self._is_ignore, self._accept
        items, waiting, done, scans = here.items, here.waiting, here.done, here.scans
        carried, glued = self._resumed, self._glued
        push, pop = agenda.append, agenda.pop
        work = 0
        while agenda:
            entry = pop()
            kind = entry[0]
            work += 1
            if kind == "i":
                _, i, o, how = entry
                key = (i, o)
                if key in items:
                    continue
                items[key] = how
                if not here.boundary and not glued[i]:  # a lexeme ended: ignored text may start
                    here.boundary = True
                    for k in self._ignore:
                        push(("s", k, 0, q, ("S",)))
                sym = item_next[i]
                if sym == END:
                    push(("d", item_lhs[i], o, ("N", i)))
                    continue
                w = waiting.get(sym)
                if w is None:
                    waiting[sym] = [key]
                else:
                    w.append(key)
                if sym not in here.predicted:
                    here.predicted.add(sym)
                    if sym < N:
                        for first in self.tables.rules_of[sym]:
                            push(("i", first, q, ("P",)))
                    else:
                        push(("s", sym - N, 0, q, ("S",)))
                if (sym, q) in done:
                    push(("i", i + 1, o, ("A", q, sym)))
            elif kind == "s":
                _, k, d, o, how = entry
                origins = scans.get((k, d))
                if origins is None:
                    origins = scans[(k, d)] = {}
                elif o in origins:
                    continue
                origins[o] = how
                if accept[k][d]:
                    push(("d", N + k, o, ("L", d)))
                if here.loop and how[0] != "W":
                    for d2, path in self.moves.reach(k, d).items():
                        push(("s", k, d2, o, ("W", d, path)))
            else:
                _, sym, o, how = entry
                key = (sym, o)
                if key in done:
                    continue
                done[key] = how
                origin_set = here if o == q else sets[o]
                if sym >= N and is_ignore[sym - N]:
                    how = ("I", o, sym)
                    for key in list(origin_set.items):
                        if key not in items and key[0] in carried:
                            push(("i", key[0], key[1], how))
                else:
                    for (i, o2) in list(origin_set.waiting.get(sym, ())):
                        push(("i", i + 1, o2, ("A", o, sym)))
            if self.budget is not None and self.work + work > self.budget:
                self.work += work
                raise OutOfWork
        self.work += work

    def _close_shortest(self, here: PositionSet, q: int, agenda: list) -> None:
        """:meth:`_close` with the agenda run shortest text first (Knuth's generalisation of
        Dijkstra): every fact's first derivation spells a shortest text. Text lengths are
        small integers, so the agenda is a bucket queue; each fact's length is known when
        it is pushed (its parts are facts already made)."""
        sets = self.sets
        item_next, item_lhs, N = self._item_next, self._item_lhs, self._N
        is_ignore, accept = self._is_ignore, self._accept
        items, waiting, done, scans = here.items, here.waiting, here.done, here.scans
        carried, glued = self._resumed, self._glued
        costs = here.costs
        buckets: list[list] = []
        low = [0]  # no bucket below this one holds anything

        def push(e, c: int) -> None:
            while len(buckets) <= c:
                buckets.append([])
            buckets[c].append(e)
            if c < low[0]:   # (a prediction, of length 0, while longer facts run)
                low[0] = c

        for e in agenda:
            push(e, self._cost(e, q, here))
        work = 0
        while True:
            c = low[0]
            while c < len(buckets) and not buckets[c]:
                c += 1
            if c == len(buckets):
                break
            low[0] = c
            entry = buckets[c].pop()
            kind = entry[0]
            work += 1
            if kind == "i":
                _, i, o, how = entry
                key = (i, o)
                if key in items:
                    continue
                items[key] = how
                costs[("i", i, o)] = c
                if not here.boundary and not glued[i]:  # a lexeme ended: ignored text may start
                    here.boundary = True
                    for k in self._ignore:
                        push(("s", k, 0, q, ("S",)), 0)
                sym = item_next[i]
                if sym == END:
                    push(("d", item_lhs[i], o, ("N", i)), c)
                    continue
                w = waiting.get(sym)
                if w is None:
                    waiting[sym] = [key]
                else:
                    w.append(key)
                if sym not in here.predicted:
                    here.predicted.add(sym)
                    if sym < N:
                        for first in self.tables.rules_of[sym]:
                            push(("i", first, q, ("P",)), 0)
                    else:
                        push(("s", sym - N, 0, q, ("S",)), 0)
                if (sym, q) in done:
                    push(("i", i + 1, o, ("A", q, sym)), c + costs[("d", sym, q)])
            elif kind == "s":
                _, k, d, o, how = entry
                origins = scans.get((k, d))
                if origins is None:
                    origins = scans[(k, d)] = {}
                elif o in origins:
                    continue
                origins[o] = how
                costs[("s", k, d, o)] = c
                if accept[k][d]:
                    push(("d", N + k, o, ("L", d)), c)
                if here.loop and how[0] != "W":
                    for d2, path in self.moves.reach(k, d).items():
                        push(("s", k, d2, o, ("W", d, path)), c + len(path))
            else:
                _, sym, o, how = entry
                key = (sym, o)
                if key in done:
                    continue
                done[key] = how
                costs[("d", sym, o)] = c
                origin_set = here if o == q else sets[o]
                before = origin_set.costs
                if sym >= N and is_ignore[sym - N]:
                    how = ("I", o, sym)
                    for key in list(origin_set.items):
                        if key not in items and key[0] in carried:
                            push(("i", key[0], key[1], how), before[("i", key[0], key[1])] + c)
                else:
                    for (i, o2) in list(origin_set.waiting.get(sym, ())):
                        push(("i", i + 1, o2, ("A", o, sym)), before[("i", i, o2)] + c)
            if self.budget is not None and self.work + work > self.budget:
                self.work += work
                raise OutOfWork
        self.work += work

    def _cost(self, entry, q: int, here: PositionSet) -> int:
        """The length of the text a fact's derivation spells (for the shortest witness)."""
        sets = self.sets

        def at(p):
            return (here if p == q else sets[p]).costs

        kind, how = entry[0], entry[-1]
        tag = how[0]
        if tag in ("P", "S"):
            return 0
        if kind == "i":
            _, i, o, _ = entry
            if tag == "C":
                return at(how[1])[("i", i, o)]
            _, r, sym = how
            return at(r)[("i", i - 1 if tag == "A" else i, o)] + at(q)[("d", sym, r)]
        if kind == "d":
            _, sym, o, _ = entry
            if tag == "N":
                return at(q)[("i", how[1], o)]
            return at(q)[("s", sym - self._N, how[1], o)]
        _, k, d, o, _ = entry
        if tag == "C":
            return at(how[1])[("s", k, d, o)]
        if tag == "B":
            return at(how[1])[("s", k, how[3], o)] + 1
        if tag == "M":
            return at(how[1])[("s", k, how[3], o)] + len(how[2])
        return at(q)[("s", k, how[1], o)] + len(how[2])  # "W"

    # -- reading ------------------------------------------------------------------------

    def accepts(self, q: int = -1) -> bool:
        """Whether the text up to position ``q`` (the last one by default) is a word."""
        return (self.tables.accept_item, 0) in self.sets[q].items

    def allowed_bytes(self, q: int) -> int:
        """Bitmask of the bytes some lexeme being matched at ``q`` can read next."""
        first = self.tables.lex_first_bytes
        nb = 0
        for k, d in self.sets[q].scans:
            nb |= first[k][d]
        return nb

    def witness(self, q: int = -1) -> list[tuple[int, int]]:
        """One accepted text of the lattice up to position ``q``, as (position the byte
        arrived at, byte) pairs."""
        if not self.accepts(q):
            raise ValueError("no accepted text to spell")
        sets, N = self.sets, self._N
        out: list[tuple[int, int]] = []
        stack: list = [("i", self.tables.accept_item, 0, q % len(sets))]
        while stack:
            task = stack.pop()
            kind = task[0]
            if kind == "b":
                out.extend(task[1])
                continue
            if kind == "i":
                _, i, o, q = task
                how = sets[q].items[(i, o)]
                tag = how[0]
                if tag == "P":
                    continue
                if tag == "C":
                    stack.append(("i", i, o, how[1]))
                elif tag == "A":
                    _, r, sym = how
                    stack.append(("d", sym, r, q))
                    stack.append(("i", i - 1, o, r))
                else:  # "I": an ignored lexeme from r to q after the item at r
                    _, r, sym = how
                    stack.append(("d", sym, r, q))
                    stack.append(("i", i, o, r))
            elif kind == "d":
                _, sym, o, q = task
                how = sets[q].done[(sym, o)]
                if how[0] == "N":
                    stack.append(("i", how[1], o, q))
                else:  # "L": a lexeme whose scan reached an accepting state
                    stack.append(("s", sym - N, how[1], o, q))
            else:
                _, k, d, o, q = task
                spelled: list = []
                while True:
                    how = sets[q].scans[(k, d)][o]
                    tag = how[0]
                    if tag == "S":
                        break
                    if tag == "C":
                        q = how[1]
                    elif tag == "B":
                        _, src, b, d = how
                        spelled.append((q, b))
                        q = src
                    elif tag == "M":  # several bytes at once (see jump)
                        _, src, data, d = how
                        spelled.extend((q, b) for b in reversed(data))
                        q = src
                    else:  # "W": a shortest string through a looping position
                        _, d, path = how
                        spelled.extend((q, b) for b in reversed(path))
                spelled.reverse()
                stack.append(("b", spelled))
        return out
