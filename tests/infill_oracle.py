"""An oracle for the infilling tests, independent of gramgen.

A small grammar is given as Lark text. Two recognisers read it:

- :meth:`Oracle.lark_accepts` runs lark's own Earley parser. gramgen's language is "the text
  can be cut into terminals in *any* way that parses, ``%ignore``d terminals between any two
  and at both ends" (docs/grammar-formats.md), which is lark's ``dynamic_complete`` lexer for
  ordinary terminals; lark matches ``%ignore``d terminals greedily only, so the test grammars
  write their ignored text as one run terminal, where greedy and any-split agree.
- :meth:`Oracle.accepts` is a character-level Earley recogniser written here: the rules come
  from lark's grammar loader, each terminal is a Thompson NFA built from its regex with
  ``re``'s own parser, and a lexeme in progress is a thread beside the Earley items. It
  reads a text one character at a time, and a text that no word begins with leaves it
  with nothing, which is what lets :meth:`Oracle.search` cut branches early.

:meth:`Oracle.search` enumerates the fillings of a template (segments and holes, holes read
by their ``min_bytes``/``max_bytes``/``tokens``/``max_tokens`` attributes): every string over
the oracle's alphabet for a byte hole, every sequence of toy tokens for a token hole, depth
first, cutting a branch as soon as its text is no prefix of a word. Earley columns are
hash-consed (a column is its items and threads, origins pointing at earlier columns), so
two fillings that leave the parser in the same state are explored once; the answer is the
same as trying every combination (``brute_force`` does that with lark, and the tests
compare the two). Unbounded holes are cut at ``cap`` characters, so "no" from
:meth:`search` is exact only when no hole was unbounded (``SearchResult.exact``).

The alphabet must hold one representative of every class of characters the grammar treats
alike (one digit where any digit does), so that a filling over the alphabet exists whenever
any filling does.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import lark
from lark.exceptions import LarkError

try:  # Python >= 3.11
    from re import _constants as sre_c
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c
    import sre_parse

_SELF = None  # an item's origin (a thread's start) when it is the column that holds it


# -- terminals as NFAs ---------------------------------------------------------------------

class _NFA:
    """Thompson NFA of one terminal regex over characters (no anchors or lookarounds)."""

    def __init__(self, regex: str):
        self.edges: list[list[tuple[tuple, int]]] = []  # state -> [(char test, target)]
        self.eps: list[list[int]] = []
        self.start = self._state()
        self.final = self._build(sre_parse.parse(regex), self.start)
        self.start_set = self._closure({self.start})
        self._steps: dict[tuple[frozenset, str], frozenset] = {}

    def _state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def _build(self, items, s: int) -> int:
        for op, av in items:
            if op in (sre_c.LITERAL, sre_c.NOT_LITERAL, sre_c.ANY, sre_c.IN):
                t = self._state()
                self.edges[s].append(((op, av), t))
                s = t
            elif op is sre_c.SUBPATTERN:
                _group, add_flags, del_flags, sub = av
                if add_flags or del_flags:
                    raise NotImplementedError(f"regex flags in a terminal: {av}")
                s = self._build(sub, s)
            elif op is sre_c.BRANCH:
                end = self._state()
                for alt in av[1]:
                    a = self._state()
                    self.eps[s].append(a)
                    self.eps[self._build(alt, a)].append(end)
                s = end
            elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
                lo, hi, sub = av
                for _ in range(lo):
                    s = self._build(sub, s)
                if hi is sre_c.MAXREPEAT:
                    loop = self._state()
                    self.eps[s].append(loop)
                    self.eps[self._build(sub, loop)].append(loop)
                    s = loop
                else:
                    end = self._state()
                    for _ in range(hi - lo):
                        self.eps[s].append(end)
                        s = self._build(sub, s)
                    self.eps[s].append(end)
                    s = end
            else:
                raise NotImplementedError(f"regex construct {op} in a terminal")
        return s

    def _closure(self, states) -> frozenset:
        todo, seen = list(states), set(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)

    def step(self, states: frozenset, ch: str) -> frozenset:
        key = (states, ch)
        out = self._steps.get(key)
        if out is None:
            out = self._closure({t for s in states for test, t in self.edges[s] if _char_test(test, ch)})
            self._steps[key] = out
        return out

    def is_final(self, states: frozenset) -> bool:
        return self.final in states

    def can_go_on(self, states: frozenset) -> bool:
        return any(self.edges[s] for s in states)


def _char_test(test, ch: str) -> bool:
    op, av = test
    c = ord(ch)
    if op is sre_c.LITERAL:
        return c == av
    if op is sre_c.NOT_LITERAL:
        return c != av
    if op is sre_c.ANY:
        return ch != "\n"
    negate = False
    hit = False
    for iop, iav in av:
        if iop is sre_c.NEGATE:
            negate = True
        elif iop is sre_c.LITERAL:
            hit = hit or c == iav
        elif iop is sre_c.RANGE:
            hit = hit or iav[0] <= c <= iav[1]
        elif iop is sre_c.CATEGORY:
            hit = hit or _category(iav, ch)
        else:
            raise NotImplementedError(f"character class item {iop}")
    return hit != negate


def _category(cat, ch: str) -> bool:
    tests = {
        sre_c.CATEGORY_DIGIT: ch.isdecimal(), sre_c.CATEGORY_NOT_DIGIT: not ch.isdecimal(),
        sre_c.CATEGORY_SPACE: ch.isspace(), sre_c.CATEGORY_NOT_SPACE: not ch.isspace(),
        sre_c.CATEGORY_WORD: ch.isalnum() or ch == "_",
        sre_c.CATEGORY_NOT_WORD: not (ch.isalnum() or ch == "_"),
    }
    return tests[cat]


# -- hash-consed Earley columns -------------------------------------------------------------

class _Column:
    """One position of the character-level Earley recogniser: its items (rule, dot, origin
    column) and its lexeme threads (terminal, NFA states, column where it started). Interned
    by content, so equal columns are one object and memo tables can key on it."""

    __slots__ = ("items", "threads", "waiting", "accepting", "at_boundary")


@dataclass
class SearchResult:
    """What :meth:`Oracle.search` found: one filling per hole (None: no filling within the
    bounds), and whether the bounds were the holes' own (no unbounded hole was cut)."""

    fillings: tuple[str, ...] | None
    exact: bool

    @property
    def feasible(self) -> bool:
        return self.fillings is not None


class Oracle:
    """Recognisers and filling enumeration for one grammar (Lark text) over ``alphabet``.

    ``recognise``: the same language written for the character-level recogniser, when the
    grammar's own form is slow for it (Earley keeps one item per open right-recursive
    step, so ``s: "a" s`` makes every column different; ``s: "a"*`` does not); the tests
    check that the two agree. lark always parses ``lark_text`` itself.
    """

    def __init__(self, lark_text: str, alphabet: str, start: str = "start", recognise: str | None = None):
        self.lark_text = lark_text
        self.alphabet = alphabet
        # ambiguity="forest": recognition only, no tree is built
        self.parser = lark.Lark(lark_text, parser="earley", lexer="dynamic_complete", start=start,
                                ambiguity="forest")
        self.start = start
        own = self.parser if recognise is None else lark.Lark(recognise, parser="earley", start=start)
        self.rules: list[tuple[str, tuple[str, ...]]] = [
            (r.origin.name, tuple(s.name for s in r.expansion)) for r in own.rules]
        self.rules_for: dict[str, list[int]] = {}
        for i, (lhs, _rhs) in enumerate(self.rules):
            self.rules_for.setdefault(lhs, []).append(i)
        self.nfa = {t.name: _NFA(t.pattern.to_regexp()) for t in own.terminals}
        self.ignore = tuple(own.ignore_tokens)
        self.nullable = self._nullable()
        self._interned: dict = {}
        self._steps: dict = {}
        self._memo: dict = {}   # pieces -> {(tail of parts, bytes or tokens used, column): fillings}
        self._tails: dict = {}  # a tail of parts -> its number
        self.col0 = None
        self.col0 = self._column([(r, 0, _SELF) for r in self.rules_for[start]], set(), start=True)

    # -- membership

    def lark_accepts(self, text: str | bytes) -> bool:
        """Whether lark's Earley parser accepts ``text`` (bytes: strict UTF-8, else False)."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                return False
        try:
            self.parser.parse(text)
        except LarkError:
            return False
        return True

    def accepts(self, text: str) -> bool:
        """Whether ``text`` is a word, by the character-level recogniser."""
        col = self._walk(self.col0, text)
        return col is not None and col.accepting

    # -- enumeration

    def search(self, segments, pieces: list[str] | None = None, cap: int = 5) -> SearchResult:
        """One filling of every hole that makes a word, trying them all (see the module
        docstring). Byte holes take strings over the alphabet (ASCII: bytes = characters),
        unbounded ones up to ``max(min_bytes, cap)``; token holes take sequences of ``pieces``."""
        parts, exact = self._parts(segments, cap)
        # Adjacent byte holes take together any string whose length is in the sum of their
        # ranges, so they are searched as one and its filling is shared out afterwards.
        groups: list[list[tuple[int, int]]] = []  # per searched hole, the bounds of its holes
        merged: list[tuple] = []
        for part in parts:
            if part[0] == "bytes" and merged and merged[-1][0] == "bytes":
                merged[-1] = ("bytes", merged[-1][1] + part[1], merged[-1][2] + part[2])
                groups[-1].append(part[1:])
                continue
            merged.append(part)
            if part[0] != "lit":
                groups.append([part[1:]])
        parts = merged
        if any(p[0] == "tok" for p in parts) and pieces is None:
            raise ValueError("a token hole needs the toy vocabulary's pieces")
        # The memo outlives the call: what a column can still reach depends only on the
        # parts that follow (and the pieces), so templates sharing a tail share the work.
        memo = self._memo.setdefault(tuple(pieces or ()), {})
        if len(memo) > 2_000_000:
            memo.clear()
        tails = [self._tails.setdefault(tuple(parts[i:]), len(self._tails)) for i in range(len(parts))]

        def go(i: int, used: int, col) -> tuple[str, ...] | None:
            if i == len(parts):
                return () if col.accepting else None
            key = (tails[i], used, col)
            if key in memo:
                return memo[key]
            kind, a, b = parts[i]
            out = None
            if kind == "lit":
                nxt = self._walk(col, a)
                out = None if nxt is None else go(i + 1, 0, nxt)
            else:
                if used >= a:
                    rest = go(i + 1, 0, col)
                    if rest is not None:
                        out = ("",) + rest
                if out is None and used < b:
                    for piece in (self.alphabet if kind == "bytes" else pieces):
                        nxt = self._walk(col, piece)
                        if nxt is None:
                            continue
                        rest = go(i, used + 1, nxt)
                        if rest is not None:
                            out = (piece + rest[0],) + rest[1:]
                            break
            memo[key] = out
            return out

        found = go(0, 0, self.col0)
        if found is None:
            return SearchResult(None, exact)
        fillings: list[str] = []
        for text, bounds in zip(found, groups):
            if len(bounds) == 1:  # one hole (a token hole always is)
                fillings.append(text)
                continue
            spare = len(text) - sum(lo for lo, _hi in bounds)
            for lo, hi in bounds:
                n = lo + min(spare, hi - lo)
                spare -= n - lo
                fillings.append(text[:n])
                text = text[n:]
        return SearchResult(tuple(fillings), exact)

    def brute_force(self, segments, pieces: list[str] | None = None, cap: int = 5) -> bool:
        """The same decision as :meth:`search`, by trying every combination with lark."""
        choices = [[seg.decode() if isinstance(seg, bytes) else seg] if isinstance(seg, (bytes, str))
                   else self.brute_fillings(seg, pieces, cap) for seg in segments]
        return any(self.lark_accepts("".join(c)) for c in itertools.product(*choices))

    def brute_fillings(self, hole, pieces: list[str] | None = None, cap: int = 5) -> list[str]:
        """Every filling of ``hole`` that :meth:`brute_force` tries."""
        ((kind, lo, hi),), _exact = self._parts([hole], cap)
        units = self.alphabet if kind == "bytes" else pieces
        return sorted({"".join(t) for n in range(lo, hi + 1) for t in itertools.product(units, repeat=n)})

    @staticmethod
    def _parts(segments, cap: int):
        """Segments as ("lit", text, _), ("bytes", lo, hi), ("tok", lo, hi); adjacent
        literals joined; whether no hole was cut at ``cap``."""
        parts: list[tuple] = []
        exact = True
        for seg in segments:
            if isinstance(seg, (bytes, str)):
                text = seg.decode("utf-8") if isinstance(seg, bytes) else seg
                if parts and parts[-1][0] == "lit":
                    parts[-1] = ("lit", parts[-1][1] + text, None)
                else:
                    parts.append(("lit", text, None))
                continue
            tokens, max_tokens = getattr(seg, "tokens", None), getattr(seg, "max_tokens", None)
            if tokens is not None:
                parts.append(("tok", tokens, tokens))
            elif max_tokens is not None:
                parts.append(("tok", 0, max_tokens))
            else:
                lo, hi = seg.min_bytes, seg.max_bytes
                if hi is None:
                    exact = False
                    hi = max(lo, cap)
                parts.append(("bytes", lo, hi))
        return parts, exact

    # -- random words

    def random_word(self, rng: random.Random, depth: int = 6, ignore_rate: float = 0.25, min_len: int = 0) -> str:
        """A word of the grammar by random derivation (rules beyond ``depth`` take the
        shortest way out), ignored text between terminals at ``ignore_rate``, at least
        ``min_len`` characters long."""
        shortest = self._shortest()
        out: list[str] = []

        def derive(sym: str, d: int) -> None:
            if sym in self.nfa:
                if self.ignore and rng.random() < ignore_rate:
                    out.append(self.random_lexeme(rng.choice(self.ignore), rng))
                out.append(self.random_lexeme(sym, rng))
                return
            options = self.rules_for[sym]
            if d > depth:
                best = min(shortest[r] for r in options)
                options = [r for r in options if shortest[r] == best]
            for s in self.rules[rng.choice(options)][1]:
                derive(s, d + 1)

        for _ in range(100):
            out.clear()
            derive(self.start, 0)
            word = "".join(out)
            if len(word) >= min_len and self.accepts(word):
                return word
        raise RuntimeError("no word found by random derivation")

    def random_lexeme(self, terminal: str, rng: random.Random, stop: float = 0.4) -> str:
        """A random string of ``terminal`` over the alphabet (at most a few characters)."""
        nfa = self.nfa[terminal]
        for _ in range(100):
            states, text = nfa.start_set, ""
            while True:
                options = [c for c in self.alphabet if nfa.step(states, c)]
                if nfa.is_final(states) and text and (not options or rng.random() < stop or len(text) > 6):
                    return text
                if not options or len(text) > 12:
                    break
                c = rng.choice(options)
                states = nfa.step(states, c)
                text += c
        raise RuntimeError(f"terminal {terminal} has no string over the alphabet")

    # -- the recogniser

    def _nullable(self) -> set[str]:
        nullable: set[str] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.rules:
                if lhs not in nullable and all(s in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        return nullable

    def _shortest(self) -> list[float]:
        """Per rule, the fewest terminals a derivation from it takes."""
        best: dict[str, float] = {}
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.rules:
                n = sum(1 if s in self.nfa else best.get(s, float("inf")) for s in rhs)
                if n < best.get(lhs, float("inf")):
                    best[lhs] = n
                    changed = True
        return [sum(1 if s in self.nfa else best.get(s, float("inf")) for s in rhs)
                for _lhs, rhs in self.rules]

    def _walk(self, col, text: str):
        for ch in text:
            if col is None:
                return None
            col = self._step(col, ch)
        return col

    def _step(self, col, ch: str):
        key = (col, ch)
        if key in self._steps:
            return self._steps[key]
        kernel: list = []
        threads: set = set()
        only_skipped = True  # only ignored text started here ended, nothing else goes on
        for term, states, origin in col.threads:
            nfa = self.nfa[term]
            nxt = nfa.step(states, ch)
            if not nxt:
                continue
            if nfa.can_go_on(nxt):
                threads.add((term, nxt, origin))
                only_skipped = False
            if nfa.is_final(nxt):
                if term in self.ignore:
                    kernel.extend(origin.items)
                    only_skipped = only_skipped and origin is col
                else:
                    kernel.extend(origin.waiting.get(term, ()))
                    only_skipped = False
        if kernel and only_skipped and col.at_boundary:
            out = col  # the same items as here, and no lexeme in progress: the same column
        else:
            out = self._column(kernel, threads) if kernel or threads else None
        self._steps[key] = out
        return out

    def _column(self, kernel, threads: set, start: bool = False):
        """Close ``kernel`` under prediction and completion; the interned column."""
        items: set = set()
        agenda = list(kernel)
        expected: set[str] = set()
        while agenda:
            item = agenda.pop()
            if item in items:
                continue
            items.add(item)
            rule, dot, origin = item
            lhs, rhs = self.rules[rule]
            if dot == len(rhs):
                if origin is not _SELF:  # an empty derivation here is the nullable shortcut's
                    agenda.extend(origin.waiting.get(lhs, ()))
                continue
            sym = rhs[dot]
            if sym in self.nfa:
                expected.add(sym)
                continue
            agenda.extend((r, 0, _SELF) for r in self.rules_for[sym])
            if sym in self.nullable:
                agenda.append((rule, dot + 1, origin))
        threads = set(threads)
        threads.update((t, self.nfa[t].start_set, _SELF) for t in expected)
        if items:
            threads.update((t, self.nfa[t].start_set, _SELF) for t in self.ignore)
        accepting = any(self.rules[r][0] == self.start and d == len(self.rules[r][1])
                        and (o is self.col0 or (start and o is _SELF)) for r, d, o in items)
        # Completed items are left out of the key: their completions are already in the
        # column, so they change nothing later (ignored text copies them again, to the
        # same effect), except acceptance, which the key holds.
        open_items = frozenset(it for it in items if it[1] < len(self.rules[it[0]][1]))
        key = (start, accepting, open_items, frozenset(threads))
        col = self._interned.get(key)
        if col is not None:
            return col
        col = _Column()
        col.items = [(r, d, col if o is _SELF else o) for r, d, o in items]
        col.threads = [(t, s, col if o is _SELF else o) for t, s, o in threads]
        col.waiting = {}
        for r, d, o in col.items:
            rhs = self.rules[r][1]
            if d < len(rhs):
                col.waiting.setdefault(rhs[d], []).append((r, d + 1, o))
        col.accepting = accepting
        col.at_boundary = all(o is col and s == self.nfa[t].start_set for t, s, o in col.threads)
        self._interned[key] = col
        return col


# -- helpers for the tests -------------------------------------------------------------------

def splits_into(text: str | bytes, pieces, lo: int, hi: int) -> bool:
    """Whether ``text`` is a concatenation of between ``lo`` and ``hi`` of ``pieces``."""
    reach = {0: {0}}  # position -> numbers of pieces that end there
    for i in range(len(text) + 1):
        for n in sorted(reach.get(i, ())):
            if n >= hi:
                continue
            for p in pieces:
                if p and text[i:i + len(p)] == p:
                    reach.setdefault(i + len(p), set()).add(n + 1)
    return any(lo <= n <= hi for n in reach.get(len(text), ()))
