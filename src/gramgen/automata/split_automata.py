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
automaton's nonterminal) and measures how deep two states agree, label by label, for
``Matcher`` to reuse the mask of a recent position.
"""

from __future__ import annotations

import threading

import numpy as np

from ..grammar.split import SPLIT_AUTOMATA
from . import lexeme_tokens
from .earley import ParserTables

__all__ = ["SplitAutomata"]


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
        self.starts: list[int] = []
        for x, (top, states, accepting, start) in enumerate(meta.get(SPLIT_AUTOMATA, ())):
            self.tops.append(nt.get(top, -1))
            self.accepting.append(frozenset(accepting))
            self.starts.append(start)
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
        #: per automaton, the states from which an accepting one can be reached
        self.live: list[frozenset] = [self._coreachable(e, acc) for e, acc in zip(self.edges, self.accepting)]
        self.item_state = {i: xa for i, xa in self.item_state.items() if usable[xa[0]]}
        #: per automaton, the kernel items just after its nonterminal (``v -> '"' R . '"'``):
        #: where the parse goes on once it accepts
        self.after_top: list[frozenset] = []
        #: kernel item just before an automaton's nonterminal (``v -> '"' . R '"'``) -> the
        #: automaton: it starts at that item's set, in its start state
        self.before_top: dict[int, int] = {}
        item_next = tables.item_next
        top_of = {top: x for x, top in enumerate(self.tops) if usable[x]}
        after_top: list[set] = [set() for _ in self.tops]
        for i, sym in enumerate(item_next):
            x = top_of.get(sym)
            if x is not None:
                after_top[x].add(i + 1)
                self.before_top[i] = x
        self.after_top = [frozenset(a) for a in after_top]
        self._agreement: dict = {}
        #: per automaton, (the token table, :meth:`by_characters` for it)
        self._by_chars: dict[int, tuple] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _coreachable(edges: dict, accepting: frozenset) -> frozenset:
        into: dict[int, list[int]] = {}
        for a, out in edges.items():
            for _, b in out:
                into.setdefault(b, []).append(a)
        seen = set(accepting)
        todo = list(accepting)
        while todo:
            for a in into.get(todo.pop(), ()):
                if a not in seen:
                    seen.add(a)
                    todo.append(a)
        return frozenset(seen)

    def __bool__(self) -> bool:
        return bool(self.item_state)

    def position(self, items, scans, here: int) -> tuple[int, int, int] | None:
        """(automaton, state, the chart index where it was entered) of an Earley set:
        its kernel ``items`` as ``(item, origin)`` pairs, its ``scans``, ``here`` its chart
        index. None when anything else could go on from it: a second automaton or origin,
        another item still waiting for something, or a lexeme begun earlier that can
        still read a byte. (Items that are complete and lexemes that began here, predicted
        by the kernel items, are functions of the rest.) An item just before an
        automaton's nonterminal puts it in its start state, entered here."""
        tables = self.tables
        relevant, item_state, before_top = tables.relevant_item, self.item_state, self.before_top
        found = None
        after = []
        for item, origin in items:
            if not relevant[item]:
                continue
            xa = item_state.get(item)
            if xa is not None:
                pos = (xa[0], xa[1], origin)
            elif item in before_top:
                x = before_top[item]
                pos = (x, self.starts[x], here)
            else:
                after.append(item)
                continue
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
        return found

    def by_characters(self, automaton: int, tt) -> tuple[tuple, np.ndarray] | None:
        """The automaton in the form the native ``label_walk`` reads it, character by
        character (each label's DFA stepped over one UTF-8 character at a time; edges into
        states from which no accepting one can be reached left out), and bool per rank of
        ``tt``: the tokens it decides at every state, those made of characters that each
        label of the automaton either reads whole or not at all (not a JSON escape's
        backslash, a cut-off or broken UTF-8 character). The same set at every state, as
        the callers' caches need. None without the native kernel, or where two labels of
        a state read one character. Made once per automaton for the compiled grammar's
        token table (at compile, see ``CompiledGrammar``); another table (a test's) replaces
        it."""
        entry = self._by_chars.get(automaton)
        if entry is None or entry[0] is not tt:
            entry = (tt, self._make_by_characters(automaton, tt))
            with self._lock:
                self._by_chars[automaton] = entry
        return entry[1]

    def _make_by_characters(self, automaton: int, tt) -> tuple[tuple, np.ndarray] | None:
        walk = getattr(lexeme_tokens._tokenwalk, "label_walk", None)
        if walk is None:
            return None
        tables = self.tables
        N = tables.n_nonterminals
        edges, live = self.edges[automaton], self.live[automaton]
        n_states = max([*edges, *(b for out in edges.values() for _, b in out), self.starts[automaton]],
                       default=0) + 1
        labels: dict[int, int] = {}
        counts = np.zeros(n_states + 2, dtype=np.int64)
        label_of, target_of = [], []
        for a in sorted(edges):
            for label, b in edges[a]:
                if b in live:
                    label_of.append(labels.setdefault(label, len(labels)))
                    target_of.append(b)
                    counts[a + 1] += 1
        # one more state, with every label leading back to it: where a token's walk gives
        # 2 (undecided) at no state at all
        everywhere = n_states
        counts[everywhere + 1] = len(labels)
        label_of.extend(range(len(labels)))
        target_of.extend([everywhere] * len(labels))
        edge_start = np.cumsum(counts)
        rows, starts, final, base = [], [], [], 0
        for label in labels:
            dfa = tables.lex_dfas[label - N]
            t = dfa.transitions.astype(np.int32)
            rows.append(np.where(t >= 0, t + base, -1).astype(np.int32))
            starts.append(base)
            final.append(dfa.accepting & ~(t >= 0).any(axis=1))
            base += t.shape[0]
        form = (edge_start.astype(np.int64), np.array(label_of, dtype=np.int32), np.array(target_of, dtype=np.int32),
                np.ascontiguousarray(np.concatenate(rows) if rows else np.full((1, 256), -1, dtype=np.int32)),
                np.array(starts, dtype=np.int32),
                np.concatenate(final).astype(np.uint8) if final else np.zeros(1, dtype=np.uint8))
        ranks = np.arange(len(tt.sorted_bytes), dtype=np.int64)
        out = np.empty(ranks.shape[0], dtype=np.uint8)
        try:
            walk(*form, everywhere, ranks, tt.blob, tt.offsets, out)
        except ValueError:
            return None
        decided = out != 2
        decided.flags.writeable = False
        return form, decided

    def read_by_characters(self, automaton: int, state: int, tt, ranks: np.ndarray) -> np.ndarray:
        """Per token in ``ranks`` (each one ``by_characters`` decides), read inside the
        automaton from ``state``: True when all its bytes can be read (for a token with no
        byte that may follow the automaton: the parser takes it here), False when it dies
        on the way."""
        form, _ = self.by_characters(automaton, tt)
        ranks = np.ascontiguousarray(ranks, dtype=np.int64)
        out = np.empty(ranks.shape[0], dtype=np.uint8)
        lexeme_tokens._tokenwalk.label_walk(*form, int(state), ranks, tt.blob, tt.offsets, out)
        return out == 1

    def first_byte_depths(self, automaton: int, a1: int, a2: int, cap: int) -> np.ndarray:
        """Per first byte (int32[256]): a depth ``d`` such that every string of at most
        ``d`` bytes that starts with that byte reads alike from ``a1`` and ``a2`` (-1: none
        is known to). Where the two states differ in acceptance or in some labels (after a
        word and after a space), the strings that start with a label both read still
        agree as deep as the states that label leads to; a byte that no label of either
        state takes is read by neither (0 bytes in: a byte that may follow the automaton,
        which the caller decides anyway)."""
        edges = self.edges[automaton]
        e1, e2 = edges.get(a1, ()), edges.get(a2, ())
        starts = self._label_starts
        # the bytes in groups that the same edges of both states start with (the labels'
        # first bytes cut the 256 bytes into a few groups): each group is decided once
        groups = [(1 << 256) - 1]
        for m in {starts(label) for label, _ in (*e1, *e2)}:
            groups = [g for whole in groups for g in (whole & m, whole & ~m) if g]
        out = np.empty(256, dtype=np.int32)
        for group in groups:
            bit = group & -group
            g1 = [e for e in e1 if starts(e[0]) & bit]
            g2 = [e for e in e2 if starts(e[0]) & bit]
            if [label for label, _ in g1] != [label for label, _ in g2]:
                d = -1
            else:
                d = cap
                for (_, t1), (_, t2) in zip(g1, g2):
                    if t1 != t2:
                        # the label reads at least the first byte
                        d = min(d, self.agreement(automaton, t1, t2, cap) + 1)
            members = np.unpackbits(np.frombuffer(group.to_bytes(32, "little"), dtype=np.uint8), bitorder="little")
            out[members.view(bool)] = d
        return out

    def _label_starts(self, label: int) -> int:
        """The bytes (a bitmask) that start label lexeme ``label`` (a symbol code)."""
        return self.tables.lex_first_bytes[label - self.tables.n_nonterminals][0]

    def follow_bytes(self, automaton: int) -> int:
        """The bytes that may come right after the automaton's text (a bitmask): a token
        with none of them cannot leave the automaton before its last byte."""
        return self.tables.follow_bytes_of(self.tops[automaton])

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
