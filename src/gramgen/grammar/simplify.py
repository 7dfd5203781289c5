"""Language-preserving rewrites of a :class:`GrammarIR`.

Character-level grammars (GBNF, hand-written Lark) put one lexeme per character and one
helper rule per ``*``; the parser then does per-byte Earley work that a DFA could do.
:func:`collapse_regular` folds every non-recursive part of the grammar into lexemes so the
CFG parser only sees the genuinely recursive structure.

Lexemes here are never nullable: :func:`split_nullable_lexemes` moves the empty string out
of a lexeme into the rules (an empty-width token is ambiguous for a lexer and pointless to
mask on), so a tokenizer-driven engine never has to place a zero-length lexeme.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .ir import (EMPTY, NOTHING, Alt, Automaton, ByteRanges, CharRanges, GrammarIR, Regex, Repeat, Rule,
                 Seq, normalize_ranges)
from ._native import kernels

if kernels is not None:
    kernels.register_ir(Seq, CharRanges, ByteRanges, Alt, Repeat, NOTHING)

__all__ = ["collapse_regular", "split_nullable_lexemes", "nullable", "fewest_bytes", "without_empty",
           "regex_size", "seq", "alt", "is_nothing"]


# --------------------------------------------------------------------------------------
# Regex helpers


def is_nothing(rx: Regex) -> bool:
    """Whether ``rx`` is the empty language in normal form (an empty class or ``Alt(())``).

    Shallow on purpose: the constructors below keep their results normalized, and a
    deeper empty language left unreduced is still correct, just larger.
    """
    if isinstance(rx, (CharRanges, ByteRanges)):
        return not rx.ranges
    return isinstance(rx, Alt) and not rx.items


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _merge_repeats(x: Regex, y: Regex) -> Regex | None:
    """``x y`` as one Repeat when both repeat the same regex (``a a*`` -> ``a+``)."""
    # (inline: seq tries this for most neighbours)
    if x.__class__ is Repeat:
        xi, xmin, xmax = x.item, x.min, x.max
    else:
        xi, xmin, xmax = x, 1, 1
    if y.__class__ is Repeat:
        yi, ymin, ymax = y.item, y.min, y.max
    else:
        yi, ymin, ymax = y, 1, 1
    if xi is not yi and (xi.__class__ is not yi.__class__ or xi != yi):
        return None
    return Repeat(xi, xmin + ymin, _add(xmax, ymax))


def seq(items: Iterable[Regex]) -> Regex:
    """Concatenation, flattened, with adjacent repeats of one regex merged.

    Merging keeps the regexes of bounded repetitions (``x{0,n}`` lowered to a chain of
    rules) shallow: ``x x{0,2}`` becomes ``x{1,3}`` instead of a nested tree. In C where
    the grammar kernels are built (a schema's literals and keys: a tenth of its
    lowering in Python).
    """
    if kernels is not None:
        return kernels.seq(items)
    return _seq_py(items)


def _seq_py(items: Iterable[Regex]) -> Regex:
    """:func:`seq` in Python (the reference: the same nodes)."""
    out: list[Regex] = []
    for it in items:
        rest = ()
        if isinstance(it, Seq):
            subs = it.items
            try:
                flat = it._flat
            except AttributeError:
                flat = False
            if flat:
                # Made by seq: no item of it is nothing and no two neighbours merge. So only
                # its first item may merge with what came before, and the merged item cannot
                # merge with the second one (which would have merged with the first): the
                # rest is appended as it is. (Sequences of sequences are built level by
                # level: walking each item again at every level was quadratic.)
                if not out:
                    out.extend(subs)
                    continue
                subs, rest = subs[:1], subs[1:]
        else:
            subs = (it,)
        for sub in subs:
            cls = sub.__class__
            if cls is CharRanges or cls is ByteRanges:
                # the common case (characters of literals), without the generic equality
                if not sub.ranges:
                    return NOTHING
                if out:
                    prev = out[-1]
                    if prev.__class__ is Repeat or (prev.__class__ is cls and prev.ranges == sub.ranges):
                        merged = _merge_repeats(prev, sub)
                        if merged is not None:
                            out[-1] = merged
                            continue
                out.append(sub)
                continue
            if is_nothing(sub):
                return NOTHING
            # (repeats by class, as _merge_repeats reads them)
            if out and (cls is Repeat or out[-1].__class__ is Repeat or (out[-1].__class__ is cls and sub == out[-1])):
                merged = _merge_repeats(out[-1], sub)
                if merged is not None:
                    out[-1] = merged
                    continue
            out.append(sub)
        if rest:
            out.extend(rest)
    if len(out) == 1:
        return out[0]
    made = Seq(tuple(out))
    object.__setattr__(made, "_flat", True)
    return made


def alt(items: Iterable[Regex]) -> Regex:
    """Alternation, flattened; single-character branches merge into one class and an
    empty branch turns the rest into ``(...)?``."""
    out: list[Regex] = []
    chars: list[tuple[int, int]] = []
    char_at = -1
    seen: set[Regex] = set()
    has_empty = False
    for it in items:
        for sub in (it.items if isinstance(it, Alt) else (it,)):
            if sub.__class__ is Seq and not sub.items:   # EMPTY (without hashing sub)
                has_empty = True
            elif isinstance(sub, CharRanges):
                if char_at < 0:
                    char_at = len(out)
                    out.append(sub)
                chars.extend(sub.ranges)
            elif not is_nothing(sub) and sub not in seen:
                seen.add(sub)
                out.append(sub)
    if char_at >= 0:
        out[char_at] = CharRanges(normalize_ranges(chars))
    body = out[0] if len(out) == 1 else Alt(tuple(out))
    if not has_empty or nullable(body):
        return body
    if not out:
        return EMPTY
    if isinstance(body, Repeat) and body.min == 1:
        return Repeat(body.item, 0, body.max)
    return Repeat(body, 0, 1)


def nullable(rx: Regex) -> bool:
    """Whether ``rx`` matches the empty string."""
    if isinstance(rx, Seq):
        return all(nullable(i) for i in rx.items)
    if isinstance(rx, Alt):
        return any(nullable(i) for i in rx.items)
    if isinstance(rx, Repeat):
        return rx.min == 0 or nullable(rx.item)
    if isinstance(rx, Automaton):
        return _automaton_nullable(rx)
    return False


#: :func:`fewest_bytes` of a regex that matches nothing
NEVER = 1 << 30


def fewest_bytes(rx: Regex, memo: dict | None = None) -> int:
    """A lower bound on the bytes of ``rx``'s shortest word (:data:`NEVER` where it has
    none): exact but where a class holds only code points with no UTF-8 form (surrogates,
    which no word spells), read as if it did not. Read from the tree, not an automaton."""
    if memo is None:
        memo = {}
    found = memo.get(id(rx))
    if found is not None:
        return found
    if isinstance(rx, CharRanges):
        lo = min((a for a, b in rx.ranges if a <= b), default=None)
        out = NEVER if lo is None else 1 if lo < 0x80 else 2 if lo < 0x800 else 3 if lo < 0x10000 else 4
    elif isinstance(rx, ByteRanges):
        out = 1 if any(a <= b for a, b in rx.ranges) else NEVER
    elif isinstance(rx, Seq):
        out = min(NEVER, sum(fewest_bytes(i, memo) for i in rx.items))
    elif isinstance(rx, Alt):
        out = min((fewest_bytes(i, memo) for i in rx.items), default=NEVER)
    elif isinstance(rx, Repeat):
        out = (NEVER if rx.max is not None and rx.max < rx.min else 0 if rx.min == 0
               else min(NEVER, rx.min * fewest_bytes(rx.item, memo)))
    elif isinstance(rx, Automaton):
        # shortest paths from the start (Bellman-Ford rounds: the automata are small)
        dist = {rx.start: 0}
        for _ in range(rx.n_states):
            changed = False
            for a, label, b in rx.edges:
                if a in dist:
                    d = min(NEVER, dist[a] + fewest_bytes(label, memo))
                    if d < dist.get(b, NEVER):
                        dist[b] = d
                        changed = True
            if not changed:
                break
        out = min((dist.get(q, NEVER) for q in rx.accepting), default=NEVER)
    else:
        raise TypeError(f"not a regex node: {type(rx).__name__}")
    memo[id(rx)] = out
    return out


def _automaton_nullable(rx: Automaton) -> bool:
    """Whether an accepting state is reachable from the start over nullable labels."""
    seen, todo = {rx.start}, [rx.start]
    accepting = set(rx.accepting)
    while todo:
        q = todo.pop()
        if q in accepting:
            return True
        for a, label, b in rx.edges:
            if a == q and b not in seen and nullable(label):
                seen.add(b)
                todo.append(b)
    return False


def without_empty(rx: Regex) -> Regex:
    """A regex for the language of ``rx`` minus the empty string."""
    if not nullable(rx):
        return rx
    if isinstance(rx, Alt):
        return alt(without_empty(i) for i in rx.items)
    if isinstance(rx, Seq):
        # ne(a b...) = ne(a) b... | ne(b...)   (a is nullable here)
        if not rx.items:
            return NOTHING
        head, tail = rx.items[0], seq(rx.items[1:])
        return alt([seq([without_empty(head), tail]), without_empty(tail)])
    if isinstance(rx, Repeat):
        inner = without_empty(rx.item)
        if is_nothing(inner) or rx.max == 0:
            return NOTHING
        # a non-empty word of x{m,n} starts (after dropping empty factors) with a non-empty x
        rest_max = None if rx.max is None else rx.max - 1
        rest = Repeat(rx.item, max(rx.min - 1, 0), rest_max)
        if rest_max == 0:
            return inner
        return seq([inner, rest])
    if isinstance(rx, Automaton):
        return _automaton_without_empty(rx)
    raise TypeError(f"unexpected regex node {rx!r}")  # pragma: no cover


def _automaton_without_empty(rx: Automaton) -> Regex:
    """Two copies of the automaton: copy 0 has read only empty matches so far (nothing
    accepts there), copy 1 has read something; a non-empty label crosses from 0 to 1."""
    n = rx.n_states
    edges: list[tuple[int, Regex, int]] = []
    for a, label, b in rx.edges:
        edges.append((n + a, label, n + b))
        ne = without_empty(label)
        if not is_nothing(ne):
            edges.append((a, ne, n + b))
        if nullable(label):
            edges.append((a, EMPTY, b))
    return Automaton(2 * n, rx.start, tuple(edges), tuple(n + q for q in rx.accepting))


def regex_size(rx: Regex) -> int:
    """Number of AST nodes, counting shared subtrees once per use (what compiling costs)."""
    return _Sizes().measure(rx)[0]


_WALKED = (Seq, Alt, Repeat, Automaton)


class _Sizes:
    """(size, depth, expanded size) of regex nodes, memoized by node identity, found in
    one walk.

    One instance serves every rule of a grammar: a rule's regex contains the regexes of
    the rules it uses, so measuring each from scratch would walk them again and again.
    The memo keeps each node alive, so an identity is never reused while it is cached.
    """

    def __init__(self):
        self._memo: dict[int, tuple[Regex, int, int, int]] = {}

    def _of(self, rx: Regex) -> tuple[Regex, int, int, int]:
        """(rx, size, depth, expanded) of ``rx``."""
        memo = self._memo
        got = memo.get(id(rx))
        if got is not None:
            return got
        of = self._of
        kind = rx.__class__
        if kind is CharRanges or kind is ByteRanges:
            got = memo[id(rx)] = (rx, 1, 1, 1)
            return got
        if kind not in _WALKED:   # a subclass is walked as its base; a leaf is one node
            kind = next((c for c in _WALKED if isinstance(rx, c)), None)
        if kind is Seq or kind is Alt:
            # (the children mostly measured already: looked up here, not walked)
            size, depth, n = 1, 0, 1
            for item in rx.items:
                known = memo.get(id(item))
                if known is None:
                    known = of(item)
                size += known[1]
                if known[2] > depth:
                    depth = known[2]
                n += known[3]
            depth += 1
        elif kind is Repeat:
            _, size, depth, n = of(rx.item)
            size, depth = size + 1, depth + 1
            n = 1 + n * (rx.max if rx.max is not None else rx.min + 1)
        elif kind is Automaton:
            parts = [of(label) for _, label, _ in rx.edges]
            size = 1 + rx.n_states + sum(p[1] for p in parts)
            depth = 1 + max((p[2] for p in parts), default=0)
            n = rx.n_states + sum(p[3] for p in parts)
        else:
            size = depth = n = 1
        got = memo[id(rx)] = (rx, size, depth, n)
        return got

    def measure(self, rx: Regex) -> tuple[int, int]:
        """(size, depth) of ``rx``."""
        got = self._of(rx)
        return got[1], got[2]

    def expanded(self, rx: Regex) -> int:
        """Automaton positions once counted repeats are unrolled (what the DFA will cost)."""
        return self._of(rx)[3]


# --------------------------------------------------------------------------------------
# Grammar helpers


class _Names:
    """Fresh names that clash with nothing already used."""

    def __init__(self, used: Iterable[str]):
        self.used = set(used)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name = f"{base}~{k}"
            k += 1
        self.used.add(name)
        return name


def _prune(ir: GrammarIR, rules: list[Rule], lexemes: dict[str, Regex]) -> GrammarIR:
    """Keep what the start symbol and the ignored lexemes reach."""
    by_lhs: dict[str, list[Rule]] = defaultdict(list)
    for r in rules:
        by_lhs[r.lhs].append(r)
    seen = {ir.start, *ir.ignore}
    todo = [ir.start]
    while todo:
        for r in by_lhs.get(todo.pop(), ()):
            for s in r.rhs:
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
    out_rules, dup = [], set()
    for r in rules:
        if r.lhs in seen and r not in dup:
            dup.add(r)
            out_rules.append(r)
    out_lex = {k: v for k, v in lexemes.items() if k in seen}
    return GrammarIR(rules=out_rules, lexemes=out_lex, start=ir.start, ignore=ir.ignore,
                     source=ir.source, meta=dict(ir.meta))


def split_nullable_lexemes(ir: GrammarIR) -> GrammarIR:
    """Rewrite each nullable lexeme ``L`` into a rule ``L -> L' | ε`` with a non-nullable ``L'``.

    Ignored lexemes just lose their empty match (an empty ignore is a no-op).
    """
    bad = [n for n, rx in ir.lexemes.items() if nullable(rx)]
    if not bad:
        return ir
    names = _Names([*ir.lexemes, *(r.lhs for r in ir.rules)])
    lexemes = dict(ir.lexemes)
    rules = list(ir.rules)
    ignore = list(ir.ignore)
    for name in bad:
        ne = without_empty(lexemes.pop(name))
        if name in ignore:
            ignore.remove(name)
            if not is_nothing(ne):
                lexemes[name] = ne
                ignore.append(name)
            # the ignored lexeme may also be used by rules: give those the nullable view
            used = any(name in r.rhs for r in rules)
            if not used:
                continue
            rule_name = names.fresh(f"{name}?")
            rules = [Rule(r.lhs, tuple(rule_name if s == name else s for s in r.rhs)) for r in rules]
            rules.append(Rule(rule_name, ()))
            if not is_nothing(ne):
                rules.append(Rule(rule_name, (name,)))
            continue
        rules.append(Rule(name, ()))
        if not is_nothing(ne):
            new = names.fresh(f"{name}+")
            lexemes[new] = ne
            rules.append(Rule(name, (new,)))
    out = GrammarIR(rules=rules, lexemes=lexemes, start=ir.start, ignore=tuple(ignore),
                    source=ir.source, meta=dict(ir.meta))
    return out


# --------------------------------------------------------------------------------------
# collapse_regular


def _sccs(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively; leaves come first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(comp)
    return out


def _rule_regex(name: str, bodies: list[tuple[str, ...]], sym_rx) -> Regex | None:
    """The regex of ``name`` if its only recursion is linear self-recursion, else None.

    ``N -> N a | b N | c`` derives ``b* c a*``: the left-recursive helpers a frontend
    generates for ``*`` and ``+`` fold into a ``Repeat``.
    """
    base, left, right = [], [], []
    for body in bodies:
        count = body.count(name)
        if count == 0:
            base.append(body)
        elif count == 1 and body[0] == name:
            if len(body) > 1:
                left.append(body[1:])
        elif count == 1 and body[-1] == name:
            right.append(body[:-1])
        else:
            return None

    def body_rx(body: tuple[str, ...]) -> Regex:
        return seq(sym_rx(s) for s in body)

    core = alt(body_rx(b) for b in base)
    parts: list[Regex] = []
    if right:
        parts.append(Repeat(alt(body_rx(b) for b in right), 0, None))
    parts.append(core)
    if left:
        parts.append(Repeat(alt(body_rx(b) for b in left), 0, None))
    return seq(parts)


#: Deeper regexes stay rules: the recursive walks over the AST (here and in the DFA
#: compiler) must stay far from Python's recursion limit.
MAX_REGEX_DEPTH = 200


def _too_big(rx: Regex, max_nodes: int, max_expanded: int | None = None,
             sizes: _Sizes | None = None) -> bool:
    sizes = sizes or _Sizes()
    size, depth = sizes.measure(rx)
    if size > max_nodes or depth > MAX_REGEX_DEPTH:
        return True
    return max_expanded is not None and sizes.expanded(rx) > max_expanded


def collapse_regular(ir: GrammarIR, max_regex_nodes: int = 5000,
                     max_expanded: int | None = None) -> GrammarIR:
    """Replace every non-recursive nonterminal by one lexeme; the language is unchanged.

    Only sound without ``ignore`` (an ignored lexeme may sit between the lexemes that a
    collapsed rule would glue together), so such grammars are returned unchanged. A rule
    whose regex would exceed ``max_regex_nodes`` AST nodes stays a rule. The start symbol
    stays a rule (``start -> LEXEME`` when it collapses).
    """
    if ir.ignore:
        return ir
    bodies: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for r in ir.rules:
        bodies[r.lhs].append(r.rhs)
    graph = {n: sorted({s for b in bs for s in b if s in bodies}) for n, bs in bodies.items()}

    regex_of: dict[str, Regex] = {}
    sizes = _Sizes()

    def sym_rx(s: str) -> Regex:
        return ir.lexemes[s] if s in ir.lexemes else regex_of[s]

    for comp in _sccs(graph):
        if len(comp) != 1:
            continue
        (name,) = comp
        deps = [d for d in graph[name] if d != name]
        if any(d not in regex_of for d in deps):
            continue
        if any(s not in ir.lexemes and s not in bodies for b in bodies[name] for s in b):
            continue  # undefined symbol: leave it for validate() to report
        try:
            rx = _rule_regex(name, bodies[name], sym_rx)
            too_big = rx is None or _too_big(rx, max_regex_nodes, max_expanded, sizes)
        except RecursionError:
            too_big = True
        if not too_big:
            regex_of[name] = rx

    if not regex_of:
        return ir
    names = _Names([*ir.lexemes, *bodies])
    lexemes = dict(ir.lexemes)
    replaced: dict[str, list[Rule]] = {}
    for name, rx in regex_of.items():
        if name != ir.start and not nullable(rx):
            lexemes[name] = rx  # the rule's name is free now: reuse it for its lexeme
            replaced[name] = []
            continue
        # the start symbol, and nullable ones (lexemes never match ""), stay small rules
        ne = without_empty(rx)
        new = [Rule(name, ())] if nullable(rx) else []
        if not is_nothing(ne) or not new:  # an empty start language still needs a rule
            lex = names.fresh(f"{name}+" if nullable(rx) else f"{name}:lexeme")
            lexemes[lex] = ne
            new.append(Rule(name, (lex,)))
        replaced[name] = new
    rules: list[Rule] = []
    for r in ir.rules:
        if r.lhs not in regex_of:
            rules.append(r)
        elif r.lhs in replaced:
            rules.extend(replaced.pop(r.lhs))  # emitted once, where the rule first was
    return _prune(ir, rules, lexemes)
