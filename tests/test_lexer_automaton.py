"""The bigram lexer (``automata.lexer_automaton``) used to drop hopeless exit tokens, and the
item classes in parser signatures: both must keep masks exact (``test_masks`` checks whole
masks against brute force); these tests check each piece on its own."""

from __future__ import annotations

import random

import numpy as np
import pytest

import gramgen
from gramgen.automata.earley import LocalSignatures
from gramgen.automata.lexer_automaton import LexerAutomaton
from gramgen.automata.token_table import TokenTable
from gramgen.automata import bitmask
from textgen import WordSampler

GRAMMARS = {
    "json": lambda: gramgen.Grammar.builtin("json"),
    "sql": lambda: gramgen.Grammar.builtin("sql"),
    "python": lambda: gramgen.Grammar.builtin("python_subset"),
    "overlapping": lambda: gramgen.Grammar.from_lark(
        'start: (NAME | KW | NUM)+\nNAME: /[a-z]+/\nKW: "if" | "iff"\nNUM: /[0-9]*/\n%ignore " "'),
}


def _byte_vocab():
    return gramgen.Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_every_word_is_a_lexeme_sequence(name):
    """Soundness: from the lexemes the parser starts with, the bigram lexer reads every
    word of the grammar (and so every prefix) without dying."""
    g = GRAMMARS[name]()
    cg = gramgen.compile(g, _byte_vocab(), precompute=False)
    lexer = LexerAutomaton(cg.tables)
    start = lexer.state_of(cg.matcher()._chart[-1].scans)
    sampler = WordSampler(g.ir)
    rng = random.Random(7)
    words = [sampler.word(rng, max_depth=8) for _ in range(60)]
    tt = TokenTable(words)
    alive = lexer.alive(tt, start, np.arange(len(tt.sorted_bytes)))
    dead = [w for w, ok in zip(tt.sorted_bytes, alive) if not ok]
    assert not dead, dead[:3]


def test_hopeless_exit_tokens_are_dropped():
    """After JSON whitespace a token whose rest starts no JSON lexeme is rejected without
    the parser when the vocabulary is classified at compile time (``precompute``); one
    whose rest does stays a candidate. Classified on the mask path, the state keeps them
    for the parser walk to reject. The masks are the same."""
    tokens = [b" ", b" the", b" true", b' "a', b" }", b" 1x", b""]
    vocab = gramgen.Vocabulary(tokens, eos_token_ids=[len(tokens) - 1])
    expected = {True: {b" true", b' "a', b" }"}, False: {b" the", b" true", b' "a', b" }", b" 1x"}}
    for precompute in (True, False):
        cg = gramgen.compile(gramgen.Grammar.builtin("json"), vocab, precompute=precompute)
        ws = cg.tables.lexeme_names.index("%ignore WS")
        found = cg.lexeme_tokens(ws, 0)
        tt = cg.token_table
        exits = {tt.sorted_bytes[r] for r in np.flatnonzero(bitmask.unpack(found.exits, len(tt.sorted_bytes)))}
        assert exits == expected[precompute]
        m = cg.matcher()
        m.advance(tokens.index(b" "))
        assert {tokens[i] for i in np.flatnonzero(m.mask())} == {b" ", b" true", b' "a'}


def test_lexer_gives_up_soundly():
    """Past its state budget the automaton stops building states and answers 'alive' for
    whatever it has not decided yet (what died before that did die)."""
    cg = gramgen.compile(GRAMMARS["python"](), _byte_vocab(), precompute=False)
    lexer = LexerAutomaton(cg.tables, max_states=3)
    tt = TokenTable([b"def f(x): return x", b"\x00\x01", b")))("])
    start = lexer.state_of(cg.matcher()._chart[-1].scans)
    first = dict(zip(tt.sorted_bytes, lexer.alive(tt, start, np.arange(3))))
    assert lexer.gave_up
    assert first[b"def f(x): return x"] and not first[b"\x00\x01"]
    assert lexer.alive(tt, start, np.arange(3)).all()


def test_first_and_later_repetitions_share_signatures():
    """``S -> "," . v`` and ``S -> S "," . v`` have the same future: the parser contexts after
    the first and after a later comma of a JSON array get the same local signature, so
    the exit walks of one are reused by the other."""
    cg = gramgen.compile(GRAMMARS["json"](), _byte_vocab())
    m = cg.matcher()
    text = b'["a", "b", "c"]'
    positions = []
    for i, b in enumerate(text):
        m.advance(b)
        if text[i:i + 2] == b' "':
            positions.append(len(m._chart) - 1)
    chart, intern = m._chart, cg.intern()
    sigs = [LocalSignatures(cg.tables, chart, j, intern).at(2) for j in positions]
    assert len(positions) == 2 and sigs[0] == sigs[1]
