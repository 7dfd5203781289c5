"""Lexemes too big for one DFA, rewritten as rules over smaller lexemes.

A counted repeat such as ``(ab){2,50000}`` or ``[a-zа-я]{0,2048}`` needs DFA states in
proportion to its count; nested counts multiply. Instead of failing on a size limit, a
lexeme whose DFA would be too big becomes a nonterminal whose rules spell the same
language over smaller lexemes:

* a counted repeat ``x{lo,hi}`` cuts ``x`` into chunks ``x{k}`` (one lexeme, at most
  :data:`CHUNK` expanded positions) and counts the chunks with O(log n) rules: powers by
  doubling (``P_i -> P_(i-1) P_(i-1)``) and "at most m" by halving (``x{0,2t+1}`` is
  ``(xx){0,t} x?``), so each byte of text adds O(log n) Earley items, never O(n);
* a concatenation or an alternation becomes one rule over groups of its parts;
* a regex-labelled automaton becomes left-linear rules, one nonterminal per state.

Every rewrite is unambiguous wherever the original concatenations of ``x`` are (the chunk
counts of a text are determined by its length in copies of ``x``), so the parser's work
stays linear in the text.

Ignored lexemes (Lark's ``%ignore``) may come between any two lexemes, but not between
the parts of one split lexeme: the IR's ``meta`` records which nonterminals were split and
which were made for their parts, and the parser reads :func:`glued_items` to start no
ignored lexeme inside them.
"""

from __future__ import annotations

from .ir import EMPTY, Alt, Automaton, ByteRanges, CharRanges, GrammarIR, Regex, Repeat, Rule, Seq
from .simplify import _Names, _Sizes, is_nothing, nullable, without_empty
from ..errors import CompileLimitError

__all__ = ["CHUNK", "CountedRules", "glued_items", "split_lexemes"]

#: the most expanded character positions of one lexeme cut from a too-big one
CHUNK = 256

#: ``GrammarIR.meta`` keys: the lexemes split into nonterminals, and every rule and lexeme
#: made for their parts (see :func:`glued_items`)
SPLIT_TOPS = "split_lexemes"
SPLIT_INNER = "split_parts"
#: ``GrammarIR.meta`` key: each automaton split into left-linear rules, as ``(top, states,
#: accepting, start)``: the nonterminal deriving its language, ``(state, nonterminal)``
#: pairs, its accepting states and its start state (read by ``automata.split_automata``)
SPLIT_AUTOMATA = "split_automata"


def split_lexemes(ir: GrammarIR, names) -> tuple[GrammarIR, list[str]]:
    """``ir`` with each lexeme of ``names`` replaced by a nonterminal of the same name whose
    rules derive the same language over smaller lexemes; also the names of the new lexemes.

    Each call splits one level of the regex, so the new lexemes are strictly smaller; a
    caller whose new lexemes are still too big calls it again on those. Lexemes with equal
    regexes are split once, the others deriving the first (``name -> first``). Raises
    :class:`~gramgen.CompileLimitError` for an ignored lexeme (``ir.ignore``) and for a
    lexeme that is a single character class (nothing to split)."""
    names = list(names)
    ignored = [n for n in names if n in ir.ignore]
    if ignored:
        raise CompileLimitError(f"the ignored lexeme {ignored[0]!r} cannot be split into rules")
    splitter = _Splitter(ir)
    lexemes = dict(ir.lexemes)
    rules = list(ir.rules)
    meta = dict(ir.meta)
    tops, inner = set(meta.get(SPLIT_TOPS, ())), set(meta.get(SPLIT_INNER, ()))
    first_of: dict[Regex, str] = {}   # equal lexemes (one string schema under many keys) split once
    for name in names:
        rx = lexemes.pop(name)
        if name not in inner:
            tops.add(name)
        if rx in first_of:
            rules.append(Rule(name, (first_of[rx],)))
            continue
        first_of[rx] = name
        rules.extend(Rule(name, body) for body in splitter.alternatives(name, rx))
    rules.extend(splitter.rules)
    lexemes.update(splitter.lexemes)
    inner.update(r.lhs for r in splitter.rules)
    inner.update(splitter.lexemes)
    meta[SPLIT_TOPS], meta[SPLIT_INNER] = frozenset(tops), frozenset(inner)
    if splitter.automata:
        meta[SPLIT_AUTOMATA] = tuple(meta.get(SPLIT_AUTOMATA, ())) + tuple(splitter.automata)
    out = GrammarIR(rules=rules, lexemes=lexemes, start=ir.start, ignore=ir.ignore,
                    source=ir.source, meta=meta)
    return out, list(splitter.lexemes)


def glued_items(ir: GrammarIR, rules: list[tuple[str, tuple[str, ...]]]) -> list[list[bool]]:
    """Per rule of ``rules``, per dot position (0 .. len(rhs)): whether that position lies
    inside a split lexeme, where ignored lexemes may not start and a parse resumed after
    one may not continue. Positions in the rules of a split lexeme's own nonterminal are
    inside it except at its two ends; every position of the rules made for its parts is."""
    tops, inner = ir.meta.get(SPLIT_TOPS, ()), ir.meta.get(SPLIT_INNER, ())
    out = []
    for lhs, rhs in rules:
        if lhs in inner:
            out.append([True] * (len(rhs) + 1))
        elif lhs in tops:
            out.append([0 < dot < len(rhs) for dot in range(len(rhs) + 1)])
        else:
            out.append([False] * (len(rhs) + 1))
    return out


def _rep(x: Regex, lo: int, hi: int | None) -> Regex:
    """``x{lo,hi}``, without the trivial cases."""
    if hi == 0:
        return EMPTY
    if lo == hi == 1:
        return x
    return Repeat(x, lo, hi)


class CountedRules:
    """Counted repetition of a symbol in O(log n) rules, made by ``rule(alternatives) ->
    name`` (which may share equal rules). Each count has exactly one derivation."""

    def __init__(self, rule):
        self.rule = rule

    def power(self, unit: str, n: int) -> tuple[str, ...]:
        """A body for ``unit`` n times: the doubling rules P_i (2^i copies) of n's bits."""
        out: list[str] = []
        p = unit
        while n:
            if n & 1:
                out.append(p)
            n >>= 1
            if n:
                p = self.rule(((p, p),))
        return tuple(out)

    def at_most(self, unit: str, m: int) -> tuple[str, ...]:
        """A body for ``unit{0,m}``: ``u{0,2t+1} = (uu){0,t} u?`` and
        ``u{0,2t} = ε | u u{0,2t-1}``, so O(log m) rules."""
        if m == 0:
            return ()
        if m % 2 == 1:
            return self.at_most(self.rule(((unit, unit),)), m // 2) + (self.rule(((), (unit,))),)
        return (self.rule(((), (unit,) + self.at_most(unit, m - 1))),)

    def between(self, unit: str, lo: int, hi: int) -> tuple[str, ...]:
        """A body for ``unit{lo,hi}``."""
        return self.power(unit, lo) + self.at_most(unit, hi - lo)


class _Splitter:
    """The new rules and lexemes of one :func:`split_lexemes` call."""

    def __init__(self, ir: GrammarIR):
        self.names = _Names([*ir.lexemes, *(r.lhs for r in ir.rules)])
        self.sizes = _Sizes()
        self.rules: list[Rule] = []
        self.lexemes: dict[str, Regex] = {}
        self._lexeme_of: dict[Regex, str] = {}
        self._rule_of: dict[tuple, str] = {}
        self.base = "lexeme"
        self.chunk = CHUNK
        #: the automata split into rules, see :data:`SPLIT_AUTOMATA`
        self.automata: list[tuple] = []
        self._automaton_of: dict[Automaton, str] = {}

    @property
    def counted(self) -> CountedRules:
        """Counted repetition over :meth:`rule` (made per use: kept in an attribute, it would
        hold ``self`` through the bound method, a cycle that left the whole split to the
        garbage collector)."""
        return CountedRules(self.rule)

    # -- symbols ---------------------------------------------------------------------------

    def lexeme(self, rx: Regex) -> str:
        """A lexeme for ``rx`` (not nullable), one per distinct regex."""
        name = self._lexeme_of.get(rx)
        if name is None:
            name = self._lexeme_of[rx] = self.names.fresh(f"{self.base}#{len(self._lexeme_of)}")
            self.lexemes[name] = rx
        return name

    def rule(self, alternatives: tuple[tuple[str, ...], ...]) -> str:
        """A nonterminal with these alternatives, one per distinct set of them."""
        name = self._rule_of.get(alternatives)
        if name is None:
            name = self._rule_of[alternatives] = self.names.fresh(f"{self.base}/{len(self._rule_of)}")
            self.rules.extend(Rule(name, body) for body in alternatives)
        return name

    def piece(self, rx: Regex) -> tuple[str, ...]:
        """A body deriving ``rx`` with ``rx`` as one lexeme (its empty word by a rule)."""
        if not nullable(rx):
            return (self.lexeme(rx),)
        ne = without_empty(rx)
        if is_nothing(ne):
            return ()
        return (self.rule(((), (self.lexeme(ne),))),)

    # -- one level of a regex --------------------------------------------------------------

    def alternatives(self, name: str, rx: Regex) -> list[tuple[str, ...]]:
        """The bodies of the nonterminal replacing lexeme ``name``."""
        self.base = name
        # pieces at most half the size of the lexeme that failed: a lexeme still too big
        # after a split (many DFA states for few positions) is split into halves again
        self.chunk = max(1, min(CHUNK, self.sizes.expanded(rx) // 2))
        if isinstance(rx, Alt):
            return [self._group_body(g, Alt) for g in self._groups(rx.items)]
        if isinstance(rx, Automaton):
            return self._automaton(rx, name)
        return [self.body(rx)]

    def body(self, rx: Regex) -> tuple[str, ...]:
        if isinstance(rx, Seq):
            out: tuple[str, ...] = ()
            for g in self._groups(rx.items):
                out += self._group_body(g, Seq)
            return out
        if isinstance(rx, Alt):
            return (self.rule(tuple(self._group_body(g, Alt) for g in self._groups(rx.items))),)
        if isinstance(rx, Repeat):
            return self._repeat(rx)
        if isinstance(rx, Automaton):
            name = self._automaton_of.get(rx)
            if name is None:   # one string schema inside several key-value lexemes: once
                name = self._automaton_of[rx] = self._automaton(rx)
            return (name,)
        assert isinstance(rx, (CharRanges, ByteRanges))
        raise CompileLimitError(f"lexeme {self.base!r}: a single character class is too big for one DFA")

    def _groups(self, items: tuple[Regex, ...]) -> list[tuple[Regex, ...]]:
        """Consecutive items in groups of at most ``chunk`` expanded positions (at least one
        item each, and never all of them in one group: each must be a smaller lexeme)."""
        groups: list[tuple[Regex, ...]] = []
        cur: list[Regex] = []
        size = 0
        for it in items:
            n = self.sizes.expanded(it)
            if cur and size + n > self.chunk:
                groups.append(tuple(cur))
                cur, size = [], 0
            cur.append(it)
            size += n
        if cur:
            groups.append(tuple(cur))
        if len(groups) == 1 and len(items) > 1:
            return [(it,) for it in items]
        return groups

    def _group_body(self, group: tuple[Regex, ...], kind) -> tuple[str, ...]:
        if len(group) == 1 and self.sizes.expanded(group[0]) > self.chunk:
            return self.body(group[0])  # too big for one lexeme: split it now
        return self.piece(group[0] if len(group) == 1 else kind(group))

    def unit(self, x: Regex) -> str:
        """A symbol for ``x`` (not nullable): a lexeme, or a rule where ``x`` is too big."""
        if self.sizes.expanded(x) > self.chunk:
            return self.rule((self.body(x),))
        return self.lexeme(x)

    def _repeat(self, rx: Repeat) -> tuple[str, ...]:
        x, lo, hi = rx.item, rx.min, rx.max
        if nullable(x):  # x{lo,hi} with x nullable is x'{0,hi}
            x, lo = without_empty(x), 0
        if is_nothing(x) or hi == 0:
            return ()
        if hi is None:  # x{lo} x*, the star as left recursion over one lexeme of x
            star = self.names.fresh(f"{self.base}*")
            unit = self.unit(x)
            self.rules += [Rule(star, ()), Rule(star, (star, unit))]
            return self._exactly(x, lo) + (star,)
        # chunks of k copies: k < hi, so every lexeme made here is smaller than rx
        k = self._copies_per_chunk(x, hi)
        out = self._exactly(x, lo, k)
        d = hi - lo
        q, r = divmod(d, k)
        if k == 1:
            return out + self.counted.at_most(self.unit(x), d)
        if q == 0:
            return out + self.piece(_rep(x, 0, r))
        unit = self.lexeme(_rep(x, k, k))
        fewer = self.counted.at_most(unit, q - 1) + self.piece(_rep(x, 0, k - 1))  # 0 .. qk-1 copies
        full = self.counted.power(unit, q) + self.piece(_rep(x, 0, r))             # qk .. qk+r copies
        return out + (self.rule((fewer, full)),)

    def _copies_per_chunk(self, x: Regex, count: int) -> int:
        """Copies of ``x`` per chunk lexeme: as many as the chunk size allows, at most
        half of ``count`` (each chunk smaller than the repeat it comes from), at least 1."""
        return max(1, min(self.chunk // max(1, self.sizes.expanded(x)), count // 2))

    def _exactly(self, x: Regex, n: int, k: int | None = None) -> tuple[str, ...]:
        """``x{n}`` as chunks of ``k`` copies (default: as many as the chunk allows)."""
        if n == 0:
            return ()
        if k is None:
            k = self._copies_per_chunk(x, n)
        q, r = divmod(n, k)
        out = self.counted.power(self.unit(_rep(x, k, k)), q) if q else ()
        return out + (self.piece(_rep(x, r, r)) if r else ())

    def _automaton(self, rx: Automaton, top: str | None = None):
        """Left-linear rules: ``R_q`` derives the texts that lead from the start to ``q``.
        With ``top`` (the lexeme being replaced), the bodies of ``top``; else the name of a
        new nonterminal deriving the automaton's language."""
        reached = {rx.start} | {b for _, _, b in rx.edges}
        state = {q: self.names.fresh(f"{self.base}@{q}") for q in sorted(reached)}
        self.rules.append(Rule(state[rx.start], ()))
        for a, label, b in rx.edges:
            if a in reached:
                self.rules.append(Rule(state[b], (state[a],) + self._group_body((label,), Seq)))
        bodies = [(state[q],) for q in rx.accepting if q in reached]
        name = top if top is not None else self.rule(tuple(bodies))
        self.automata.append((name, tuple(sorted(state.items())),
                              tuple(sorted(q for q in rx.accepting if q in reached)), rx.start))
        return bodies if top is not None else name
