"""Random words of a grammar, and tokenisations of them, for tests."""

from __future__ import annotations

import random

from gramgen.automata.dfa import compile_regex
from gramgen.grammar.ir import GrammarIR


class WordSampler:
    """Samples random words of a GrammarIR (derivations bounded in depth and length)."""

    def __init__(self, ir: GrammarIR):
        self.ir = ir
        self.dfas = {n: compile_regex(rx) for n, rx in ir.lexemes.items()}
        self.rules: dict[str, list[tuple[str, ...]]] = {}
        for r in ir.rules:
            self.rules.setdefault(r.lhs, []).append(r.rhs)
        # height: fewest derivation levels to a word (lexemes 0); inf if unproductive
        inf = float("inf")
        self.height = {n: (0 if not d.is_empty else inf) for n, d in self.dfas.items()}
        changed = True
        while changed:
            changed = False
            for lhs, alts in self.rules.items():
                best = min((1 + max((self.height.get(s, inf) for s in rhs), default=0) for rhs in alts),
                           default=inf)
                if best < self.height.get(lhs, inf):
                    self.height[lhs] = best
                    changed = True
        self.dist = {n: self._distances(d) for n, d in self.dfas.items()}

    @staticmethod
    def _distances(dfa) -> list[float]:
        dist = [0.0 if dfa.accepting[q] else float("inf") for q in range(dfa.n_states)]
        changed = True
        while changed:
            changed = False
            for q in range(dfa.n_states):
                for t in set(dfa.rows[q]):
                    if t >= 0 and dist[t] + 1 < dist[q]:
                        dist[q] = dist[t] + 1
                        changed = True
        return dist

    def lexeme(self, name: str, rng: random.Random, max_len: int = 12) -> bytes:
        dfa, dist = self.dfas[name], self.dist[name]
        q, out = 0, bytearray()
        while True:
            if dfa.accepting[q] and (len(out) >= max_len or rng.random() < 0.3):
                return bytes(out)
            choices = [(b, t) for b, t in enumerate(dfa.rows[q]) if t >= 0]
            if len(out) >= max_len:
                choices = [(b, t) for b, t in choices if dist[t] < dist[q]]
            if not choices:  # an accepting state with no way on
                return bytes(out)
            # prefer printable ASCII so texts resemble real ones, but keep other bytes possible
            nice = [c for c in choices if 32 <= c[0] < 127]
            b, t = rng.choice(nice if nice and rng.random() < 0.85 else choices)
            out.append(b)
            q = t

    def word(self, rng: random.Random, max_depth: int = 12) -> bytes:
        out: list[bytes] = []
        ignore = self.ir.ignore

        def emit_ignore():
            if ignore and rng.random() < 0.2:
                out.append(self.lexeme(rng.choice(ignore), rng, 3))

        def gen(sym: str, depth: int) -> None:
            if sym in self.dfas:
                emit_ignore()
                out.append(self.lexeme(sym, rng))
                return
            alts = [a for a in self.rules[sym]
                    if all(self.height.get(s, float("inf")) < float("inf") for s in a)]
            if depth >= max_depth:
                h = min(1 + max((self.height[s] for s in a), default=0) for a in alts)
                alts = [a for a in alts if 1 + max((self.height[s] for s in a), default=0) == h]
            for s in rng.choice(alts):
                gen(s, depth + 1)

        gen(self.ir.start, 0)
        emit_ignore()
        return b"".join(out)


def tokenize(text: bytes, tokenizer, vocab) -> list[int]:
    """The tokenizer's own tokens when they spell ``text`` exactly, else greedy longest match."""
    try:
        ids = tokenizer.encode(text.decode("utf-8"), add_special_tokens=False)
        if b"".join(vocab.token_bytes(i) for i in ids) == text:
            return ids
    except UnicodeDecodeError:
        pass
    return greedy_tokenize(text, vocab)


def greedy_tokenize(text: bytes, vocab) -> list[int]:
    index = {}
    for i, t in enumerate(vocab.tokens):
        if t and i not in vocab.special_ids:
            index.setdefault(t, i)
    longest = max(len(t) for t in index)
    ids, pos = [], 0
    while pos < len(text):
        for n in range(min(longest, len(text) - pos), 0, -1):
            tid = index.get(text[pos:pos + n])
            if tid is not None:
                ids.append(tid)
                pos += n
                break
        else:
            raise ValueError(f"no token spells byte {text[pos]} at {pos}")
    return ids
