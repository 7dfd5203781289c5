"""Deterministic automata over Unicode code points, for regex algebra in frontends.

Lexeme regexes have union, concatenation and repetition but no intersection or
complement. JSON Schema needs both at the level of *decoded* string content: ``pattern``
together with ``maxLength``, a ``format`` with a ``pattern``, property names that match
no declared name. We build small code-point DFAs (edges labelled by code-point ranges),
combine them with product constructions, and hand the result to the engine as an
:class:`~gramgen.grammar.ir.Automaton` whose edge labels a caller chooses (for JSON: the
escaped spellings of each range), so no conversion back to a regex is ever needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .._lru import SizedLRU
from ._native import kernels
from ..errors import CompileLimitError
from .ir import (EMPTY, MAX_CODEPOINT, Alt, Automaton, ByteRanges, CharRanges, Regex, Repeat, Seq, frozen_key,
                 normalize_ranges)

Ranges = tuple[tuple[int, int], ...]
Edges = list[tuple[int, int, int]]  # (lo, hi, target), sorted and disjoint

DEFAULT_MAX_STATES = 20_000


class CodepointDFA:
    """A DFA over code points: ``edges[s]`` holds sorted disjoint ``(lo, hi, target)``;
    state 0 is the start; a missing range means rejection."""

    __slots__ = ("edges", "accepting", "groups", "excluded")

    def __init__(self, edges: list[Edges], accepting: list[bool], groups: list | None = None,
                 excluded: tuple[str, ...] | None = None):
        self.edges = edges
        self.accepting = accepting
        #: the edges as :func:`to_automaton` groups them, where the maker knew them (see
        #: :func:`all_but`); None: found from the edges
        self.groups = groups
        #: where this is every string (of :data:`ANY_CHAR`) but some words (:func:`all_but`),
        #: those words; else None
        self.excluded = excluded

    @property
    def n_states(self) -> int:
        return len(self.accepting)

    def is_empty(self) -> bool:
        return not any(self.accepting)

    def matches(self, text: str) -> bool:
        """Whether the DFA accepts ``text`` (for tests and asserts)."""
        if not self.accepting:
            return False
        q = 0
        for ch in text:
            c = ord(ch)
            for lo, hi, t in self.edges[q]:
                if lo <= c <= hi:
                    q = t
                    break
            else:
                return False
        return self.accepting[q]


# ------------------------------------------------------------------- regex -> NFA


class _NFA:
    def __init__(self, budget: int):
        self.budget = budget
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []

    def state(self) -> int:
        if len(self.eps) >= self.budget:
            raise CompileLimitError(f"string constraint needs more than {self.budget} automaton states")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, rx: Regex, src: int) -> int:
        if isinstance(rx, CharRanges):
            dst = self.state()
            for lo, hi in rx.ranges:
                self.edges[src].append((lo, hi, dst))
            return dst
        if isinstance(rx, Seq):
            for item in rx.items:
                src = self.build(item, src)
            return src
        if isinstance(rx, Alt):
            dst = self.state()
            for item in rx.items:
                self.eps[self.build(item, src)].append(dst)
            return dst
        if isinstance(rx, Repeat):
            lo, hi = rx.min, rx.max
            if hi is not None and hi < lo:
                return self.state()
            for _ in range(lo):
                src = self.build(rx.item, src)
            if hi is None:
                head = self.state()
                self.eps[src].append(head)
                self.eps[self.build(rx.item, head)].append(head)
                return head
            dst = self.state()
            for _ in range(hi - lo):
                self.eps[src].append(dst)
                src = self.build(rx.item, src)
            self.eps[src].append(dst)
            return dst
        if isinstance(rx, Automaton):
            ids = [self.state() for _ in range(rx.n_states)]
            self.eps[src].append(ids[rx.start])
            for a, label, b in rx.edges:
                self.eps[self.build(label, ids[a])].append(ids[b])
            dst = self.state()
            for q in rx.accepting:
                self.eps[ids[q]].append(dst)
            return dst
        if isinstance(rx, ByteRanges):
            raise TypeError("raw byte classes have no code-point automaton")
        raise TypeError(f"not a regex node: {rx!r}")

    def closure(self, states) -> frozenset[int]:
        seen = set(states)
        todo = list(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)


def _split(edges: list[tuple[int, int, int]]) -> list[tuple[int, int, frozenset[int]]]:
    """Elementary intervals of overlapping ranges with the set of targets of each."""
    events: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, t in edges:
        events.setdefault(lo, []).append((1, t))
        events.setdefault(hi + 1, []).append((-1, t))
    active: dict[int, int] = {}
    out = []
    points = sorted(events)
    for i, p in enumerate(points):
        for delta, t in events[p]:
            n = active.get(t, 0) + delta
            if n:
                active[t] = n
            else:
                del active[t]
        if active and i + 1 < len(points):
            out.append((p, points[i + 1] - 1, frozenset(active)))
    return out


#: automata of equal regexes are shared (the same format or bounded string under many
#: properties of a schema, and across schemas): up to this many states in all
CACHE_STATES = 200_000
_cache: SizedLRU[CodepointDFA] = SizedLRU(CACHE_STATES, lambda d: d.n_states)


def clear_cache() -> None:
    """Forget the automata kept for reuse (benchmarks of cold compiles; memory)."""
    _cache.clear()


def from_regex(rx: Regex, *, max_states: int = DEFAULT_MAX_STATES) -> CodepointDFA:
    """Subset construction over code-point intervals, then trimming. The result is
    shared with later calls on an equal regex: treat it as immutable (every operation
    here builds a new automaton)."""
    try:
        key = (frozen_key(rx), max_states)   # (not the tree: see frozen_key)
        found = _cache.get(key)
    except TypeError:  # ranges given as lists: not hashable, not cached
        return _from_regex(rx, max_states)
    if found is not None:
        return found
    dfa = _from_regex(rx, max_states)
    # kept as tuples: the collector stops tracking tuples of atoms, where a list per state
    # of every kept automaton would be walked by each full collection
    dfa = CodepointDFA(tuple(map(tuple, dfa.edges)), tuple(dfa.accepting))
    _cache.put(key, dfa)
    return dfa


def _from_regex(rx: Regex, max_states: int) -> CodepointDFA:
    nfa = _NFA(max(100_000, 20 * max_states))
    start = nfa.state()
    final = nfa.build(rx, start)
    universal = _universal_states(nfa, final)
    # every subset holding a state from which all strings are accepted (the tail of an
    # unanchored pattern, ``P[\s\S]*``) accepts everything: one DFA state for all of them,
    # instead of one per combination of partial matches still in flight
    # a subset is keyed by its members with character edges (and the final state): the
    # epsilon-only states add nothing, and keying on them would split one state per way in
    # (an Automaton node's edges each end in their own NFA state)
    useful = [bool(out) for out in nfa.edges]
    useful[final] = True

    def key(states: frozenset[int]) -> frozenset[int]:
        return frozenset(s for s in states if useful[s])

    everything = key(nfa.closure(universal)) if universal else None
    first = nfa.closure([start])
    first = everything if universal and first & universal else key(first)
    index = {first: 0}
    order = [first]
    edges: list[Edges] = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        out: Edges = []
        raw = [e for s in cur for e in nfa.edges[s]]
        for lo, hi, targets in _split(raw):
            nxt = nfa.closure(targets)
            nxt = everything if universal and nxt & universal else key(nxt)
            j = index.get(nxt)
            if j is None:
                if len(order) >= max_states:
                    raise CompileLimitError(f"string constraint needs more than {max_states} DFA states")
                j = index[nxt] = len(order)
                order.append(nxt)
            if out and out[-1][2] == j and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi, j)
            else:
                out.append((lo, hi, j))
        edges.append(out)
    return trim(CodepointDFA(edges, [final in s for s in order]))


def _universal_states(nfa: _NFA, final: int, limit: int = 2_000) -> frozenset[int]:
    """NFA states from which every string is accepted (a sound under-approximation).

    Greatest fixpoint: start from the states whose epsilon-closure holds ``final`` and
    drop any whose character edges into the set do not cover every code point."""
    back: dict[int, list[int]] = {}
    for s, outs in enumerate(nfa.eps):
        for t in outs:
            back.setdefault(t, []).append(s)
    cands = {final}
    todo = [final]
    while todo:
        for s in back.get(todo.pop(), ()):
            if s not in cands:
                cands.add(s)
                todo.append(s)
                if len(cands) > limit:
                    return frozenset()
    closures: dict[int, frozenset[int]] = {}

    def closure(s: int) -> frozenset[int]:
        c = closures.get(s)
        if c is None:
            c = closures[s] = nfa.closure([s])
        return c

    universal = set(cands)
    changed = True
    while changed:
        changed = False
        for s in list(universal):
            covered = normalize_ranges([(lo, hi) for x in closure(s) for lo, hi, t in nfa.edges[x]
                                        if not closure(t).isdisjoint(universal)])
            if not _covers(covered, ANY_CHAR):
                universal.discard(s)
                changed = True
    return frozenset(universal)


def _covers(ranges: Ranges, wanted: Ranges) -> bool:
    """Whether the merged ``ranges`` include every range of ``wanted``."""
    return all(any(lo <= a and b <= hi for lo, hi in ranges) for a, b in wanted)


def strip_markers(dfa: CodepointDFA, bos: int, eos: int, *,
                  max_states: int = DEFAULT_MAX_STATES) -> CodepointDFA:
    """The texts ``w`` (code points up to U+10FFFF) for which ``dfa`` accepts
    ``bos^m w eos^n`` for some ``m, n >= 1``; the empty text when ``dfa`` accepts any
    string of markers alone (there both ends are one position: ``$^`` matches it).

    This is how anchors anywhere in a pattern get their exact zero-width meaning: with
    ``^`` read as the character ``bos`` and ``$`` as ``eos`` (see ``anchor_markers`` in
    :func:`gramgen.grammar.regex.parse_regex`), a match may use ``^`` only before any
    character of ``w`` and ``$`` only after all of them, as often as it likes, because
    the markers stand only at the two ends and nothing but an anchor reads them.
    """
    if dfa.is_empty():
        return CodepointDFA([], [])

    def step(q: int, c: int) -> int:
        for lo, hi, t in dfa.edges[q]:
            if lo <= c <= hi:
                return t
        return -1

    starts: list[int] = []
    q = step(0, bos)
    while q >= 0 and q not in starts:
        starts.append(q)
        q = step(q, bos)

    def ends(q: int) -> bool:
        seen: set[int] = set()
        q = step(q, eos)
        while q >= 0 and q not in seen:
            if dfa.accepting[q]:
                return True
            seen.add(q)
            q = step(q, eos)
        return False

    def empty_text() -> bool:
        # in the empty text both ends are one position, so anchors may come in any order
        seen, todo = {0}, [0]
        while todo:
            q = todo.pop()
            if dfa.accepting[q]:
                return True
            for c in (bos, eos):
                t = step(q, c)
                if t >= 0 and t not in seen:
                    seen.add(t)
                    todo.append(t)
        return False

    ok = [ends(s) for s in range(dfa.n_states)]
    # states accepting every continuation (a match seen in an unanchored search): a subset
    # holding one accepts everything, so it collapses to that state alone
    universal = {q for q in range(dfa.n_states) if dfa.accepting[q]}
    wanted = normalize_ranges(ANY_CHAR + ((bos, bos), (eos, eos)))
    changed = True
    while changed and universal:
        changed = False
        for q in list(universal):
            into = normalize_ranges([(lo, hi) for lo, hi, t in dfa.edges[q] if t in universal])
            if not _covers(into, wanted):
                universal.discard(q)
                changed = True
    anything = frozenset([min(universal)]) if universal else None
    # the start is its own entry (tagged None), since only it may accept the empty text
    first: tuple = (anything if anything is not None and not universal.isdisjoint(starts) else frozenset(starts),
                    None)
    index: dict = {first: 0}
    order: list = [first]
    edges: list[Edges] = []
    i = 0
    while i < len(order):
        cur = order[i][0]
        i += 1
        out: Edges = []
        raw = [(lo, min(hi, MAX_CODEPOINT), t) for s in cur for lo, hi, t in dfa.edges[s] if lo <= MAX_CODEPOINT]
        for lo, hi, targets in _split(raw):
            if anything is not None and not targets.isdisjoint(universal):
                targets = anything
            key = (targets, True)
            j = index.get(key)
            if j is None:
                if len(order) >= max_states:
                    raise CompileLimitError(f"string constraint needs more than {max_states} DFA states")
                j = index[key] = len(order)
                order.append(key)
            if out and out[-1][2] == j and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi, j)
            else:
                out.append((lo, hi, j))
        edges.append(out)
    accepting = [any(ok[s] for s in subset) for subset, _ in order]
    accepting[0] = empty_text()
    return trim(CodepointDFA(edges, accepting))


def length_range(dfa: CodepointDFA) -> tuple[int, int | None]:
    """The shortest and longest accepted lengths (longest None: unbounded) of a trimmed,
    non-empty DFA."""
    n = dfa.n_states
    dist = [-1] * n
    dist[0] = 0
    queue = [0]
    for q in queue:  # breadth first: the first accepting state found is the nearest
        for _, _, t in dfa.edges[q]:
            if dist[t] < 0:
                dist[t] = dist[q] + 1
                queue.append(t)
    shortest = min(dist[q] for q in range(n) if dfa.accepting[q] and dist[q] >= 0)
    # longest path in a DAG (every state of a trimmed DFA lies on an accepting path, so
    # any cycle makes the length unbounded)
    indeg = [0] * n
    for q in range(n):
        for _, _, t in dfa.edges[q]:
            indeg[t] += 1
    longest = [0] * n
    order = [q for q in range(n) if indeg[q] == 0]
    for q in order:
        for _, _, t in dfa.edges[q]:
            longest[t] = max(longest[t], longest[q] + 1)
            indeg[t] -= 1
            if indeg[t] == 0:
                order.append(t)
    if len(order) < n:
        return shortest, None
    return shortest, max(longest[q] for q in range(n) if dfa.accepting[q])


# ---------------------------------------------------------------- finite sets of words


def words_dfa(words) -> CodepointDFA:
    """Exactly these strings: their trie, deterministic and trim as it is built (the
    declared property names of an object; a subset construction over the alternation of
    the names cost a tenth of a median schema's compile)."""
    children: list[dict[int, int]] = [{}]
    terminal = [False]
    any_word = False
    for word in words:
        any_word = True
        q = 0
        for ch in word:
            c = ord(ch)
            nxt = children[q].get(c)
            if nxt is None:
                nxt = children[q][c] = len(children)
                children.append({})
                terminal.append(False)
            q = nxt
        terminal[q] = True
    if not any_word:
        return CodepointDFA([], [])
    return CodepointDFA([[(c, c, t) for c, t in sorted(kids.items())] for kids in children], terminal)


def all_but(words) -> CodepointDFA:
    """Every string of characters (:data:`ANY_CHAR`) except these: the trie of the words
    whose characters all are in ANY_CHAR, every node sending every other character to
    one accepting state that takes everything, every node accepting but the words' ends
    (what ``difference(ANY_CHAR*, words_dfa(words))`` recognizes, built in one pass).
    Its ``excluded`` holds the words of the trie. Its edges are made when first read
    (:class:`AllBut`): an object's other keys mostly need only the words (see
    ``strings.spelled``)."""
    words = tuple(words)
    return AllBut(words, tuple(w for w in words if _SURROGATE.search(w) is None))


_SURROGATE = re.compile("[\ud800-\udfff]")


class AllBut(CodepointDFA):
    """:func:`all_but` of some words, its edges, flags and groups made when first read
    (``excluded`` is known at once: the words without a surrogate). Never empty (every
    string but finitely many)."""

    __slots__ = ("words",)

    def __init__(self, words: tuple[str, ...], kept: tuple[str, ...]):
        self.words = words
        self.excluded = kept

    def _made(self, name: str):
        try:
            return _SLOT[name].__get__(self)
        except AttributeError:
            made = _all_but_now(self.words)
            for slot in ("edges", "accepting", "groups"):
                _SLOT[slot].__set__(self, getattr(made, slot))
            return _SLOT[name].__get__(self)

    edges = property(lambda self: self._made("edges"))
    accepting = property(lambda self: self._made("accepting"))
    groups = property(lambda self: self._made("groups"))

    def is_empty(self) -> bool:
        return False


_SLOT = {name: CodepointDFA.__dict__[name] for name in ("edges", "accepting", "groups")}


def _all_but_now(words: tuple[str, ...]) -> CodepointDFA:
    """:func:`all_but`, made now: in C where the grammar kernels are built (an object's
    other keys: a tenth of a median schema's lowering in Python)."""
    if kernels is None:
        return _all_but_py(words)
    made = kernels.all_but(tuple(words), SEVERAL_OF_ANY, _split_one_byte)
    if made is None:
        return CodepointDFA([[(lo, hi, 0) for lo, hi in ANY_CHAR]], [True], excluded=())
    return CodepointDFA(*made)


def _all_but_py(words) -> CodepointDFA:
    """:func:`all_but` in Python (the reference: equal edges, groups and flags)."""
    kept = tuple(w for w in words if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in w))
    trie = words_dfa(kept)
    if not trie.n_states:
        return CodepointDFA([[(lo, hi, 0) for lo, hi in ANY_CHAR]], [True], excluded=())
    free = trie.n_states
    edges: list[Edges] = []
    groups: list = []   # (see to_automaton)
    parts: dict = {}
    for out in trie.edges:
        s = len(edges)
        if out and all(0x20 <= c <= 0x7F and c != 0x22 and c != 0x5C for c, _, _ in out):   # (_in_one_byte)
            # (most nodes: children within _ONE_BYTE. Their groups as _state_groups finds
            # them, known here: the gaps to the free state first, whose one-byte part is
            # _ONE_BYTE without the children and whose rest is that of any character;
            # then each child, spelled as itself)
            mine: Edges = []
            gaps: list[tuple[int, int]] = []
            at = 0
            for c, _, t in out:
                if c > at:
                    gaps.append((at, c - 1))
                    mine.append((at, c - 1, free))
                mine.append((c, c, t))
                at = c + 1
            gaps += ((at, 0xD7FF), (0xE000, MAX_CODEPOINT))
            mine += ((at, 0xD7FF, free), (0xE000, MAX_CODEPOINT, free))
            edges.append(mine)
            groups.append((s, free, tuple(gaps), _one_byte_without(out), SEVERAL_OF_ANY))
            groups.extend((s, t, ((c, c),), ((c, c),), ()) for c, _, t in out)
            continue
        mine = []
        at_range = 0
        lo, hi = ANY_CHAR[0]
        # the children, ascending, cut out of ANY_CHAR in one pass: what
        # _split_ranges(ANY_CHAR, children) and a sort would give, but all_but of 300
        # names takes 7.5 ms this way and 24 ms that way
        for c, _, t in out:
            while c > hi:
                if lo <= hi:
                    mine.append((lo, hi, free))
                at_range += 1
                lo, hi = ANY_CHAR[at_range]
            if lo < c:
                mine.append((lo, c - 1, free))
            mine.append((c, c, t))
            lo = c + 1
        while True:
            if lo <= hi:
                mine.append((lo, hi, free))
            at_range += 1
            if at_range == len(ANY_CHAR):
                break
            lo, hi = ANY_CHAR[at_range]
        edges.append(mine)
        _state_groups(s, mine, parts, groups)
    edges.append([(lo, hi, free) for lo, hi in ANY_CHAR])
    _state_groups(free, edges[-1], parts, groups)
    return CodepointDFA(edges, [not t for t in trie.accepting] + [True], groups, kept)


def _one_byte_without(children: Edges) -> Ranges:
    """:data:`_ONE_BYTE` without the characters of ``children`` (a trie node's edges,
    ascending, each one character within it): the one-byte part of the node's gaps, what
    ``_split_one_byte`` gives for them, in one pass."""
    out: list[tuple[int, int]] = []
    j, n = 0, len(children)
    for lo, hi in _ONE_BYTE:
        at = lo
        while j < n and children[j][0] <= hi:
            c = children[j][0]
            if c > at:
                out.append((at, c - 1))
            at = c + 1
            j += 1
        if at <= hi:
            out.append((at, hi))
    return tuple(out)


# ---------------------------------------------------------------- algebra


def trim(dfa: CodepointDFA) -> CodepointDFA:
    """Keep the states reachable from the start that can reach acceptance; renumber."""
    n = dfa.n_states
    if n == 0:
        return dfa
    rev: list[list[int]] = [[] for _ in range(n)]
    for s, out in enumerate(dfa.edges):
        for _, _, t in out:
            rev[t].append(s)
    alive = {s for s in range(n) if dfa.accepting[s]}
    todo = list(alive)
    while todo:
        for p in rev[todo.pop()]:
            if p not in alive:
                alive.add(p)
                todo.append(p)
    if 0 not in alive:
        return CodepointDFA([], [])
    new = {0: 0}
    order = [0]
    i = 0
    while i < len(order):
        for _, _, t in dfa.edges[order[i]]:
            if t in alive and t not in new:
                new[t] = len(order)
                order.append(t)
        i += 1
    edges = [[(lo, hi, new[t]) for lo, hi, t in dfa.edges[s] if t in alive] for s in order]
    return CodepointDFA(edges, [dfa.accepting[s] for s in order])


def _product(a: CodepointDFA, b: CodepointDFA, accept: Callable[[bool, bool], bool],
             keep_missing_b: bool, max_states: int) -> CodepointDFA:
    """Product automaton; with ``keep_missing_b`` a missing edge of ``b`` leads to b's
    implicit dead state (index -1), as a difference needs."""
    if a.is_empty():
        return CodepointDFA([], [])
    index = {(0, 0 if b.n_states else -1): 0}
    order = [(0, 0 if b.n_states else -1)]
    edges: list[Edges] = []
    i = 0
    while i < len(order):
        qa, qb = order[i]
        i += 1
        out: Edges = []
        eb = b.edges[qb] if qb >= 0 else []
        for lo, hi, ta in a.edges[qa]:
            pieces: list[tuple[int, int, int]] = []
            cur = lo
            for blo, bhi, tb in eb:
                if bhi < cur or blo > hi:
                    continue
                if blo > cur and keep_missing_b:
                    pieces.append((cur, blo - 1, -1))
                pieces.append((max(blo, cur), min(bhi, hi), tb))
                cur = min(bhi, hi) + 1
                if cur > hi:
                    break
            if cur <= hi and keep_missing_b:
                pieces.append((cur, hi, -1))
            for plo, phi, tb in pieces:
                key = (ta, tb)
                j = index.get(key)
                if j is None:
                    if len(order) >= max_states:
                        raise CompileLimitError(
                            f"string constraint needs more than {max_states} automaton states")
                    j = index[key] = len(order)
                    order.append(key)
                out.append((plo, phi, j))
        out.sort()
        edges.append(out)
    acc = [accept(a.accepting[qa], qb >= 0 and b.accepting[qb]) for qa, qb in order]
    return trim(CodepointDFA(edges, acc))


def intersect(a: CodepointDFA, b: CodepointDFA, *, max_states: int = DEFAULT_MAX_STATES) -> CodepointDFA:
    return _product(a, b, lambda x, y: x and y, False, max_states)


def difference(a: CodepointDFA, b: CodepointDFA, *, max_states: int = DEFAULT_MAX_STATES) -> CodepointDFA:
    """Strings of ``a`` that ``b`` does not accept."""
    return _product(a, b, lambda x, y: x and not y, True, max_states)


#: Code points whose spelling is one byte in every label we use (printable ASCII but the
#: quote and the backslash, which JSON escapes); other ranges are spelled over several bytes
_ONE_BYTE: Ranges = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7F))


#: edges with the same multi-byte part and target that share a state for it (fewer copies
#: cost less than the state and the empty edges)
_SHARE_FROM = 4


def _in_one_byte(r: tuple[int, int]) -> bool:
    """Whether the range ``r`` lies within :data:`_ONE_BYTE`."""
    lo, hi = r
    return 0x20 <= lo and hi <= 0x7F and not (lo <= 0x22 <= hi or lo <= 0x5C <= hi)


def _join_adjacent(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted disjoint ranges with adjacent ones joined (what normalize_ranges gives for
    them, without checking that they are sorted and disjoint)."""
    out = [ranges[0]]
    for r in ranges[1:]:
        last = out[-1]
        if r[0] == last[1] + 1:
            out[-1] = (last[0], r[1])
        else:
            out.append(r)
    return tuple(out)


def _split_one_byte(ranges: Ranges) -> tuple[Ranges, Ranges]:
    """:func:`_split_ranges` by :data:`_ONE_BYTE`: ranges that lie within it (most gaps
    between a trie node's children) go in whole, the others are cut."""
    inside: list[tuple[int, int]] = []
    rest: list[tuple[int, int]] = []
    for r in ranges:
        lo, hi = r
        if hi < 0x20 or lo > 0x7F:
            rest.append(r)
        elif _in_one_byte(r):
            inside.append(r)
        else:
            a, b = _split_ranges((r,), _ONE_BYTE)
            inside += a
            rest += b
    return tuple(inside), tuple(rest)


def _split_ranges(ranges: Ranges, by: Ranges) -> tuple[Ranges, Ranges]:
    """(the part of ``ranges`` inside ``by``, the rest), for normalized ranges (and so are
    both parts)."""
    inside, rest = [], []
    for lo, hi in ranges:
        at = lo
        for a, b in by:
            if b < at:
                continue
            if a > hi:
                break
            if a > at:
                rest.append((at, a - 1))
            inside.append((max(a, at), min(b, hi)))
            at = min(b, hi) + 1
            if at > hi:
                break
        if at <= hi:
            rest.append((at, hi))
    return tuple(inside), tuple(rest)


def _state_groups(s: int, out: Edges, parts: dict, groups: list) -> None:
    """Append to ``groups`` state ``s``'s edges ``out`` grouped per target, in order of
    first appearance: ``(s, target, ranges, one-byte part, other part)``. A state's edges
    are sorted and disjoint, so a group is too: only adjacent ranges join. ``parts``:
    the splits made so far (many edges have the same ranges)."""
    by_target: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, t in out:
        found = by_target.get(t)
        if found is None:
            by_target[t] = [(lo, hi)]
        else:
            found.append((lo, hi))
    for t, found in by_target.items():
        ranges = (found[0],) if len(found) == 1 else _join_adjacent(found)
        got = parts.get(ranges)
        if got is None:
            if len(ranges) == 1 and _in_one_byte(ranges[0]):
                got = (ranges, ())   # (a trie's edges: one character each, mostly ASCII)
            else:
                got = _split_one_byte(ranges)
            parts[ranges] = got
        groups.append((s, t, ranges, *got))


def to_automaton(dfa: CodepointDFA, label: Callable[[Ranges], Regex]) -> Regex:
    """The DFA as an IR :class:`Automaton` whose edge for a set of code points is
    ``label(ranges)`` (e.g. every JSON spelling of those characters). ``label`` must spell
    the characters of :data:`_ONE_BYTE` (printable ASCII but ``"`` and ``\\``) as
    themselves, ``label(r) == CharRanges(r)`` for ``r`` within it, as ``CharRanges`` and
    ``json_char`` do: the one-byte part of a shared edge is labelled so directly.

    The part of an edge whose spellings take several bytes (non-ASCII characters,
    escapes), when at least :data:`_SHARE_FROM` edges have the same part and target, goes
    through a state they share: from the source an empty edge to it, from it the
    spelling. A byte-level DFA built from the automaton then has one set of
    partial-spelling states per (part, target), not one per source state: the DFA of "any
    name but these 300" (every trie node going to the same free state with the same
    non-ASCII characters) stays near the size of its minimal form while it is built,
    instead of passing the size limit by a factor of ten."""
    if dfa.is_empty():
        return Alt(())
    cache: dict[Ranges, Regex] = {}

    def labelled(key: Ranges) -> Regex:
        if key not in cache:
            cache[key] = label(key)
        return cache[key]

    groups = dfa.groups
    if groups is None:
        groups, parts = [], {}
        for s, out in enumerate(dfa.edges):
            _state_groups(s, out, parts, groups)
    accepting = tuple(s for s, acc in enumerate(dfa.accepting) if acc)
    if kernels is not None and groups.__class__ is list:
        edges, n_states = kernels.automaton_edges(groups, dfa.n_states, _SHARE_FROM, CharRanges, EMPTY, labelled)
    else:
        edges, n_states = _automaton_edges_py(groups, dfa.n_states, labelled)
    if dfa.n_states == 1 and not edges:
        return EMPTY
    return Automaton(n_states, 0, edges, accepting)


def _automaton_edges_py(groups: list, n_states: int, labelled: Callable[[Ranges], Regex]) -> tuple[tuple, int]:
    """The edges of :func:`to_automaton`'s automaton from the DFA's edge groups, and its
    number of states (the DFA's and the shared ones); in Python (the reference of
    ``_kernels.automaton_edges``)."""
    sources: dict[tuple[Ranges, int], int] = {}
    for _, t, _, _, several in groups:
        if several:
            sources[(several, t)] = sources.get((several, t), 0) + 1
    edges = []
    shared: dict[tuple[Ranges, int], int] = {}
    for s, t, ranges, one, several in groups:
        if not several:
            edges.append((s, CharRanges(ranges), t))   # (label spells these as themselves)
            continue
        if sources[(several, t)] < _SHARE_FROM:
            edges.append((s, labelled(ranges), t))
            continue
        if one:
            edges.append((s, CharRanges(one), t))   # (label spells these as themselves)
        via = shared.get((several, t))
        if via is None:
            via = shared[(several, t)] = n_states
            n_states += 1
            edges.append((via, labelled(several), t))
        edges.append((s, EMPTY, via))
    return tuple(edges), n_states


ANY_CHAR: Ranges = ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))
#: what of :data:`ANY_CHAR` is not in :data:`_ONE_BYTE` (controls, ``"``, ``\\``, non-ASCII)
SEVERAL_OF_ANY: Ranges = _split_ranges(ANY_CHAR, _ONE_BYTE)[1]


def as_regex(dfa: CodepointDFA) -> Regex:
    """The DFA as a plain lexeme regex node (edges labelled by their code points)."""
    return to_automaton(dfa, CharRanges)


def regex_and(a: Regex, b: Regex, *, max_states: int = DEFAULT_MAX_STATES) -> Regex:
    """A regex node for the intersection of two code-point regexes."""
    return as_regex(intersect(from_regex(a, max_states=max_states), from_regex(b, max_states=max_states),
                              max_states=max_states))
