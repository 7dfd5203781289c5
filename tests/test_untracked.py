"""A compiled grammar keeps few objects on the cyclic garbage collector's lists: its
grammar's regex trees and rules, and the token sets it classifies, are untracked (they
cannot form a reference cycle), so a full collection inside a mask does not walk them.
They are still freed: by refcounting, and by a collection where what holds them is in a
cycle."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import gramgen
from conftest import hf_tokenizer, vocabulary
from gramgen.automata import bitmask
from gramgen.automata.dfa import untrack_trees
from gramgen.automata.lexeme_tokens import LexemeTokens
from gramgen.grammar.ir import Automaton, Regex, Rule

_dfabuild = pytest.importorskip("gramgen.automata._dfabuild", reason="the native builder is not built")

#: many properties, strings with patterns and escapes, enums, nested arrays: a grammar of
#: thousands of regex nodes
SCHEMA = {
    "type": "object",
    "properties": {
        **{f"name_{i}": {"type": "string", "pattern": f"^[a-z]{{1,{i % 7 + 1}}}(-[0-9]+)?$"} for i in range(40)},
        **{f"kind_{i}": {"enum": [f"k{i}a", f"k{i}b", "shared"]} for i in range(20)},
        **{f"list_{i}": {"type": "array", "items": {"type": "string", "maxLength": 12}} for i in range(10)},
        "free": {"type": "string"},
        "count": {"type": "integer", "minimum": 0},
    },
    "required": ["name_0", "kind_0"],
}


def _nodes(ir):
    """Every rule, regex node and tuple of the grammar's trees."""
    out, stack, seen = [], list(ir.rules) + list(ir.lexemes.values()), set()
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        out.append(o)
        if isinstance(o, Regex):
            stack.extend(getattr(o, f) for f in o.__dataclass_fields__)
        elif isinstance(o, Rule):
            stack.append(o.rhs)
        elif isinstance(o, tuple):
            stack.extend(o)
    return out


@pytest.fixture(scope="module")
def vocab():
    return vocabulary("gpt2")


def test_compiled_grammar_trees_are_untracked(vocab):
    grammar = gramgen.Grammar.from_json_schema(SCHEMA)
    assert any(gc.is_tracked(o) for o in _nodes(grammar.ir)), "a fresh grammar's nodes are tracked"
    cg = gramgen.compile(grammar, vocab)
    nodes = _nodes(grammar.ir) + _nodes(cg.ir)
    assert len(nodes) > 1000
    assert [o for o in nodes if gc.is_tracked(o)] == []


def test_untracked_grammar_is_still_freed(vocab):
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        grammar = gramgen.Grammar.from_json_schema(SCHEMA)
        cg = gramgen.compile(grammar, vocab)
        cg.matcher().fill_bitmask(np.zeros((1, bitmask.n_words(cg.vocab_size)), dtype=np.int32))
        rule = weakref.ref(grammar.ir.rules[-1])
        assert not gc.is_tracked(rule())
        del grammar, cg
        gc.collect()   # (the compiled grammar itself may sit in a cycle)
        assert rule() is None, "an untracked rule outlived its grammar"
    finally:
        if was:
            gc.enable()


def test_tracked_objects_per_compiled_grammar(vocab):
    """What a compiled grammar adds to the collector's lists after masks: its tables and
    caches and the process's bounded caches (~1,000 objects here), not one per regex node
    (~7,000 before the trees were untracked)."""
    gramgen.compile(gramgen.Grammar.from_json_schema({"type": "object"}), vocab)   # per-vocabulary tables
    gc.collect()
    before = len(gc.get_objects())
    grammar = gramgen.Grammar.from_json_schema(SCHEMA)
    cg = gramgen.compile(grammar, vocab)
    m = cg.matcher()
    row = np.zeros((1, bitmask.n_words(cg.vocab_size)), dtype=np.int32)
    text = '{"name_0": "a-12", "kind_0": "shared", "list_3": ["x", "y"]}'
    for tok in hf_tokenizer("gpt2").encode(text):
        m.fill_bitmask(row)
        m.advance(tok)
    gc.collect()
    added = len(gc.get_objects()) - before
    nodes = len(_nodes(grammar.ir))
    assert added < max(400, nodes // 4), (added, nodes)


def test_classified_token_sets_are_untracked(vocab):
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMA), vocab)
    cg.classes.precompute()
    sets = [o for o in gc.get_objects() if type(o) is LexemeTokens]
    assert not sets, f"{len(sets)} LexemeTokens are tracked"
    packed = LexemeTokens(np.zeros(4, dtype=np.uint32), np.zeros(2, dtype=np.uint32), 0)
    assert not gc.is_tracked(packed)


def test_untrack_enters_only_tuples_and_the_named_classes():
    inner = [1, 2]
    holder = {"a": 1}
    tree = (1, (inner, "x"), holder)
    assert gc.is_tracked(tree) and gc.is_tracked(inner)
    assert _dfabuild.untrack([tree], ()) == 2   # the two tuples
    assert not gc.is_tracked(tree) and not gc.is_tracked(tree[1])
    assert gc.is_tracked(inner), "a list is mutable: it stays tracked"
    # an instance of a class not named is neither untracked nor entered
    auto = Automaton(1, 0, (), tuple([0]))
    _dfabuild.untrack([(auto,)], ())
    assert gc.is_tracked(auto) and gc.is_tracked(auto.accepting)
    _dfabuild.untrack([(auto,)], (Automaton,))
    assert not gc.is_tracked(auto) and not gc.is_tracked(auto.accepting)
    with pytest.raises(TypeError):
        _dfabuild.untrack([tree], (1,))


def test_untrack_trees_counts_what_it_untracked():
    grammar = gramgen.Grammar.from_json_schema({"type": "string", "pattern": "^[a-f]+x$"})
    tracked = [o for o in _nodes(grammar.ir) if gc.is_tracked(o)]
    assert gc.is_tracked(grammar.ir.rules)
    assert untrack_trees(grammar.ir) == len(tracked) + 1 > 1   # (and the tuple of rules)
    assert untrack_trees(grammar.ir) == 0


def test_parser_tables_and_rules_are_not_walked_by_collections(vocab):
    """The per-item, per-rule and per-symbol sequences of the parser tables, the grammars'
    rules and the DFA rows made for stepping are tuples of atoms: after one collection
    the collector no longer tracks them (lists of 100,000 items, walked by every full
    collection, cost a 40,000-rule grammar ~5 ms per collection). (The tuples of lexeme
    objects, one item per lexeme, stay tracked.)"""
    grammar = gramgen.Grammar.from_json_schema(SCHEMA)
    cg = gramgen.compile(grammar, vocab)
    t = cg.tables
    rows = [t.lex_rows[k][0] for k in range(len(t.lex_rows)) if len(t.lex_rows[k])]
    gc.collect()
    gc.collect()   # (a tuple of tuples goes once the inner ones have)
    names = ("item_next", "item_lhs", "item_rule", "rule_first", "rule_list", "glued", "item_class",
             "relevant_item", "nullable", "follow_lexemes", "follow_bytes", "is_ignore",
             "rules_of", "lex_accept", "nt_names", "lexeme_names")
    assert len(t.item_next) > 300
    tracked = [n for n in names if gc.is_tracked(getattr(t, n))]
    assert tracked == [], f"still walked by every collection: {tracked}"
    assert type(grammar.ir.rules) is tuple and not gc.is_tracked(grammar.ir.rules)
    assert not gc.is_tracked(cg.ir.rules)
    assert rows and not any(gc.is_tracked(r) for r in rows)
    # a grammar made from a list of rules keeps them as a tuple
    ir = gramgen.grammar.ir.GrammarIR([Rule("start", ("A",))], {"A": grammar.ir.lexemes[next(iter(grammar.ir.lexemes))]}, "start")
    assert ir.rules == (Rule("start", ("A",)),)
