"""A byte-level Earley recogniser whose terminals are lexeme DFAs.

One Earley set per byte of output. Besides the usual items ``(dotted rule, origin)`` a set
holds *scans*: lexemes being matched, as ``(lexeme, dfa_state) -> origins``. A byte moves
every scan through its DFA; when a lexeme reaches an accepting state the items waiting on
it in the origin set advance (Earley's completer, at the lexeme level). Because every split
of the text into lexemes is tracked, the language is exactly "strings that can be split
into lexemes that parse", for any CFG: ambiguous, left-recursive, with empty rules
(handled by Aycock-Horspool prediction of nullable symbols) and overlapping lexemes.

Ignored lexemes (``%ignore``) start at every lexeme boundary; when one completes, the new
set receives all items of the set where it started, i.e. the parse continues as if the
ignored text were not there.

Sets are never mutated once built, so a chart is a list of shared sets: forking copies
the list of references, rolling back truncates it.
"""

from __future__ import annotations

import itertools
import os
from marshal import dumps as _dumps

import numpy as np

from ..errors import GrammarError
from ..grammar.ir import COUNTED_CHAINS, GrammarIR, productive_rules
from ..grammar.simplify import fewest_bytes
from ..grammar.split import SPLIT_INNER, SPLIT_TOPS, glued_items
from .dfa import untrack

try:
    from . import _earley
except ImportError:  # pragma: no cover - built wherever a C compiler exists
    _earley = None

END = -1  # item_next value of a completed item
_EMPTY: frozenset = frozenset()

#: whether parser tables step with the C recogniser (``_earley``); ``GRAMGEN_NATIVE=0``
#: turns it off (the Python implementation below is then used, and is the reference the
#: tests compare the C one with)
NATIVE = _earley is not None and os.environ.get("GRAMGEN_NATIVE", "1") != "0"


class _Reached(Exception):
    """A probe of a tracked view read a set beyond its horizon (see completes_within)."""


class HorizonReads:
    """What a view from :func:`tracked_view` records of reads beyond its horizon."""

    __slots__ = ("read", "strict", "wrapped")

    def __init__(self):
        self.read = False     # a set beyond the horizon was read (reset by the reader)
        self.strict = False   # while set, such a read raises _Reached instead
        self.wrapped: list = []  # (index, wrapper, set) of each wrapped set


class _Far:
    """A chart set just beyond a horizon, in a view from :func:`tracked_view`: it reads
    as the set it wraps, and any read sets ``reads.read``; while ``reads.strict`` is set,
    a read raises :class:`_Reached` instead."""

    __slots__ = ("_set", "_reads")

    def __init__(self, s: "EarleySet", reads: HorizonReads):
        self._set, self._reads = s, reads

    def __getattr__(self, name):
        reads = self._reads
        if reads.strict:
            raise _Reached(name)
        reads.read = True
        return getattr(self._set, name)

_OPAQUE = -2  # the signature of a set beyond a horizon
_SELF = -1    # a set's reference to itself in its own signature


class Interner:
    """Numbers signatures: equal keys get the same int, and a number is never reused.

    Signatures are nested tuples of ints; the table keeps each as its ``marshal`` bytes
    (version 2 writes no back-references, so equal tuples give equal bytes, and the bytes
    read back as the tuple: distinct tuples give distinct bytes). Bytes are not objects of
    the garbage collector, where the tuples (a signature and each of its parts) were: a
    signature met for the first time, in nearly every step and in the masks of new states,
    left a dozen allocations that brought the next collection closer, often inside a mask.
    Past ``limit`` keys the table starts afresh; numbers keep increasing, so an old number
    can never be confused with a new one: only sharing is lost, never correctness.
    """

    __slots__ = ("_ids", "_next", "_limit")

    def __init__(self, limit: int = 1_000_000):
        self._ids: dict = {}
        self._next = itertools.count()
        self._limit = limit

    def __call__(self, key) -> int:
        key = _dumps(key, 2)
        found = self._ids.get(key)
        if found is None:
            if len(self._ids) >= self._limit:
                self._ids = {}
            found = self._ids.setdefault(key, next(self._next))
        return found


class EarleySet:
    """The parser state after one byte. ``sig`` identifies its future exactly (see below).

    Only the *kernel* items (those not predicted at this position) are stored one by one;
    what prediction adds is the same for the same set of predicted nonterminals, so it is
    shared through a cached :class:`Prediction`.
    """

    __slots__ = ("items", "waiting", "pred", "scans", "sig", "next_bytes", "local")

    def __init__(self, items, waiting, pred, scans):
        self.items = items      # set[(item, origin)]: kernel items (empty inside a lexeme)
        self.waiting = waiting  # symbol -> list[(item, origin)]: kernel items before symbol
        self.pred = pred        # symbol -> tuple[item]: predicted items (origin here) before symbol
        self.scans = scans      # (lexeme, dfa state) -> frozenset[origin]
        self.sig = None
        self.next_bytes = -1    # lazily: bit b set iff byte b can come next
        self.local = None       # lazily: depth -> local signature (see LocalSignatures)

    @property
    def n_items(self) -> int:
        """The number of kernel items (what the native sets answer without a Python set)."""
        return len(self.items)


_NO_PRED: dict = {}


class ParserTables:
    """The grammar flattened into integer tables for the recogniser's hot loop.

    Symbols: nonterminal ``n`` is ``n``; lexeme ``k`` is ``n_nonterminals + k``.
    Items: ``rule_first[r] + dot``; ``item_next[i]`` is the symbol after the dot or END.
    """

    def __init__(self, ir: GrammarIR, dfas: dict, native: bool | None = None, window: int = 0):
        """``native``: step with the C recogniser (default :data:`NATIVE`); its sets have
        the same attributes as :class:`EarleySet`. ``window``: the most bytes one step of
        the callers reads ahead (the longest token): signatures then only tell sets apart
        as far as that (links of counted chains alike within it share a class, see
        :func:`chain_aliases`); 0 keeps every nonterminal apart."""
        lexeme_names = list(ir.lexemes)
        # ignored lexemes get their own ids: the same DFA, but completing one resumes the
        # parse instead of advancing an item
        self.lexeme_names = lexeme_names + [f"%ignore {n}" for n in ir.ignore]
        lex_dfas = [dfas[n] for n in lexeme_names] + [dfas[n] for n in ir.ignore]
        n_plain = len(lexeme_names)
        self.is_ignore = [k >= n_plain for k in range(len(lex_dfas))]
        self.ignore_lexemes = list(range(n_plain, len(lex_dfas)))

        live = [not dfas[n].is_empty for n in lexeme_names]
        if NATIVE:
            made = _earley.rule_items(ir.rules, lexeme_names, live, ir.start, "$start")
        else:
            made = _rule_items_py(ir, lexeme_names, live, "$start")
        if made is None:
            raise GrammarError(f"the grammar's language is empty (start symbol {ir.start!r} "
                               "derives no string)", source=ir.source)
        (rules, self.nt_names, self.item_next, self.item_lhs, self.item_rule, self.rule_first,
         self.rules_of, self.relevant_item) = made
        nt_index = {name: a for a, name in enumerate(self.nt_names)}
        N = len(self.nt_names)
        self.n_nonterminals = N
        self.rule_list = rules
        self.accept_item = self.rule_first[0] + 1
        # positions inside a lexeme split into rules (see grammar.split): no ignored lexeme
        # starts there, and none resumes a parse there
        if SPLIT_TOPS in ir.meta or SPLIT_INNER in ir.meta:
            self.glued = [g for per_rule in glued_items(ir, rules) for g in per_rule]
        else:
            self.glued = [False] * len(self.item_next)   # (what glued_items gives without split lexemes)
        self.any_glued = any(self.glued)
        # items with the same left-hand side and the same symbols left to match have the same
        # future from the same origin (``S -> "," . v`` and ``S -> S "," . v``): signatures
        # name items by this class, so contexts that differ only there share their caches
        # Nonterminals are named by their alias: links of a counted chain whose rules agree
        # as far as ``window`` bytes can reach (see chain_aliases).
        alias = chain_aliases(ir, rules, nt_index, dfas, window)
        named_lhs, named_next = self.item_lhs, self.item_next
        if alias is not None:
            named_lhs = [alias[a] for a in named_lhs]
            named_next = [alias[s] if 0 <= s < N else s for s in named_next]
        if NATIVE:
            self.item_class = _earley.item_classes(named_lhs, named_next, self.glued, self.rule_first,
                                                   self.accept_item)
        else:
            self.item_class = self._item_classes_py(named_lhs, named_next)

        self.lex_rows = [d.rows for d in lex_dfas]
        self.lex_accept = [tuple(d.accepting.tolist()) for d in lex_dfas]
        self.lex_dfas = lex_dfas
        lex_nullable = [d.nullable for d in lex_dfas]
        if NATIVE:
            self.nullable = _earley.nullable_symbols(N, self.item_next, self.item_lhs, self.rule_first, lex_nullable)
        else:
            self.nullable = self._nullable(N, lex_nullable)
        # bit b of lex_first_bytes[k][q] is set iff byte b keeps lexeme k alive from q
        self.lex_first_bytes = [d.first_bytes for d in lex_dfas]
        self._predictions: dict = {}
        # (the Python DFA pipeline may hand over views: C wants contiguous rows)
        contiguous = tuple(np.ascontiguousarray(d.transitions) for d in lex_dfas)
        # per lexeme, the lexemes that may follow it (:meth:`_follow_lexemes_py`) and the
        # bytes that may, as ints and as 32 bytes each (what the native tables read); in C
        # where the native recogniser is built, from the DFAs' start rows
        if NATIVE:
            self.follow_lexemes, self._follow_nonterminals, self.follow_blob = _earley.follow_sets(
                N, self.item_next, self.item_lhs, self.rule_first, self.nullable,
                [d.n_states > 0 for d in lex_dfas], self.is_ignore, contiguous)
            blob = self.follow_blob
            self.follow_bytes = [int.from_bytes(blob[32 * k: 32 * k + 32], "little") for k in range(len(lex_dfas))]
        else:
            self.follow_lexemes = self._follow_lexemes_py()
            self.follow_bytes = self._follow_bytes()
            self.follow_blob = b"".join(f.to_bytes(32, "little") for f in self.follow_bytes)
        # Tuples, not lists, off the cyclic collector's lists from the start: every full
        # collection walks a list item by item (a 40,000-rule grammar's six per-item lists
        # of 111,000 items cost each one ~5 ms), and the first collection to see a fresh
        # tuple walks it too before it untracks it (9 ms, inside some mask).
        atoms = ("item_next", "item_lhs", "item_rule", "rule_first", "rule_list", "glued", "item_class",
                 "relevant_item", "nullable", "follow_lexemes", "follow_bytes", "is_ignore", "ignore_lexemes",
                 "lexeme_names", "nt_names", "rules_of", "lex_accept", "_follow_nonterminals")
        for name in atoms + ("lex_first_bytes", "lex_rows"):
            setattr(self, name, tuple(getattr(self, name)))
        untrack([getattr(self, name) for name in atoms])
        self.native = None
        if NATIVE if native is None else native:
            if _earley is None:
                raise RuntimeError("gramgen's native recogniser (gramgen.automata._earley) is not built")
            self.native = _earley.Tables(
                N, self.item_next, self.item_lhs, self.nullable, self.rules_of, contiguous,
                tuple(np.ascontiguousarray(d.accepting) for d in lex_dfas), self.is_ignore, self.glued,
                self.accept_item, self.follow_blob, self.item_class, self.relevant_item)
            # the hot entry points go straight to C (instance attributes shadow the methods)
            self.step = self.native.step
            self.allowed_bytes = self.native.allowed_bytes
            self.is_accepting = self.native.is_accepting
            self.inside_lexemes = self.native.inside_lexemes

    def _item_classes_py(self, named_lhs: list[int], named_next: list[int]) -> list[int]:
        """Per item, the number of its class (the same left-hand side, the same symbols left
        and the same glued flag), numbered in order of first appearance; the accepting item
        is a class of its own (what ``_earley.item_classes`` gives)."""
        classes: dict = {}
        out: list[int] = []
        for i in range(len(self.item_next)):
            end = i
            while self.item_next[end] != END:
                end += 1
            key = ((named_lhs[i], tuple(named_next[i:end]), self.glued[i])
                   if i != self.accept_item else "accept")
            out.append(classes.setdefault(key, len(classes)))
        return out

    def _follow_lexemes_py(self) -> list[int]:
        """For each lexeme, the set (a bitmask over lexemes) of lexemes that can start right
        where it ends (``_earley.follow_sets`` gives the same sets in C).

        A static over-approximation (FIRST/FOLLOW over the grammar; ignored lexemes may
        follow any lexeme and be followed by any), so a token that would end a lexeme and
        go on with something no follower can start is ruled out without the parser:
        ``abc`` cannot end NAME at ``a`` when NAME is never directly followed by a lexeme
        starting with a letter. See :attr:`follow_bytes` and ``automata.lexer_automaton``.
        """
        N = self.n_nonterminals
        n_lex = len(self.lex_dfas)
        n_sym = N + n_lex
        item_next, nullable = self.item_next, self.nullable
        first = [0] * N + [1 << k if self.lex_dfas[k].n_states else 0 for k in range(n_lex)]
        bodies = []
        for start in self.rule_first:
            end = start
            while item_next[end] != END:
                end += 1
            bodies.append((self.item_lhs[start], item_next[start:end]))

        # FIRST: a body's lhs inherits the FIRST of each symbol up to its first
        # non-nullable one; propagated along those inclusions with a work list
        feeds: list[list[int]] = [[] for _ in range(n_sym)]
        for lhs, body in bodies:
            for sym in body:
                feeds[sym].append(lhs)
                if not nullable[sym]:
                    break
        _propagate(first, feeds)
        ignored = 0
        for k in self.ignore_lexemes:
            ignored |= 1 << k
        # follow[sym] holds FIRST of what comes after it in a body, and follow[lhs] when
        # that rest is nullable: the first part is fixed now, the second an inclusion
        # lhs -> sym, propagated with a work list (one pass per body, not per iteration)
        follow = [0] * n_sym
        inherits: list[list[int]] = [[] for _ in range(n_sym)]
        for lhs, body in bodies:
            rest, rest_nullable = 0, True
            for sym in reversed(body):
                follow[sym] |= rest | ignored
                if rest_nullable:
                    inherits[lhs].append(sym)
                rest = first[sym] | (rest if nullable[sym] else 0)
                rest_nullable = rest_nullable and nullable[sym]
        _propagate(follow, inherits)
        #: per nonterminal, the lexemes that may start right after it (see follow_bytes_of)
        self._follow_nonterminals = follow[:N]
        everything = (1 << n_lex) - 1
        return [everything if self.is_ignore[k] else follow[N + k] | ignored for k in range(n_lex)]

    def _follow_bytes(self) -> list[int]:
        """For each lexeme, a bitmask of the bytes that can come right after it ends: the
        first bytes of the lexemes that may follow it (see :meth:`_follow_lexemes_py`)."""
        # (lexemes share their followers: each set once)
        memo: dict[int, int] = {}
        out = []
        for mask in self.follow_lexemes:
            found = memo.get(mask)
            if found is None:
                found = memo[mask] = self._first_bytes_of(mask)
            out.append(found)
        return out

    def _first_bytes_of(self, lexemes: int) -> int:
        """The bytes (a bitmask) that start one of ``lexemes`` (a bitmask over lexemes)."""
        acc = 0
        while lexemes:
            low = lexemes & -lexemes
            k = low.bit_length() - 1
            if self.lex_dfas[k].n_states:
                acc |= self.lex_first_bytes[k][0]
            lexemes ^= low
        return acc

    def follow_bytes_of(self, nonterminal: int) -> int:
        """A bitmask of the bytes that may come right after ``nonterminal`` ends (the first
        bytes of the lexemes that may start there, ignored ones included; an
        over-approximation like :attr:`follow_bytes`)."""
        ignored = 0
        for k in self.ignore_lexemes:
            ignored |= 1 << k
        return self._first_bytes_of(self._follow_nonterminals[nonterminal] | ignored)

    def _nullable(self, N: int, lex_nullable: list[bool]) -> list[bool]:
        """nullable[symbol] for every symbol code (in C: ``_earley.nullable_symbols``)."""
        nullable = [False] * N + lex_nullable[: len(lex_nullable)]
        changed = True
        while changed:
            changed = False
            for first in self.rule_first:
                i = first
                while self.item_next[i] != END and nullable[self.item_next[i]]:
                    i += 1
                lhs = self.item_lhs[first]
                if self.item_next[i] == END and not nullable[lhs]:
                    nullable[lhs] = changed = True
        return nullable

    # -- building sets -------------------------------------------------------------------

    def prediction(self, roots: frozenset) -> tuple[dict, tuple[int, ...]]:
        """What predicting ``roots`` at a position adds: the predicted items grouped by the
        symbol after their dot, and the lexemes that start there. Static, so cached."""
        found = self._predictions.get(roots)
        if found is not None:
            return found
        item_next, nullable, N = self.item_next, self.nullable, self.n_nonterminals
        seen_nt = set(roots)
        stack = list(roots)
        items: set[int] = set()
        while stack:
            for first in self.rules_of[stack.pop()]:
                i = first
                while True:
                    items.add(i)
                    sym = item_next[i]
                    if sym == END:
                        break
                    if sym < N and sym not in seen_nt:
                        seen_nt.add(sym)
                        stack.append(sym)
                    if not nullable[sym]:
                        break
                    i += 1
        by_sym: dict[int, list[int]] = {}
        for i in sorted(items):
            sym = item_next[i]
            if sym != END:
                by_sym.setdefault(sym, []).append(i)
        pred = {sym: tuple(v) for sym, v in by_sym.items()}
        lexemes = tuple(sym - N for sym in pred if sym >= N)
        found = (pred, lexemes)
        self._predictions[roots] = found
        return found

    def initial_set(self) -> EarleySet:
        first = self.rules_of[0][0]
        if self.native is not None:
            return self.native.initial_set(first)
        chart: list = []
        s = self._closure(chart, 0, [(first, 0)], {})
        return s

    def _closure(self, chart, j: int, agenda: list, scans: dict) -> EarleySet:
        """Complete from ``agenda`` (kernel items) and predict, into the set at ``j``."""
        items: set = set()
        waiting: dict = {}
        roots: set = set()
        item_next, item_lhs, nullable = self.item_next, self.item_lhs, self.nullable
        N = self.n_nonterminals
        while agenda:
            entry = agenda.pop()
            if entry in items:
                continue
            items.add(entry)
            it, origin = entry
            sym = item_next[it]
            if sym == END:
                if origin >= len(chart):  # only the start item, completed at position 0
                    continue
                _advance_over(agenda, chart[origin], item_lhs[it], origin)
                continue
            w = waiting.get(sym)
            if w is None:
                waiting[sym] = [entry]
            else:
                w.append(entry)
            roots.add(sym)
            if nullable[sym]:
                agenda.append((it + 1, origin))
        pred, lexemes = self.prediction(frozenset(s for s in roots if s < N)) if roots else (_NO_PRED, ())
        if items:
            here = frozenset((j,))
            started = [s - N for s in roots if s >= N]
            started.extend(lexemes)
            if self.ignore_lexemes and (not self.any_glued or not all(self.glued[it] for it, _ in items)):
                # (ignored lexemes start where an item outside split lexemes is)
                started.extend(self.ignore_lexemes)
            for k in started:
                key = (k, 0)
                prev = scans.get(key)
                scans[key] = here if prev is None else prev | here
        return EarleySet(items, waiting, pred, scans)

    def step(self, chart: list, byte: int) -> EarleySet | None:
        """The set after ``byte``, or None if no parse survives it."""
        cur = chart[-1]
        if not (self.allowed_bytes(cur) >> byte) & 1:
            return None
        new_scans: dict = {}
        agenda: list = []
        rows, accept = self.lex_rows, self.lex_accept
        for (k, q), origins in cur.scans.items():
            q2 = rows[k][q][byte]
            if q2 < 0:
                continue
            key = (k, q2)
            prev = new_scans.get(key)
            new_scans[key] = origins if prev is None else prev | origins
            if accept[k][q2]:
                self._complete(agenda, chart, k, origins)
        if not new_scans:
            return None
        if not agenda:
            return EarleySet(_EMPTY, _NO_PRED, _NO_PRED, new_scans)
        return self._closure(chart, len(chart), agenda, new_scans)

    def _complete(self, agenda: list, chart: list, lexeme: int, origins) -> None:
        """A lexeme matched from ``origins`` has ended: onto the agenda go the items it
        advances (Earley's completer), or, for an ignored lexeme, the items of the sets where
        it started (the parse resumes as if it were not there)."""
        if self.is_ignore[lexeme]:
            if self.any_glued:  # (no parse resumes inside a split lexeme)
                glued = self.glued
                for o in origins:
                    agenda.extend(e for e in chart[o].items if not glued[e[0]])
            else:
                for o in origins:
                    agenda.extend(chart[o].items)
        else:
            sym = self.n_nonterminals + lexeme
            for o in origins:
                _advance_over(agenda, chart[o], sym, o)

    @staticmethod
    def inside_lexemes(scans: dict) -> EarleySet:
        """The set of a position inside lexemes and nothing else: no items, only scans
        ((lexeme, dfa state) -> origins)."""
        return EarleySet(_EMPTY, _NO_PRED, _NO_PRED, scans)

    def completes_within(self, view: list, reads: "HorizonReads", lexeme: int, origins) -> bool:
        """Whether completing ``lexeme`` (being matched from ``origins``) right after the
        last set of ``view`` stays inside its horizon (``view, reads = tracked_view(...)``).

        The completion does the same work whatever byte ends the lexeme, so when this is
        False every token that ends this scan's lexeme reaches beyond the horizon."""
        agenda: list = []
        reads.strict = True  # stop at the first set beyond: the rest of the closure is not needed
        try:
            if self.native is not None:
                self.native.complete_closure(view, lexeme, list(origins))
            else:
                self._complete(agenda, view, lexeme, origins)
                self._closure(view, len(view), agenda, {})
        except _Reached:
            return False
        finally:
            reads.strict = False
        return True

    def allowed_bytes(self, s: EarleySet) -> int:
        """Bitmask of the bytes that can follow ``s`` (exact: symbols are productive)."""
        nb = s.next_bytes
        if nb < 0:
            nb = 0
            first = self.lex_first_bytes
            for k, q in s.scans:
                nb |= first[k][q]
            s.next_bytes = nb
        return nb

    def is_accepting(self, s: EarleySet) -> bool:
        return (self.accept_item, 0) in s.items

    def signature(self, chart: list, j: int, intern: Interner) -> int:
        """A number equal for two sets iff their futures are identical (with a ``window``:
        identical over the next ``window`` bytes, all a mask reads).

        The future of a set depends on its kernel items (those not predicted here), its
        scans, and, through origins, on the sets those refer to; origins are replaced by
        their own signatures, so equal signatures mean isomorphic charts (up to the links
        of counted chains that :func:`chain_aliases` names alike).
        """
        if self.native is not None:
            return intern(self.native.signature_of(chart[j], j, chart))
        return intern(self.signature_of(chart[j], j, lambda o: chart[o].sig))

    def signature_of(self, s: EarleySet, j: int, sig_of) -> tuple:
        """The relevant content of set ``s`` (at position ``j``) as a sorted tuple, with
        every other set it refers to replaced by ``sig_of(position)``; the set itself is
        written ``_SELF``."""
        if self.native is not None:
            return self.native.signature_of(s, j, sig_of)
        relevant, cls = self.relevant_item, self.item_class
        parts = list({(cls[it], _SELF if o == j else sig_of(o)) for it, o in s.items if relevant[it]})
        for (k, q), origins in s.scans.items():
            parts.append((-1 - k, q, tuple(sorted({_SELF if o == j else sig_of(o) for o in origins}))))
        parts.sort()
        return tuple(parts)


def _advance_over(agenda: list, s: EarleySet, sym: int, origin: int) -> None:
    """Earley's completer: the items of set ``s`` (at position ``origin``) that wait on
    ``sym``, moved past it, onto the agenda."""
    w = s.waiting.get(sym)
    if w:
        agenda.extend([(it + 1, o) for it, o in w])
    p = s.pred.get(sym)
    if p:
        agenda.extend([(it + 1, origin) for it in p])


class LocalSignatures:
    """Signatures of set ``j`` in which sets ``depth`` or more origin links away are opaque.

    Any computation that only touches sets within that horizon (see :func:`tracked_view`)
    gives the same result for equal local signatures, whatever lies beyond: this is what
    lets a mask computed inside one nesting context be reused inside another. Completed
    items are left out (their effect is already in the set), except the accepting one.
    A set always sits on the same chart prefix, so its local signatures are stored on it.
    """

    def __init__(self, tables: "ParserTables", chart: list, j: int, intern: Interner):
        self.tables, self.chart, self.j, self.intern = tables, chart, j, intern

    def at(self, depth: int):
        return self._sig(self.j, depth)

    def _sig(self, idx: int, d: int):
        if d == 0:
            return _OPAQUE
        st = self.chart[idx]
        local = st.local
        if local is None:
            local = st.local = {}
        found = local.get(d)
        if found is None:
            found = local[d] = self.intern(self.tables.signature_of(st, idx, lambda o: self._sig(o, d - 1)))
        return found


def tracked_view(chart: list, j: int, depth: int) -> tuple[list, HorizonReads]:
    """A copy of the chart in which reading a set ``depth`` or more origin links away from
    set ``j`` sets ``reads.read`` (or raises, while ``reads.strict`` is set); returns (view,
    reads). ``reads.wrapped`` lists the (index, wrapper, set) of the wrapped sets, so that
    a walk past its first such read can put the sets back (and read them at full speed).
    Only the sets exactly ``depth`` links away are wrapped (:class:`_Far`): a computation
    that starts at ``j`` learns the index of a farther set only by reading one of those
    first."""
    view = list(chart)
    reads = HorizonReads()
    inside = {j}
    frontier = {j}
    for _ in range(depth):
        nxt = set()
        for idx in frontier:
            st = chart[idx]
            for _, o in st.items:
                nxt.add(o)
            for origins in st.scans.values():
                nxt.update(origins)
        frontier = nxt - inside
        inside |= frontier
        if not frontier:
            break
    else:
        for idx in frontier:
            view[idx] = _Far(chart[idx], reads)
            reads.wrapped.append((idx, view[idx], chart[idx]))
    return view, reads


def chain_aliases(ir: GrammarIR, rules: list, nt_index: dict[str, int], dfas: dict,
                  window: int) -> list[int] | None:
    """Per nonterminal (by index), the index of the one signatures name it by: itself, or
    for a link of a chain of ``ir.meta[COUNTED_CHAINS]``, the first link whose rules agree
    with its own as far as ``window`` bytes can reach. None when every nonterminal is
    named by itself.

    Every rule of a link ``s_q`` is checked to be lexemes only, or lexemes followed by
    ``s_{q+1}`` (no other link anywhere in it); otherwise the link keeps its own name.
    Each lexeme before ``s_{q+1}`` matches at least one byte, so ``step`` bytes (the
    fewest before any next link) are read between predicting ``s_{q+i}`` and
    ``s_{q+i+1}``: from an item naming ``s_q``, ``window`` bytes predict at most
    ``s_q ... s_{q+window//step+1}``. Two links whose rules, and those of that many next
    links, are equal once each next link is written as "the next" (lexemes by name; past
    the chain's end, its end) derive the same parser steps over any ``window`` bytes. So
    sets that differ only by such links are told apart by nothing a token reads: they
    share masks and cached exit walks (a long string's masks at one block's end are
    reused at the next), and their signatures stay exact for the masks.
    """
    chains = ir.meta.get(COUNTED_CHAINS) if window > 0 else None
    if not chains:
        return None
    alias = list(range(len(nt_index)))
    bodies: dict[str, list[tuple[str, ...]]] = {}
    for lhs, rhs in rules:
        bodies.setdefault(lhs, []).append(rhs)
    fewest: dict[str, int] = {}
    memo: dict = {}

    def min_bytes(lexeme: str) -> int:
        if lexeme not in fewest:
            # (a lower bound read from the regex, exact but for classes of surrogates
            # only: a smaller step only compares more links ahead)
            fewest[lexeme] = fewest_bytes(ir.lexemes[lexeme], memo)
        return fewest[lexeme]

    shape_id: dict[frozenset, int] = {}   # a link's rules, each next link written 1 -> a number
    first_of: dict = {}
    for chain in chains:
        at = {name: q for q, name in enumerate(chain)}
        shapes: list[int | None] = []
        step = None
        for q, name in enumerate(chain):
            shape = [] if name in nt_index else None
            for rhs in bodies.get(name, ()) if shape is not None else ():
                head = rhs[:-1]
                for s in head:
                    if s in at or s not in dfas:   # a link, or a nonterminal, before the end
                        shape = None
                        break
                if shape is None:
                    break
                last = rhs[-1] if rhs else None
                if last in at:
                    if at[last] != q + 1:
                        shape = None
                        break
                    gap = 0
                    for s in head:
                        gap += min_bytes(s)
                    step = gap if step is None else min(step, gap)
                    shape.append(head + (1,))   # 1: "the next link" (names are strings)
                elif last is not None and last not in dfas:
                    shape = None   # another nonterminal: its own future is not compared
                    break
                else:
                    shape.append(rhs)
            shapes.append(None if shape is None else shape_id.setdefault(frozenset(shape), len(shape_id)))
        if not step or step < 1:
            continue
        ahead = window // step + 2
        shapes += [-1] * (ahead + 1)   # past the chain's end
        for q, name in enumerate(chain):
            key = tuple(shapes[q: q + ahead + 1])
            if None in key:
                continue
            alias[nt_index[name]] = first_of.setdefault(key, nt_index[name])
    return alias if any(a != n for n, a in enumerate(alias)) else None


def _rule_items_py(ir: GrammarIR, lexeme_names: list[str], live: list[bool], augmented: str):
    """The rules and items of :class:`ParserTables` (``_earley.rule_items`` is the same in C):
    the rules whose every symbol is productive (a live lexeme, or a nonterminal with such a
    rule; none where the start is a lexeme) after ``augmented -> start``, as (lhs, rhs)
    pairs; the nonterminals' names, numbered in order of first left-hand side; per item,
    the symbol after the dot (nonterminal ``n`` is ``n``, lexeme ``k`` is ``N + k``, END at
    a rule's end), its rule's left-hand side and rule; each rule's first item; each
    nonterminal's rules (by first item); per item, whether a set's future depends on it
    (it waits for something, or it accepts). None when the start derives no string."""
    productive, kept = productive_rules(ir.rules, [n for n, ok in zip(lexeme_names, live) if ok])
    if ir.start not in productive:
        return None
    rules = [] if ir.start in ir.lexemes else [(r.lhs, tuple(r.rhs)) for r, keep in zip(ir.rules, kept) if keep]
    rules = [(augmented, (ir.start,))] + rules
    nt_index: dict[str, int] = {}
    for lhs, _ in rules:
        nt_index.setdefault(lhs, len(nt_index))
    lex_index = {n: i for i, n in enumerate(lexeme_names)}
    N = len(nt_index)
    item_next: list[int] = []
    item_lhs: list[int] = []
    item_rule: list[int] = []
    rule_first: list[int] = []
    rules_of: list[list[int]] = [[] for _ in range(N)]
    for r, (lhs, rhs) in enumerate(rules):
        first = len(item_next)
        rule_first.append(first)
        rules_of[nt_index[lhs]].append(first)
        for sym in rhs:
            item_next.append(nt_index[sym] if sym in nt_index else N + lex_index[sym])
            item_lhs.append(nt_index[lhs])
            item_rule.append(r)
        item_next.append(END)
        item_lhs.append(nt_index[lhs])
        item_rule.append(r)
    accept_item = rule_first[0] + 1
    relevant = [nxt != END or i == accept_item for i, nxt in enumerate(item_next)]
    return (rules, list(nt_index), tuple(item_next), tuple(item_lhs), tuple(item_rule), tuple(rule_first),
            tuple(tuple(firsts) for firsts in rules_of), tuple(relevant))


def _propagate(sets: list[int], edges: list[list[int]]) -> None:
    """Close the bit sets under ``sets[y] |= sets[x]`` for every edge x -> y, in place,
    with a work list (each set grows at most once per new bit)."""
    work = [x for x in range(len(sets)) if sets[x] and edges[x]]
    while work:
        x = work.pop()
        fx = sets[x]
        for y in edges[x]:
            if fx & ~sets[y]:
                sets[y] |= fx
                work.append(y)
