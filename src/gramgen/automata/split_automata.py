"""Where the parser stands inside an automaton split into rules, and how alike two of its states are.

A lexeme whose DFA would be too big (a string with a ``pattern`` and a ``maxLength``: the
pattern's states times the length counter) is rewritten as left-linear rules, one
nonterminal per automaton state and one small lexeme per edge label
(``grammar.split``). Inside it the parser steps at every character, and each position is
a new automaton state: nothing the mask caches keyed by parser state would ever hit. Yet
two states whose futures agree on every string as long as most tokens (character 12 and
character 13 of a 300-character string) allow the same such tokens.

:class:`SplitAutomata` recognises these positions in an Earley set (its kernel items are
``R_b -> R_a . label`` of one automaton, from one origin, plus the items just after the
automaton's nonterminal) and measures how deep two states agree, label
by label, for ``Matcher`` to reuse the mask of a recent position.
"""

from __future__ import annotations

import threading

from ..grammar.split import SPLIT_AUTOMATA
from .earley import ParserTables

__all__ = ["SplitAutomata", "AutomatonPosition"]


class AutomatonPosition(tuple):
    """(automaton, state, origin): the parser is in ``state`` of automaton ``automaton``,
    which it entered at chart position ``origin``."""

    __slots__ = ()


class SplitAutomata:
    """The automata of one grammar's split lexemes, as the parser tables spell them.

    An automaton qualifies when every rule of its states has the form ``R_q -> ()`` (the
    start) or ``R_b -> R_a label`` with ``label`` a lexeme that is not nullable (each
    label reads at least one byte, so a depth in labels bounds a depth in bytes)."""

    #: pairs of states whose agreement is kept, per grammar
    MEMO = 65536

    def __init__(self, tables: ParserTables, meta: dict):
        self.tables = tables
        nt = {name: i for i, name in enumerate(tables.nt_names)}
        N = tables.n_nonterminals
        lexeme_index = {name: N + k for k, name in enumerate(tables.lexeme_names)}
        state_of: dict[int, tuple[int, int]] = {}   # nonterminal -> (automaton, state)
        self.tops: list[int] = []
        self.accepting: list[frozenset] = []
        self.edges: list[dict[int, list]] = []
        for x, (top, states, accepting) in enumerate(meta.get(SPLIT_AUTOMATA, ())):
            self.tops.append(nt.get(top, -1))
            self.accepting.append(frozenset(accepting))
            self.edges.append({})
            for q, name in states:
                if name in nt:
                    state_of[nt[name]] = (x, q)
        usable = [top >= 0 for top in self.tops]
        #: kernel item ``R_b -> R_a . label`` -> (automaton, a)
        self.item_state: dict[int, tuple[int, int]] = {}
        nullable = tables.nullable
        for r, (lhs, rhs) in enumerate(tables.rule_list):
            found = state_of.get(nt[lhs])
            if found is None:
                continue
            x, b = found
            if not rhs:
                continue
            first = state_of.get(nt.get(rhs[0], -1))
            label = lexeme_index.get(rhs[1], -1) if len(rhs) == 2 else -1
            if first is None or first[0] != x or label < 0 or nullable[label]:
                usable[x] = False
                continue
            a = first[1]
            self.edges[x].setdefault(a, []).append((label, b))
            self.item_state[tables.rule_first[r] + 1] = (x, a)
        self.usable = usable
        for x, per_state in enumerate(self.edges):
            for a, out in per_state.items():
                out.sort()
                per_state[a] = tuple(out)
        if not any(usable):
            self.item_state = {}
        else:
            self.item_state = {i: xa for i, xa in self.item_state.items() if usable[xa[0]]}
        #: per automaton, the kernel items just after its nonterminal (``v -> '"' R . '"'``):
        #: where the parse goes on once it accepts
        self.after_top: list[frozenset] = []
        item_next = tables.item_next
        for x, top in enumerate(self.tops):
            after = set()
            if usable[x]:
                for i, sym in enumerate(item_next):
                    if sym == top:
                        after.add(i + 1)
            self.after_top.append(frozenset(after))
        self._follow: dict[int, int] = {}
        self._agreement: dict = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.item_state)

    def position(self, items, scans, here: int) -> AutomatonPosition | None:
        """The automaton position of an Earley set (its kernel ``items`` as ``(item,
        origin)`` pairs, its ``scans``, ``here`` its chart index), or None when anything
        else could go on from it: a second automaton or origin, another item still waiting
        for something, or a lexeme begun earlier that can still read a byte. (Items that
        are complete and lexemes that began here, predicted by the kernel items, are
        functions of the rest.)"""
        tables = self.tables
        relevant, item_state = tables.relevant_item, self.item_state
        found = None
        after = []
        for item, origin in items:
            if not relevant[item]:
                continue
            xa = item_state.get(item)
            if xa is None:
                after.append(item)
                continue
            pos = (xa[0], xa[1], origin)
            if found is None:
                found = pos
            elif found != pos:
                return None
        if found is None:
            return None
        if after and not self.after_top[found[0]].issuperset(after):
            return None
        first_bytes = tables.lex_first_bytes
        for (k, q), origins in scans.items():
            if first_bytes[k][q] and any(o != here for o in origins):
                return None
        return AutomatonPosition(found)

    def follow_bytes(self, automaton: int) -> int:
        """The bytes that may come right after the automaton's text (a bitmask): a token
        with none of them cannot leave the automaton before its last byte."""
        found = self._follow.get(automaton)
        if found is None:
            found = self._follow[automaton] = self.tables.follow_bytes_of(self.tops[automaton])
        return found

    def agreement(self, automaton: int, a1: int, a2: int, cap: int) -> int:
        """A depth ``d <= cap`` such that every string of at most ``d`` bytes reads alike
        from states ``a1`` and ``a2``: the same labels at each step, in the same order,
        to states that accept alike. Walks the pairs of states reached by equal label
        sequences, breadth first: a pair ``k`` labels in (at least ``k`` bytes) that
        accepts differently leaves ``k - 1``, one whose next labels differ leaves ``k``.
        Memoized per pair."""
        if a1 == a2:
            return cap
        key = (automaton, a1, a2, cap) if a1 < a2 else (automaton, a2, a1, cap)
        found = self._agreement.get(key)
        if found is None:
            found = self._agreement_depth(self.edges[automaton], self.accepting[automaton], a1, a2, cap)
            with self._lock:
                if len(self._agreement) >= self.MEMO:
                    self._agreement = {}  # a reader holding the old dict still reads correct values
                self._agreement[key] = found
        return found

    @staticmethod
    def _agreement_depth(edges: dict, accepting: frozenset, a1: int, a2: int, cap: int) -> int:
        level, seen = [(a1, a2)], {(a1, a2)}
        for depth in range(cap + 1):
            if not level:
                return cap
            nxt, labels_differ = [], False
            for p1, p2 in level:
                e1, e2 = edges.get(p1, ()), edges.get(p2, ())
                acc1 = p1 in accepting
                if acc1 != (p2 in accepting) or not acc1 and bool(e1) != bool(e2):
                    # a string of `depth` bytes may end here, accepted (or alive) from one
                    return max(0, depth - 1)
                if len(e1) != len(e2) or any(l1 != l2 for (l1, _), (l2, _) in zip(e1, e2)):
                    labels_differ = True   # the next label reads at least one more byte
                    continue
                for (_, t1), (_, t2) in zip(e1, e2):
                    if t1 != t2 and (t1, t2) not in seen:
                        seen.add((t1, t2))
                        nxt.append((t1, t2))
            if labels_differ:
                return depth
            level = nxt
        return cap
