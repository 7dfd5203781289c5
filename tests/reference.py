"""An independent, deliberately simple recogniser used as the oracle in mask tests.

It shares nothing with the engine's parser: every lexeme DFA is expanded into a
right-linear grammar over byte classes (one nonterminal per DFA state), ``%ignore`` is
expanded into the rules (every lexeme occurrence is followed by ``IGNORE*`` and the start
is preceded by it), and a textbook Earley recogniser runs over single bytes. A byte string
is a viable prefix iff the Earley set after it is non-empty (all symbols are productive).
It is slow; tests call it through a prefix-sharing walk over the vocabulary.
"""

from __future__ import annotations

from gramgen.automata.dfa import compile_regex
from gramgen.grammar.ir import GrammarIR


class ReferenceGrammar:
    def __init__(self, ir: GrammarIR):
        dfas = {name: compile_regex(rx) for name, rx in ir.lexemes.items()}
        rules: list[tuple[str, tuple]] = []  # rhs items: str nonterminal or int byte bitmask

        def lexeme_nt(name: str) -> str:
            return f"<{name}@0>"

        for name, dfa in dfas.items():
            for q in range(dfa.n_states):
                targets: dict[int, int] = {}
                for b in range(256):
                    t = int(dfa.transitions[q, b])
                    if t >= 0:
                        targets[t] = targets.get(t, 0) | (1 << b)
                for t, bits in targets.items():
                    rules.append((f"<{name}@{q}>", (bits, f"<{name}@{t}>")))
                if dfa.accepting[q]:
                    rules.append((f"<{name}@{q}>", ()))
        ign = "<IGNORE*>"
        rules.append((ign, ()))
        for name in ir.ignore:
            rules.append((ign, (ign, lexeme_nt(name))))
        for name in ir.lexemes:
            follow = (lexeme_nt(name), ign) if ir.ignore else (lexeme_nt(name),)
            rules.append((f"<{name}>", follow))
        for r in ir.rules:
            rules.append((r.lhs, tuple(f"<{s}>" if s in ir.lexemes else s for s in r.rhs)))
        start = f"<{ir.start}>" if ir.start in ir.lexemes else ir.start
        rules.append(("<START>", (ign, start) if ir.ignore else (start,)))
        self.rules = _productive(rules)
        self.by_lhs: dict[str, list[int]] = {}
        for i, (lhs, _) in enumerate(self.rules):
            self.by_lhs.setdefault(lhs, []).append(i)
        self.nullable = _nullable(self.rules)

    def initial(self):
        return [self._close(set((r, 0, 0) for r in self.by_lhs.get("<START>", ())), [], 0)]

    def _close(self, items: set, chart: list, pos: int):
        """Earley predictor + completer; a set is (items, items indexed by next symbol)."""
        agenda = list(items)
        done: set = set()
        waiting: dict = {}
        while agenda:
            it = agenda.pop()
            if it in done:
                continue
            done.add(it)
            r, dot, origin = it
            lhs, rhs = self.rules[r]
            if dot == len(rhs):
                source = waiting if origin == pos else chart[origin][1]
                for (r2, d2, o2) in list(source.get(lhs, ())):
                    agenda.append((r2, d2 + 1, o2))
                continue
            sym = rhs[dot]
            waiting.setdefault(sym, []).append(it)
            if isinstance(sym, str):
                for r2 in self.by_lhs.get(sym, ()):
                    agenda.append((r2, 0, pos))
                if sym in self.nullable:
                    agenda.append((r, dot + 1, origin))
        return (frozenset(done), waiting)

    def feed(self, chart: list, byte: int):
        """The chart extended by one byte, or None if no item survives."""
        moved = set()
        for sym, its in chart[-1][1].items():
            if isinstance(sym, int) and (sym >> byte) & 1:
                moved.update((r, dot + 1, origin) for (r, dot, origin) in its)
        if not moved:
            return None
        return chart + [self._close(moved, chart, len(chart))]

    def accepting(self, chart: list) -> bool:
        return any(self.rules[r][0] == "<START>" and dot == len(self.rules[r][1]) and o == 0
                   for (r, dot, o) in chart[-1][0])

    def run(self, data: bytes):
        chart = self.initial()
        for b in data:
            chart = self.feed(chart, b)
            if chart is None:
                return None
        return chart


def _productive(rules):
    prod: set[str] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs not in prod and all(isinstance(s, int) or s in prod for s in rhs):
                prod.add(lhs)
                changed = True
    return [(lhs, rhs) for lhs, rhs in rules
            if lhs in prod and all(isinstance(s, int) or s in prod for s in rhs)]


def _nullable(rules) -> set[str]:
    null: set[str] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs not in null and all(isinstance(s, str) and s in null for s in rhs):
                null.add(lhs)
                changed = True
    return null


def brute_force_mask(ref: ReferenceGrammar, chart, vocab) -> set[int]:
    """Every token id whose bytes extend ``chart`` to a viable prefix, by trying them all
    (sharing the work for common prefixes); EOS ids when the text is complete."""
    tokens = sorted((t, i) for i, t in enumerate(vocab.tokens)
                    if t and i not in vocab.special_ids)
    allowed: set[int] = set()
    stack: list = [(b"", chart)]  # path of (prefix, chart) for the current token
    for data, tid in tokens:
        while not data.startswith(stack[-1][0]):
            stack.pop()
        prefix, ch = stack[-1]
        while ch is not None and len(prefix) < len(data):
            prefix = data[: len(prefix) + 1]
            ch = ref.feed(ch, data[len(prefix) - 1])
            stack.append((prefix, ch))
        if ch is not None:
            allowed.add(tid)
    if ref.accepting(chart):
        allowed.update(vocab.eos_token_ids)
    return allowed
