"""Masks inside an automaton split into rules (a JSON string with a pattern and a
maxLength whose DFA passes the state limit, see gramgen.automata.split_automata) reuse a
recent position's mask: they stay exact against brute force of the unsplit grammar, the
reuse happens, and a wrong agreement depth would show."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import gramgen
from conftest import vocabulary
from gramgen.automata.split_automata import SplitAutomata
from gramgen.runtime.matcher import Matcher
from reference import ReferenceGrammar, brute_force_mask

#: (schema, the DFA state limit that splits its string into rules, a text that opens the string)
SCHEMAS = [
    ({"type": "string", "pattern": "^(?:[a-z]+ ){0,12}[a-z]+$", "maxLength": 40}, 100, '"'),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?:[a-z.,]+[ \\t]+){0,12}[a-z.,]+$",
                                              "maxLength": 36}}, "required": ["a"]}, 400, '{"a": "'),
    ({"type": "array", "items": {"type": "string", "pattern": "^[a-c]{2}(?:[a-c ]*[a-c])?$", "minLength": 3,
                                 "maxLength": 30}, "maxItems": 3}, 40, '["ab'),
    # non-ASCII letters (labels of several bytes) and a newline between words (a JSON escape)
    ({"type": "string", "pattern": "^(?:[a-zäöü€]+[ \\n]){0,10}[a-zäöü€]+$", "maxLength": 30}, 100, '"'),
]


def _compiled(schema, max_states, vocab):
    grammar = gramgen.Grammar.from_json_schema(schema)
    cg = gramgen.compile(grammar, vocab, max_dfa_states=max_states)
    assert cg.split_automata is not None, "the state limit should have split the string into an automaton"
    return grammar, cg


def _full(grammar, vocab, max_states):
    """The same grammar compiled alike, every mask computed in full (no reuse)."""
    cg = gramgen.compile(grammar, vocab, max_dfa_states=max_states)
    cg.split_automata = None
    return cg


def _walks(cg, oracle, vocab, rng, walks: int, steps: int, prefix: str = "") -> int:
    """Random walks from ``prefix``, each mask compared with ``oracle(text bytes)``;
    returns how many masks there were."""
    n = 0
    for _ in range(walks):
        m = cg.matcher()
        m.advance_text(prefix)
        data = prefix.encode()
        for _ in range(steps):
            got = set(np.flatnonzero(m.mask()).tolist())
            expected = oracle(data)
            assert got == expected, (data, sorted(got ^ expected)[:5])
            n += 1
            choices = sorted(t for t in got if t not in vocab.eos_token_ids)
            if not choices:
                break
            # mostly short tokens other than a closing quote: many positions inside the string
            short = [t for t in choices if len(vocab.token_bytes(t)) <= 2 and b'"' not in vocab.token_bytes(t)]
            t = rng.choice(short if short and rng.random() < 0.9 else choices)
            m.advance(t)
            data += vocab.token_bytes(t)
    return n


def _full_oracle(full):
    def oracle(data: bytes) -> set:
        m = full.matcher()
        m.advance_text(data)
        return set(np.flatnonzero(m.mask()).tolist())
    return oracle


def _brute_oracle(grammar, vocab):
    ref = ReferenceGrammar(grammar.ir)

    def oracle(data: bytes) -> set:
        chart = ref.initial()
        for b in data:
            chart = ref.feed(chart, b)
        return brute_force_mask(ref, chart, vocab)
    return oracle


@pytest.mark.parametrize("schema, max_states, prefix", SCHEMAS, ids=["words", "property", "items", "letters"])
@pytest.mark.parametrize("tname", ["gpt2", "llama2", "llama3"])
def test_masks_inside_split_automata_equal_full_masks(schema, max_states, prefix, tname, monkeypatch):
    """Against the masks computed in full (exact against brute force, tests/test_masks.py)."""
    vocab = vocabulary(tname)
    grammar, cg = _compiled(schema, max_states, vocab)
    compared, read = [], []
    agreement, by_characters = SplitAutomata.agreement, SplitAutomata.read_by_characters
    monkeypatch.setattr(SplitAutomata, "agreement", lambda *a: compared.append(1) or agreement(*a))
    monkeypatch.setattr(SplitAutomata, "read_by_characters", lambda *a: read.append(1) or by_characters(*a))
    oracle = _full_oracle(_full(grammar, vocab, max_states))
    n = _walks(cg, oracle, vocab, random.Random(f"{tname}/{max_states}"), 6, 45, prefix)
    assert n >= 40
    assert len(compared) >= 5, "positions inside the automaton should look for a neighbour's mask"
    assert len(read) >= 5, "tokens inside the automaton should be read by characters"


@pytest.mark.parametrize("tname", ["gpt2", "llama2"])
def test_masks_inside_a_split_automaton_equal_brute_force(tname):
    """Against the reference recogniser of the unsplit grammar, trying every token."""
    vocab = vocabulary(tname)
    schema, max_states, prefix = SCHEMAS[0]
    grammar, cg = _compiled(schema, max_states, vocab)
    assert _walks(cg, _brute_oracle(grammar, vocab), vocab, random.Random(tname), 1, 30, prefix) >= 20


def test_a_wrong_agreement_depth_gives_wrong_masks(monkeypatch):
    """Claiming every pair of states agrees as deep as asked reuses masks across the
    maxLength bound: the comparison catches it (the tests above can fail)."""
    vocab = vocabulary("gpt2")
    schema, max_states, prefix = SCHEMAS[0]
    grammar, cg = _compiled(schema, max_states, vocab)
    oracle = _full_oracle(_full(grammar, vocab, max_states))
    monkeypatch.setattr(SplitAutomata, "agreement", lambda self, x, a1, a2, cap: cap)
    with pytest.raises(AssertionError):
        _walks(cg, oracle, vocab, random.Random("spoiled"), 6, 45, prefix)


def test_wrong_first_byte_depths_give_wrong_masks(monkeypatch):
    """The same for the depths per first byte (the path taken where no state agrees as a
    whole): claiming the deepest for every byte shows."""
    vocab = vocabulary("gpt2")
    schema, max_states, prefix = SCHEMAS[0]
    grammar, cg = _compiled(schema, max_states, vocab)
    oracle = _full_oracle(_full(grammar, vocab, max_states))
    monkeypatch.setattr(SplitAutomata, "agreement", lambda self, x, a1, a2, cap: 0)
    monkeypatch.setattr(SplitAutomata, "first_byte_depths",
                        lambda self, x, a1, a2, cap: np.full(256, cap, dtype=np.int32))
    with pytest.raises(AssertionError):
        _walks(cg, oracle, vocab, random.Random("spoiled"), 6, 45, prefix)


@pytest.mark.parametrize("tname", ["gpt2", "llama3"])
def test_reading_every_token_by_characters_gives_wrong_masks(tname, monkeypatch):
    """Saying every token is read inside the automaton shows (the masks above can fail on
    what the walk by characters decides, multi-byte letters included)."""
    vocab = vocabulary(tname)
    schema, max_states, prefix = SCHEMAS[3]
    grammar, cg = _compiled(schema, max_states, vocab)
    oracle = _full_oracle(_full(grammar, vocab, max_states))
    monkeypatch.setattr(SplitAutomata, "read_by_characters",
                        lambda self, x, state, tt, ranks: np.ones(len(ranks), dtype=bool))
    with pytest.raises(AssertionError):
        _walks(cg, oracle, vocab, random.Random("spoiled"), 6, 45, prefix)


def test_walk_by_characters_decides_whole_characters_only():
    """What the walk by characters leaves to the parser: a JSON escape's backslash, a
    UTF-8 character cut off by the token's end, a stray continuation byte; multi-byte
    letters it decides. The set is the same at every state."""
    from gramgen.automata.token_table import TokenTable

    vocab = vocabulary("gpt2")
    schema, max_states, _ = SCHEMAS[3]
    _, cg = _compiled(schema, max_states, vocab)
    automata = cg.split_automata
    tokens = [b"ab", "äb".encode(), "€".encode(), "€".encode()[:2], b"\\n", b"a\\", b"\x80a", b"a b", b"A", b"a  b"]
    tt = TokenTable(tokens)
    _, decided = automata.by_characters(0, tt)
    by_bytes = dict(zip(tt.sorted_bytes, decided.tolist()))
    assert [by_bytes[t] for t in tokens] == [True, True, True, False, False, False, False, True, True, True]
    start = automata.starts[0]
    ranks = np.flatnonzero(decided)
    read = dict(zip((tt.sorted_bytes[r] for r in ranks), automata.read_by_characters(0, start, tt, ranks).tolist()))
    assert read == {b"ab": True, "äb".encode(): True, "€".encode(): True, b"a b": True, b"A": False, b"a  b": False}


def _brute_agreement(edges: dict, accepting: frozenset, a1: int, a2: int, cap: int) -> int:
    """The deepest d <= cap such that every label string of at most d labels (one byte
    each) is alive / accepted alike from both states."""
    labels = sorted({lab for out in edges.values() for lab, _ in out})

    def run(q, word):
        for lab in word:
            nxt = [t for l2, t in edges.get(q, ()) if l2 == lab]
            if not nxt:
                return None
            q = nxt[0]
        return q

    def alive(q):
        return q is not None and (q in accepting or bool(edges.get(q)))

    for d in range(cap + 1):
        for word in itertools.product(labels, repeat=d):
            q1, q2 = run(a1, word), run(a2, word)
            if alive(q1) != alive(q2) or alive(q1) and (q1 in accepting) != (q2 in accepting):
                return d - 1
    return cap


def test_agreement_depth_is_never_deeper_than_the_truth():
    """On random automata with one-byte labels the depth is a lower bound of the true
    agreement (sound), and exact on a counter."""
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(2, 7)
        edges = {}
        for q in range(n):
            out = [(lab, rng.randrange(n)) for lab in (1, 2) if rng.random() < 0.7]
            if out:
                edges[q] = tuple(out)
        accepting = frozenset(q for q in range(n) if rng.random() < 0.4 or q not in edges)
        a1, a2 = rng.randrange(n), rng.randrange(n)
        cap = 5
        got = SplitAutomata._agreement_depth(edges, accepting, a1, a2, cap) if a1 != a2 else cap
        assert 0 <= got <= max(0, _brute_agreement(edges, accepting, a1, a2, cap)), (edges, accepting, a1, a2)
    # a counter: state i reads one more label up to state 9, every state accepts
    chain = {i: ((1, i + 1),) for i in range(9)}
    every = frozenset(range(10))
    for i, j in [(0, 3), (2, 5), (6, 8)]:
        assert SplitAutomata._agreement_depth(chain, every, i, j, 20) == 9 - j
        assert _brute_agreement(chain, every, i, j, 20) == 9 - j


def test_grammars_without_split_automata_have_none():
    vocab = vocabulary("gpt2")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMAS[0][0]), vocab)
    assert cg.split_automata is None


def test_equal_strings_under_two_keys_share_one_automaton():
    """Equal split lexemes are split once (the second derives the first), and masks in the
    second string reuse positions of the first."""
    vocab = vocabulary("gpt2")
    string = {"type": "string", "pattern": "^(?:[a-z]+ ){0,12}[a-z]+$", "maxLength": 40}
    schema = {"type": "object", "properties": {"a": string, "b": dict(string)}, "required": ["a", "b"]}
    grammar, cg = _compiled(schema, 100, vocab)
    assert len(cg.split_automata.tops) == 1
    oracle = _full_oracle(_full(grammar, vocab, 100))
    rng = random.Random("two keys")
    assert _walks(cg, oracle, vocab, rng, 2, 25, '{"a": "ab cd", "b": "') >= 40


def _first_byte_depths_per_byte(automata, x, a1, a2, cap):
    """``SplitAutomata.first_byte_depths`` spelled byte by byte (the reference: the
    method decides each group of bytes that the same edges start with once)."""
    edges = automata.edges[x]
    e1, e2 = edges.get(a1, ()), edges.get(a2, ())
    out = np.empty(256, dtype=np.int32)
    for beta in range(256):
        g1 = [e for e in e1 if automata._label_starts(e[0]) >> beta & 1]
        g2 = [e for e in e2 if automata._label_starts(e[0]) >> beta & 1]
        if [label for label, _ in g1] != [label for label, _ in g2]:
            out[beta] = -1
            continue
        d = cap
        for (_, t1), (_, t2) in zip(g1, g2):
            if t1 != t2:
                d = min(d, automata.agreement(x, t1, t2, cap) + 1)
        out[beta] = d
    return out


def test_first_byte_depths_equal_the_byte_by_byte_reference():
    """Every pair of states of each test automaton (many pairs for the larger ones): the
    depths per first byte, decided per group of bytes, equal those decided per byte."""
    vocab = vocabulary("gpt2")
    rng = random.Random(5)
    pairs = kinds = 0
    for schema, max_states, _ in SCHEMAS:
        _, cg = _compiled(schema, max_states, vocab)
        automata = cg.split_automata
        cap = cg.classes.agreement_cap
        for x, edges in enumerate(automata.edges):
            states = sorted({a for a in edges} | {t for out in edges.values() for _, t in out})
            picked = [(a, b) for a in states for b in states] if len(states) <= 30 else \
                [(rng.choice(states), rng.choice(states)) for _ in range(600)]
            for a1, a2 in picked:
                got = automata.first_byte_depths(x, a1, a2, cap)
                assert got.tolist() == _first_byte_depths_per_byte(automata, x, a1, a2, cap).tolist(), (x, a1, a2)
                kinds += len(set(got.tolist())) > 2
                pairs += 1
    assert pairs > 500 and kinds > 20
