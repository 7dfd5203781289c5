"""The one grammar representation every frontend lowers to.

A grammar is a context-free grammar over *lexemes*; a lexeme is a regular expression over
Unicode code points (or raw bytes) that the engine compiles to a byte-level DFA. Keeping
regular structure inside lexemes (instead of one rule per character) keeps the parser's
work small: most bytes only move a lexeme DFA.

Symbols in rule bodies are plain names: a name found in ``Grammar.lexemes`` is a lexeme,
any other name is a nonterminal and must have rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import GrammarError
from ._native import kernels

MAX_CODEPOINT = 0x10FFFF


class Regex:
    """Base class of the regular-expression AST used for lexemes.

    Nodes have slots, not a ``__dict__``: a schema lowers to tens of thousands of them,
    and each dict was one more object for the cyclic collector to track (``_hash`` keeps
    the memoized hash, see below; ``_flat`` marks a ``Seq`` that :func:`~gramgen.grammar.
    simplify.seq` made, whose items are normalized among themselves)."""

    __slots__ = ("_hash", "_flat")


@dataclass(frozen=True, slots=True)
class CharRanges(Regex):
    """One code point from a union of inclusive ranges (sorted, non-overlapping).

    Surrogates (U+D800..U+DFFF) have no UTF-8 encoding and are never matched.
    An empty tuple matches nothing.
    """

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ByteRanges(Regex):
    """One raw byte from a union of inclusive ranges within 0..255."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Seq(Regex):
    """Concatenation; ``Seq(())`` matches the empty string."""

    items: tuple[Regex, ...]


@dataclass(frozen=True, slots=True)
class Alt(Regex):
    """Alternation; ``Alt(())`` matches nothing."""

    items: tuple[Regex, ...]


@dataclass(frozen=True, slots=True)
class Repeat(Regex):
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Regex
    min: int
    max: int | None


class _Deferrable(Regex):
    """What an :class:`Automaton` made on first use keeps until then: its maker."""

    __slots__ = ("_make",)


@dataclass(frozen=True, slots=True)
class Automaton(_Deferrable):
    """A finite automaton whose edges are labelled by regexes (``(src, regex, dst)``).

    Lets a frontend hand over the result of automaton algebra (intersection, difference,
    e.g. a JSON Schema ``pattern`` with ``maxLength``) without converting it back to a
    regular expression, which can be exponentially larger. The start state is ``start``;
    the automaton matches a string when some path from ``start`` to a state in
    ``accepting`` spells it.

    :meth:`deferred` makes one whose fields are made when first read (see there).
    """

    n_states: int
    start: int
    edges: tuple[tuple[int, Regex, int], ...]
    accepting: tuple[int, ...]

    @classmethod
    def deferred(cls, make) -> "Automaton":
        """An automaton whose fields ``make()`` returns, as ``(n_states, start, edges,
        accepting)``, when one of them is first read (by anything: hashing, comparing,
        a DFA builder, ``repr``). For a lexeme that is usually built another way: the
        JSON Schema compiler's "any key but the declared ones", whose DFA is cut from any
        key's (``ir.meta[WITHOUT_PREFIXES]``), so its spelled automaton (a tenth of a
        median schema's lowering) is made only where something reads it. ``make`` must
        be a pure function of what it holds (no reference back to the grammar: the
        automaton may be untracked by the garbage collector before it is made)."""
        self = object.__new__(cls)
        object.__setattr__(self, "_make", make)
        return self

    def __getattr__(self, name: str):
        # (called only where a slot is empty: a deferred automaton's fields before use)
        if name not in _AUTOMATON_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            make = object.__getattribute__(self, "_make")
        except AttributeError:
            raise AttributeError(f"Automaton field {name!r} is not set") from None
        made = make()
        if len(made) != 4:
            raise TypeError("a deferred Automaton's maker must return (n_states, start, edges, accepting)")
        for field_name, value in zip(_AUTOMATON_FIELDS, made):
            object.__setattr__(self, field_name, value)
        try:
            object.__delattr__(self, "_make")
        except AttributeError:
            pass   # (another thread made it meanwhile: the same fields)
        return object.__getattribute__(self, name)


_AUTOMATON_FIELDS = ("n_states", "start", "edges", "accepting")


def _memoized_hash(generated):
    """Regexes are immutable trees hashed over and over (as cache keys, in simplification
    memos); the generated ``__hash__`` walks the whole tree every time. Keep it in the
    instance (outside the compared fields; not pickled, since ``hash(None)`` differs
    between processes before Python 3.12)."""

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            h = generated(self)
            object.__setattr__(self, "_hash", h)
            return h

    return __hash__


def _hash_checked_eq(generated):
    """Equality that first compares the (memoized) hashes: trees that differ usually
    differ there, without a walk over both."""

    def __eq__(self, other):
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        try:
            if hash(self) != hash(other):
                return False
        except TypeError:  # ranges given as lists: compared field by field
            pass
        return generated(self, other)

    return __eq__


def _reduce(self):
    return (type(self), tuple(getattr(self, f) for f in self.__dataclass_fields__))


for _cls in (CharRanges, ByteRanges, Seq, Alt, Repeat, Automaton):
    _cls.__hash__ = _memoized_hash(_cls.__hash__)
    _cls.__eq__ = _hash_checked_eq(_cls.__eq__)
    _cls.__reduce__ = _reduce


def frozen_key(rx: Regex, memo: dict | None = None) -> tuple:
    """``rx`` as nested tuples of strings and ints: equal for equal regexes, and, unlike
    the tree itself, untracked by the garbage collector once it has seen them (tuples of
    atoms are). Long-lived caches keyed by regexes keep this form, so that they do not add
    to what every full collection walks. Raises TypeError for unhashable fields (ranges
    given as lists), as hashing the tree would. ``memo``: by ``id``, for subtrees shared
    between the regexes of one grammar (the caller keeps the trees alive meanwhile)."""
    if memo is not None:
        found = memo.get(id(rx))
        if found is not None:
            return found
    parts: list = [rx.__class__.__name__]
    for name in rx.__dataclass_fields__:
        parts.append(_frozen_field(getattr(rx, name), memo))
    out = tuple(parts)
    hash(out)   # (TypeError now for an unhashable field)
    if memo is not None:
        memo[id(rx)] = out
    return out


def _frozen_field(value, memo):
    if isinstance(value, Regex):
        return frozen_key(value, memo)
    if isinstance(value, tuple):
        return tuple(_frozen_field(v, memo) for v in value)
    return value


EMPTY = Seq(())
NOTHING = Alt(())
#: the one-character classes of ASCII, made once (immutable: literals share them)
_ASCII = tuple(CharRanges(((o, o),)) for o in range(128))


def normalize_ranges(ranges) -> tuple[tuple[int, int], ...]:
    """Sort and merge inclusive ranges."""
    if type(ranges) is tuple:
        # already normal (sorted, disjoint, not adjacent: what most callers pass, from an
        # automaton's edges or an earlier normalization): returned as it is
        prev = -2
        for r in ranges:
            if type(r) is not tuple or len(r) != 2:
                break
            lo, hi = r
            if type(lo) is not int or type(hi) is not int or lo <= prev + 1 or hi < lo:
                break
            prev = hi
        else:
            return ranges
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges if a <= b):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def char(c: str) -> CharRanges:
    o = ord(c)
    if o < 128:
        return _ASCII[o]
    return CharRanges(((o, o),))


def literal(text: str) -> Regex:
    """A regex matching exactly ``text``."""
    if len(text) == 1:
        return char(text)
    return Seq(tuple(char(c) for c in text))


def byte_literal(data: bytes) -> Regex:
    return Seq(tuple(ByteRanges(((b, b),)) for b in data))


@dataclass(frozen=True)
class Rule:
    """``lhs -> rhs[0] rhs[1] ...``; an empty ``rhs`` derives the empty string."""

    lhs: str
    rhs: tuple[str, ...]


def productive_rules(rules: list[Rule], terminals) -> tuple[set[str], list[bool]]:
    """The symbols that derive some finite string (``terminals`` and every nonterminal with
    a rule whose symbols are all productive: the least fixed point), and per rule whether
    all its symbols are productive (then so is its left-hand side): the rules a pruned
    grammar keeps."""
    productive = set(terminals)
    # each rule counts its symbols not known productive yet (a symbol twice, twice); a
    # symbol found productive counts down the rules waiting on it, once per occurrence
    # (one pass over the rules, not one per level)
    missing: list[int] = []
    waiting: dict[str, list[int]] = {}
    found: list[str] = []
    for i, r in enumerate(rules):
        need = 0
        for s in r.rhs:
            if s not in productive:
                need += 1
                wait = waiting.get(s)
                if wait is None:
                    waiting[s] = [i]
                else:
                    wait.append(i)
        missing.append(need)
        if not need:
            found.append(r.lhs)
    while found:
        sym = found.pop()
        if sym in productive:
            continue
        productive.add(sym)
        for i in waiting.get(sym, ()):
            missing[i] -= 1
            if not missing[i]:
                found.append(rules[i].lhs)
    return productive, [not m for m in missing]


def prune_rules(rules, lexemes: dict, start: str) -> tuple[tuple[Rule, ...], dict] | None:
    """The rules that derive some finite string (:func:`productive_rules`) and that
    ``start`` reaches through them, and the lexemes it reaches (order kept); None when
    ``start`` derives no finite string. In C where the grammar kernels are built."""
    if kernels is not None:
        return kernels.prune(tuple(rules), lexemes, start)
    return _prune_rules_py(rules, lexemes, start)


def _prune_rules_py(rules, lexemes: dict, start: str) -> tuple[tuple[Rule, ...], dict] | None:
    """:func:`prune_rules` in Python (the reference)."""
    productive, kept = productive_rules(rules, lexemes)
    if start not in productive:
        return None
    rules = [r for r, keep in zip(rules, kept) if keep]
    by_lhs: dict[str, list[Rule]] = {}
    for r in rules:
        by_lhs.setdefault(r.lhs, []).append(r)
    seen = {start}
    todo = [start]
    while todo:
        for r in by_lhs.get(todo.pop(), []):
            for s in r.rhs:
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
    return tuple(r for r in rules if r.lhs in seen), {k: v for k, v in lexemes.items() if k in seen}


#: ``GrammarIR.meta`` key: chains of nonterminals ``(s_0, ..., s_n)`` that count (the blocks
#: of a long string), each ``s_q`` deriving ``s_{q+1}`` at the end of some of its rules. A
#: hint only: the parser checks the rules and names by one class the links whose next
#: rules agree as far as one token can read (see ``automata.earley.chain_aliases``).
COUNTED_CHAINS = "counted_chains"


#: ``GrammarIR.meta`` key: lexemes whose automaton is cheaper made from another regex's:
#: ``{name: (regex, base, prefixes)}``, where the lexeme is still ``regex`` (which stays what
#: it means) and ``regex`` has the words of ``base`` that start with none of ``prefixes``
#: (byte strings). A JSON key other than the declared names is any key whose spelling does
#: not start with a declared name's, closing quote included. A hint only: see
#: ``automata.dfa.compile_lexemes``.
WITHOUT_PREFIXES = "without_prefixes"


#: ``GrammarIR.meta`` key: lexemes whose regexes are constants of the frontend, not made
#: from the grammar's source: ``{name: regex}`` (a JSON Schema format's spelling, the same
#: object in every schema that uses the format). Their automata may be kept for the
#: process's life, as the standard lexemes' are (``automata.dfa.compile_lexemes``). A hint
#: only: used while the lexeme is still that regex.
CONSTANT_LEXEMES = "constant_lexemes"


@dataclass
class GrammarIR:
    """A context-free grammar over lexemes.

    ``ignore`` names lexemes that may appear between any two lexemes (and at both ends),
    as Lark's ``%ignore`` does.
    """

    rules: tuple[Rule, ...]
    lexemes: dict[str, Regex]
    start: str
    ignore: tuple[str, ...] = ()
    source: str = "<grammar>"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a tuple (any iterable of rules is taken): the cyclic collector stops tracking a
        # tuple of untracked rules, while every full collection walks a list of 40,000
        if type(self.rules) is not tuple:
            self.rules = tuple(self.rules)

    def validate(self) -> None:
        """Check that every referenced name is defined; raise GrammarError otherwise."""
        heads = {r.lhs for r in self.rules}
        if self.start not in heads and self.start not in self.lexemes:
            raise GrammarError(f"start symbol {self.start!r} is not defined", source=self.source)
        for r in self.rules:
            if r.lhs in self.lexemes:
                raise GrammarError(f"{r.lhs!r} is both a rule and a lexeme", source=self.source)
            for s in r.rhs:
                if s not in heads and s not in self.lexemes:
                    raise GrammarError(f"rule {r.lhs!r} uses undefined symbol {s!r}", source=self.source)
        for name in self.ignore:
            if name not in self.lexemes:
                raise GrammarError(f"ignored symbol {name!r} is not a lexeme", source=self.source)
