"""The standard classes of JSON Schema grammars (``runtime.json_standard``): made once per
vocabulary and layout, exact, used by the masks of other schemas, kept by ``clear_all``."""

from __future__ import annotations


import numpy as np
import pytest

import gramgen
from conftest import vocabulary
from gramgen import _lru
from gramgen.automata.lexeme_tokens import LexemeTokens
from gramgen.automata.token_table import token_table_for
from gramgen.runtime import json_standard
from gramgen.testing import assert_masks_exact

SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"}, "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}}, "draft": {"type": "boolean"}},
    "required": ["title", "year"]}


def _layout(grammar: gramgen.Grammar) -> tuple:
    return grammar.ir.meta["json_layout"]


@pytest.mark.parametrize("tokenizer", ["llama3", "gpt2"])
@pytest.mark.parametrize("whitespace", ["flexible", "standard"])
def test_standard_classes_equal_full(tokenizer, whitespace):
    """Every standard entry equals a full classification (no sharing, no neighbours) of
    each state of the standard schemas that has its key; a user's schema of the same
    layout finds its dense states' classes there."""
    vocab = vocabulary(tokenizer)
    tt = token_table_for(vocab)
    user = gramgen.Grammar.from_json_schema(SCHEMA, whitespace=whitespace)
    cg = gramgen.compile(user, vocab, precompute=False)
    assert _layout(user) in tt.standard_layouts
    standard = tt.standard_classes
    checked = set()
    for schema in json_standard.STANDARD_SCHEMAS:
        full = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace=whitespace), vocab,
                               precompute=False)
        states = full.classes.shared_states()   # (keys need SHARED_STATES; nothing classified yet)
        full.classes.SHARED_STATES = 0
        full.classes.NEIGHBOR_SHARE = -1.0
        full.classes.PAIR_WALK = False
        for key, k, q in states:
            if key in checked:
                continue
            checked.add(key)
            got, ref = standard[key], full.lexeme_tokens(k, q)
            assert np.array_equal(got.inside, ref.inside), (schema, k, q)
            assert np.array_equal(got.exits, ref.exits) and got.n_exits == ref.n_exits, (schema, k, q)
    assert len(checked) >= 20, len(checked)
    # the user's schema: many of its dense states are standard ones (not those of keys
    # that exclude its own names)
    keys = [key for key, _, _ in cg.classes.shared_states()]
    found = sum(key in standard for key in keys)
    assert found * 3 >= len(keys) and found >= 10, (found, len(keys))



@pytest.mark.parametrize("whitespace", ["flexible", "standard"])
def test_strings_near_their_bounds_find_standard_classes(whitespace):
    """A string a few characters before its ``maxLength`` (whatever the bound), and a long
    string's 64-character blocks and tails, find their dense states' classes among the
    standard ones (their first visits were full walks of the vocabulary)."""
    vocab = vocabulary("gpt2")
    tt = token_table_for(vocab)
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 77},
        "b": {"type": "string", "minLength": 300, "maxLength": 5000},
        "c": {"type": "array", "items": {"type": "string", "maxLength": 3000}}}, "required": ["a", "b"]}
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace=whitespace), vocab, precompute=False)
    names = cg.tables.lexeme_names
    strings = [key for key, k, _ in cg.classes.shared_states()
               if names[k].startswith(("STR", "BLOCK", "TAIL", "longstr"))]
    found = sum(key in tt.standard_classes for key in strings)
    assert found >= 20 and found * 3 >= 2 * len(strings), (found, len(strings))

def test_standard_classes_decide_masks(monkeypatch):
    """The masks read the standard classes: exact with them (brute force), and wrong when
    they are spoiled (the check can fail)."""
    vocab = vocabulary("gpt2")
    tt = token_table_for(vocab)
    grammar = gramgen.Grammar.from_json_schema(SCHEMA, whitespace="flexible")
    assert_masks_exact(gramgen.compile(grammar, vocab, precompute=False), steps=6, seed=3)
    assert tt.standard_classes
    spoiled = {key: LexemeTokens(inside=np.zeros_like(lt.inside), exits=lt.exits, n_exits=lt.n_exits)
               for key, lt in tt.standard_classes.items()}
    monkeypatch.setattr(tt, "standard_classes", spoiled)
    with pytest.raises(AssertionError, match="not exact"):
        assert_masks_exact(gramgen.compile(grammar, vocab, precompute=False), steps=6, seed=3)


def test_standard_classes_once_per_layout_and_kept(monkeypatch):
    """Made on the first compile of a layout, not again, kept by ``clear_all`` (a
    per-vocabulary table, like the token table); other layouts get their own; grammars
    that are not from a JSON Schema and small vocabularies get none."""
    vocab = vocabulary("llama3")
    tt = token_table_for(vocab)
    made = []
    original = json_standard.STANDARD_SCHEMAS
    real = gramgen.Grammar.from_json_schema

    def counted(schema, **kwargs):
        if any(schema is s for s in original):
            made.append(schema)
        return real(schema, **kwargs)

    monkeypatch.setattr(json_standard.Grammar, "from_json_schema", counted)
    layout = _layout(gramgen.Grammar.from_json_schema({"type": "string"}, whitespace="compact"))
    monkeypatch.setattr(tt, "standard_layouts", {x for x in tt.standard_layouts if x != layout})
    before = len(tt.standard_classes)
    gramgen.compile(gramgen.Grammar.from_json_schema({"type": "string"}, whitespace="compact"), vocab)
    assert len(made) == len(original)  # the standard schemas, compiled once each
    assert layout in tt.standard_layouts and len(tt.standard_classes) > before
    size = len(tt.standard_classes)
    _lru.clear_all()
    gramgen.compile(gramgen.Grammar.from_json_schema({"type": "number"}, whitespace="compact"), vocab)
    assert len(made) == len(original) and len(tt.standard_classes) == size
    # a Lark grammar: none
    gramgen.compile(gramgen.Grammar.from_lark('start: "a"+'), vocab)
    assert len(made) == len(original)


def test_small_vocabulary_gets_no_standard_classes():
    tokens = [bytes([b]) for b in range(256)] + [b'"a', b'": ', b"true", b"null", b""]
    vocab = gramgen.Vocabulary(tokens, eos_token_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMA), vocab)
    tt = token_table_for(vocab)
    assert not tt.standard_layouts and not tt.standard_classes


@pytest.mark.parametrize("whitespace", ["flexible", "compact"])
def test_standard_dfas_equal_fresh_ones_and_hold_no_user_lexeme(whitespace):
    """The lexeme DFAs kept from the standard schemas (``automata.dfa.keep_standard``) are
    found by a user's schema of the layout after ``clear_all``; every lexeme DFA of that
    compile equals the one built from nothing (the kept ones set aside); compiling user
    schemas adds nothing to them (no property name of theirs is kept)."""
    from gramgen.automata import dfa

    vocab = vocabulary("llama3")
    schema = {"type": "object", "properties": {"uniqueName9": {"type": "string"}, "n": {"type": "integer"},
                                               "free": {}, "list": {"type": "array", "items": {"type": "number"}}},
              "required": ["n"]}
    grammar = gramgen.Grammar.from_json_schema(schema, whitespace=whitespace)
    gramgen.compile(grammar, vocab)        # (makes the layout's standard classes and DFAs)
    kept = dict(dfa._standard)
    assert kept and all(d.n_states <= dfa.MAX_STANDARD_STATES for d in kept.values())
    found = []
    real_get = dfa._standard.get

    def get(key, default=None):
        got = real_get(key, default)
        if got is not None:
            found.append(key)
        return got

    _lru.clear_all()
    saved = dfa._standard
    try:
        dfa._standard = {}
        fresh = gramgen.compile(grammar, vocab, precompute=False)
        _lru.clear_all()
        dfa._standard = type("D", (dict,), {"get": staticmethod(get)})(saved)
        reused = gramgen.compile(grammar, vocab, precompute=False)
    finally:
        dfa._standard = saved
    assert found, "no lexeme of the user's schema was found among the standard DFAs"
    assert fresh.tables.lexeme_names == reused.tables.lexeme_names
    for name, a, b in zip(fresh.tables.lexeme_names, fresh.tables.lex_dfas, reused.tables.lex_dfas):
        assert np.array_equal(a.transitions, b.transitions) and np.array_equal(a.accepting, b.accepting), name
    assert dfa._standard == kept
    assert not any("uniqueName9" in repr(key) for key in dfa._standard)
