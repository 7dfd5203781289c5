"""The grammar layer's C kernels (``gramgen/grammar/_kernels.c``) against their Python
references, on random inputs: equal output, not merely equivalent automata."""

from __future__ import annotations

import collections
import os
import random

import pytest

from gramgen.grammar import cpdfa, ir
from gramgen.grammar.ir import NOTHING, Alt, ByteRanges, CharRanges, GrammarIR, Repeat, Rule, Seq
from gramgen.grammar.json_schema import strings
from gramgen.grammar.regex import parse_regex

try:   # (the module itself: under GRAMGEN_NATIVE=0 too, where gramgen runs the references)
    import gramgen.grammar._kernels as kernels
except ImportError:
    kernels = None

pytestmark = pytest.mark.skipif(kernels is None and not os.environ.get("GRAMGEN_REQUIRE_NATIVE"),
                                reason="the grammar kernels are not built")


@pytest.fixture(autouse=True)
def _ir_registered():
    kernels.register_ir(Seq, CharRanges, ByteRanges, Alt, Repeat, NOTHING)

#: characters of every kind the trie and the edges treat apart: one-byte ASCII, the
#: quote and backslash, controls, DEL, two- to four-byte characters, a lone surrogate
ALPHABET = ["a", "b", "c", "A", "_", " ", "~", '"', "\\", "\x00", "\x01", "\x1f", "\x7f", "\x80", "é", "ж",
            "\ud7ff", "\ue000", "\U0001F600", "\U0010FFFF", "\ud800"]


def _random_words(rng: random.Random) -> list[str]:
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(0, 8))]
    if words and rng.random() < 0.3:
        words.append(rng.choice(words))   # (a word twice)
    if words and rng.random() < 0.3:
        words.append(words[0][:-1])        # (a prefix of another)
    return words


def test_all_but_equals_python():
    """``all_but`` in C gives the reference's edges, accepting flags, groups and kept
    words; and so does the IR automaton made from it, under both labels."""
    rng = random.Random(3)
    kinds = collections.Counter()
    for _ in range(1500):
        words = _random_words(rng)
        want = cpdfa._all_but_py(words)
        made = kernels.all_but(tuple(words), cpdfa.SEVERAL_OF_ANY, cpdfa._split_one_byte)
        got = cpdfa.all_but(words) if made is None else cpdfa.CodepointDFA(*made)
        assert (got.edges, got.accepting, got.groups, got.excluded) == \
            (want.edges, want.accepting, want.groups, want.excluded), words
        for word in words:
            assert not got.matches(word)
        other = "".join(rng.choice(ALPHABET[:-1]) for _ in range(rng.randint(0, 4)))
        assert got.matches(other) is (other not in words)
        kinds["no word kept" if got.groups is None else "some"] += 1
        if got.groups is not None:
            for label in (CharRanges, strings.json_char):
                want_edges = cpdfa._automaton_edges_py(want.groups, want.n_states, label)
                got_edges = kernels.automaton_edges(got.groups, got.n_states, cpdfa._SHARE_FROM, CharRanges,
                                                    ir.EMPTY, label)
                assert got_edges == want_edges, words
    assert min(kinds.values()) >= 20, kinds


def test_automaton_edges_equal_python_on_regex_dfas():
    """``automaton_edges`` on the groups of DFAs made from random regexes (groups found
    from the edges, with shared multi-byte parts: ``_SHARE_FROM`` edges and more)."""
    rng = random.Random(4)
    atoms = ["a", "[a-z]", "[^a]", "é", "[^\"\\\\]", "\\\\", "[\\x00-\\x1f]", ".", "ж|\U0001F600", "[b-y]"]
    shared = 0
    for _ in range(300):
        parts = [rng.choice(atoms) + rng.choice(["", "*", "?", "{2}"]) for _ in range(rng.randint(1, 5))]
        dfa = cpdfa.from_regex(parse_regex("|".join(parts) if rng.random() < 0.5 else "".join(parts)))
        if dfa.is_empty():
            continue
        groups, found = [], {}
        for s, out in enumerate(dfa.edges):
            cpdfa._state_groups(s, out, found, groups)
        for label in (CharRanges, strings.json_char):
            want = cpdfa._automaton_edges_py(groups, dfa.n_states, label)
            got = kernels.automaton_edges(groups, dfa.n_states, cpdfa._SHARE_FROM, CharRanges, ir.EMPTY,
                                          label)
            assert got == want, parts
            shared += got[1] > dfa.n_states
    assert shared >= 10


def test_prune_equals_python():
    """``prune`` gives the reference's rules and lexemes on random rule lists: symbols
    with no rule, nonterminals only recursion derives, a symbol twice in a body, bodies
    as lists, the start a nonterminal, a lexeme or undefined."""
    rng = random.Random(5)
    outcomes = collections.Counter()
    for _ in range(800):
        nts = [f"n{i}" for i in range(rng.randint(1, 7))]
        lexemes = {f"L{k}": None for k in range(rng.randint(0, 6))}
        pool = nts + list(lexemes) + ["undefined"]
        rules = []
        for _ in range(rng.randint(0, 4 * len(nts))):
            body = [rng.choice(pool) for _ in range(rng.choice([0, 1, 2, 2, 3, 5]))]
            if body and rng.random() < 0.2:
                body.append(body[0])
            rules.append(Rule(rng.choice(nts), tuple(body) if rng.random() < 0.8 else body))
        start = rng.choice(nts + list(lexemes)[:1] + ["undefined"])
        want = ir._prune_rules_py(rules, lexemes, start)
        got = kernels.prune(tuple(rules), lexemes, start)
        assert (got is None) == (want is None)
        if want is None:
            outcomes["empty language"] += 1
            continue
        assert got[0] == want[0] and list(got[1].items()) == list(want[1].items())
        outcomes["kept all" if len(want[0]) == len(rules) else "pruned"] += 1
        pruned = GrammarIR(got[0], got[1], start)
        if start not in lexemes:
            pruned.validate()   # (what is kept is defined)
    assert len(outcomes) == 3 and min(outcomes.values()) >= 20, outcomes


def test_kernels_refuse_bad_input():
    with pytest.raises(TypeError):
        kernels.prune([Rule("a", ())], {}, "a")            # rules not a tuple
    with pytest.raises(TypeError):
        kernels.prune((Rule("a", 5),), {}, "a")            # a body not a sequence
    with pytest.raises(AttributeError):
        kernels.prune((("a", ()),), {}, "a")               # not a rule
    with pytest.raises(TypeError):
        kernels.all_but(("a", 1), cpdfa.SEVERAL_OF_ANY, cpdfa._split_one_byte)
    with pytest.raises(TypeError):
        kernels.automaton_edges([(0, 1)], 1, 4, CharRanges, ir.EMPTY, CharRanges)


def _random_regex(rng: random.Random, depth: int = 0):
    from gramgen.grammar.ir import char
    from gramgen.grammar.simplify import _seq_py
    pick = rng.random()
    if depth > 2 or pick < 0.35:
        return rng.choice([char("a"), char("a"), char("b"), CharRanges(((0x61, 0x62),)), CharRanges(()),
                           ByteRanges(((0x80, 0x80),)), ByteRanges(())])
    if pick < 0.55:
        item = _random_regex(rng, depth + 1)
        lo = rng.randint(0, 3)
        return Repeat(item, lo, rng.choice([None, lo, lo + 2]))
    if pick < 0.65:
        return rng.choice([NOTHING, Alt((char("a"), char("b")))])
    items = [_random_regex(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return _seq_py(items) if rng.random() < 0.5 else Seq(tuple(items))   # (flat, or made raw)


def test_seq_equals_python():
    """``seq`` in C gives the reference's node on random item lists: characters that
    merge into repeats, bounded and unbounded repeats, empty classes and alternations
    (the whole is nothing), sequences made by ``seq`` (flat) and made raw, generators."""
    from gramgen.grammar.simplify import _seq_py

    rng = random.Random(6)
    kinds = collections.Counter()
    for _ in range(4000):
        items = [_random_regex(rng) for _ in range(rng.randint(0, 6))]
        want = _seq_py(items)
        got = kernels.seq(iter(items) if rng.random() < 0.3 else items)
        assert got.__class__ is want.__class__ and got == want, items
        assert getattr(got, "_flat", False) == getattr(want, "_flat", False)
        kinds["nothing" if want is NOTHING else "merged" if want.__class__ is Seq and len(want.items) < sum(
            len(i.items) if i.__class__ is Seq else 1 for i in items) else want.__class__.__name__] += 1
    assert kinds["nothing"] >= 100 and kinds["merged"] >= 100, kinds
    with pytest.raises(TypeError):
        kernels.seq(5)
