"""``gramgen.compile`` and its options: one typed, frozen CompileOptions; keyword arguments
override its fields; bad values are ConfigurationErrors naming the option."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest

import gramgen
from gramgen.errors import ConfigurationError
from gramgen.runtime import CompiledGrammar, CompileOptions, Matcher

VOCAB = gramgen.Vocabulary([b"a", b"b", b"ab", b""], eos_token_ids=[3])


def grammar():
    return gramgen.Grammar.from_regex("(ab)+")


def test_defaults_and_the_options_object():
    cg = gramgen.compile(grammar(), VOCAB)
    assert isinstance(cg, CompiledGrammar) and isinstance(cg.matcher(), Matcher)
    assert cg.options == CompileOptions() == CompileOptions(None, 10_000, 4096)
    options = CompileOptions(precompute=False, max_dfa_states=50, mask_cache_size=7)
    assert gramgen.compile(grammar(), VOCAB, options).options == options


def test_keywords_override_the_options_object():
    options = CompileOptions(precompute=False, mask_cache_size=7)
    cg = gramgen.compile(grammar(), VOCAB, options, precompute=True)
    assert cg.options == CompileOptions(precompute=True, mask_cache_size=7)
    # precompute=None is a value (automatic), not "take it from the options"
    assert gramgen.compile(grammar(), VOCAB, options, precompute=None).options.precompute is None
    assert gramgen.compile(grammar(), VOCAB, precompute=True).options == CompileOptions(precompute=True)
    assert options == CompileOptions(precompute=False, mask_cache_size=7)  # not changed


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CompileOptions().mask_cache_size = 1  # type: ignore[misc]


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="max_states"):
        gramgen.compile(grammar(), VOCAB, max_states=10)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        CompileOptions(cache=1)  # type: ignore[call-arg]


@pytest.mark.parametrize("name, value", [
    ("mask_cache_size", -1), ("mask_cache_size", 1.5), ("mask_cache_size", True), ("mask_cache_size", "8"),
    ("max_dfa_states", 0), ("max_dfa_states", None), ("precompute", 1), ("precompute", "yes"),
])
def test_bad_values_name_the_option(name, value):
    with pytest.raises(ConfigurationError, match=name):
        CompileOptions(**{name: value})
    with pytest.raises(ValueError, match=name):  # a ConfigurationError is also a ValueError
        gramgen.compile(grammar(), VOCAB, **{name: value})
    with pytest.raises(ConfigurationError, match=name):
        gramgen.compile(grammar(), VOCAB, CompileOptions(), **{name: value})


def test_edge_values_are_accepted():
    options = CompileOptions(max_dfa_states=1_000, mask_cache_size=0)
    m = gramgen.compile(grammar(), VOCAB, options).matcher()
    assert m.mask().tolist() == [True, False, True, False]  # with no mask kept


def test_not_a_grammar_or_not_options():
    with pytest.raises(ConfigurationError, match="Grammar"):
        gramgen.compile("(ab)+", VOCAB)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="CompileOptions"):
        gramgen.compile(grammar(), VOCAB, {"precompute": True})  # type: ignore[arg-type]


def _accepts(cg, text: str) -> bool:
    m = cg.matcher()
    try:
        m.advance_many([0 if c == "a" else 1 for c in text])
    except gramgen.TokenRejected:
        return False
    return m.is_accepting()


def test_max_dfa_states_is_applied():
    """A lexeme over the limit is split into rules over smaller lexemes (the language is
    the same); where it cannot be split (an ignored lexeme) the limit is an error."""
    regex = "[ab]*a[ab]{6}"
    small = gramgen.compile(gramgen.Grammar.from_regex(regex), VOCAB, max_dfa_states=20)
    assert max(d.n_states for d in small.tables.lex_dfas) <= 20 and len(small.tables.lex_dfas) > 1
    large = gramgen.compile(gramgen.Grammar.from_regex(regex), VOCAB, max_dfa_states=1_000)
    assert len(large.tables.lex_dfas) == 1 and large.tables.lex_dfas[0].n_states > 20
    for n in range(12):
        for text in itertools.product("ab", repeat=n):
            text = "".join(text)
            assert _accepts(small, text) == _accepts(large, text) == bool(re.fullmatch(regex, text)), text
    ignored = gramgen.Grammar.from_lark('start: "a"+\n%ignore /[ab]*a[ab]{6}/')
    with pytest.raises(gramgen.CompileLimitError, match="max_states=20.*ignored lexeme"):
        gramgen.compile(ignored, VOCAB, max_dfa_states=20)


def test_mask_cache_size_bounds_the_masks_kept():
    vocab = gramgen.Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])
    g = gramgen.Grammar.builtin("json")
    small = gramgen.compile(g, vocab, mask_cache_size=3)
    large = gramgen.compile(g, vocab)
    m1, m2 = small.matcher(), large.matcher()
    for b in b'{"key": [1, 2.5, "text"], "b": null}':
        assert (m1.mask() == m2.mask()).all()
        m1.advance(b)
        m2.advance(b)
    assert len(small.mask_cache) == 3 and len(large.mask_cache) > 3


def test_compiling_leaves_no_reference_cycles():
    """What a compile (and a first mask) makes and drops is freed by reference counting:
    no cycle is left for the garbage collector, whose full collections would otherwise
    walk it later, maybe inside a mask. JSON Schema (with $ref, formats, bounds), GBNF
    and regex grammars, one of them split into rules; lark's own grammar parser
    (ast.literal_eval's closures) is not ours and not checked here."""
    import gc

    from conftest import vocabulary

    vocab = vocabulary("gpt2")
    makes = [
        lambda: gramgen.Grammar.from_json_schema({
            "type": "object",
            "properties": {"a": {"type": "string", "format": "date-time"},
                           "b": {"type": "integer", "minimum": 3, "multipleOf": 5},
                           "c": {"$ref": "#/$defs/x"}, "d": {"type": "string", "pattern": "^[a-zé]{2,9}$"}},
            "$defs": {"x": {"anyOf": [{"enum": ["p", "q"]}, {"type": "array", "items": {"$ref": "#/$defs/x"}}]}}},
            whitespace="flexible"),
        lambda: gramgen.Grammar.from_gbnf('root ::= "a" [b-z]{2,5} x\nx ::= "é" | "日本" | x "!"'),
        lambda: gramgen.Grammar.from_regex(r"[a-zα-ω]{3,40}@(x|y)+\d{2,3}"),
        # a lexeme too big for one DFA, split into rules (grammar.split)
        lambda: gramgen.Grammar.from_regex("(ab){2,5000}c"),
    ]

    def compile_and_drop(make):
        cg = gramgen.compile(make(), vocab)
        m = cg.matcher()
        m.mask()
        m.advance(int(m.mask().nonzero()[0][0]))
        m.mask()

    for make in makes:   # (first calls: module-level caches fill)
        compile_and_drop(make)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        found = []
        for make in makes:
            compile_and_drop(make)
            found.append(gc.collect())
    finally:
        if enabled:
            gc.enable()
    assert found == [0] * len(makes)


def test_productive_symbols_is_the_least_fixed_point():
    """``ir.productive_rules`` (a work list: each rule counts its symbols not known
    productive) finds the symbols that iterating "a rule whose symbols are all productive
    makes its left-hand side productive" to a fixed point finds, on random grammars with
    cycles, empty rules, repeated symbols and undefined ones, and flags exactly the rules
    whose symbols all are."""
    import random

    from gramgen.grammar.ir import Rule, productive_rules

    def fixed_point(rules, terminals):
        out, changed = set(terminals), True
        while changed:
            changed = False
            for r in rules:
                if r.lhs not in out and all(s in out for s in r.rhs):
                    out.add(r.lhs)
                    changed = True
        return out

    rng = random.Random(0)
    for _ in range(2000):
        nts = [f"n{i}" for i in range(rng.randint(1, 8))]
        terms = [f"T{i}" for i in range(rng.randint(0, 3))]
        pool = nts + terms + ["undefined"]
        rules = [Rule(rng.choice(nts), tuple(rng.choice(pool) for _ in range(rng.randint(0, 3))))
                 for _ in range(rng.randint(0, 12))]
        want = fixed_point(rules, terms)
        found, kept = productive_rules(rules, terms)
        assert found == want, rules
        assert kept == [r.lhs in want and all(s in want for s in r.rhs) for r in rules], rules


def _unmarked(rx):
    """The same regex with no ``Seq`` marked as made by ``seq`` (so seq walks all of it)."""
    from gramgen.grammar.ir import Alt, Repeat, Seq

    if isinstance(rx, Seq):
        return Seq(tuple(_unmarked(i) for i in rx.items))
    if isinstance(rx, Alt):
        return Alt(tuple(_unmarked(i) for i in rx.items))
    if isinstance(rx, Repeat):
        return Repeat(_unmarked(rx.item), rx.min, rx.max)
    return rx


def test_seq_of_seq_results_equals_the_full_walk():
    """``seq`` appends the items of a sequence it made itself after merging only the first
    one with what came before: on random nestings of sequences (its own results, sequences
    built directly, repeats of the same characters so that neighbours merge across the
    boundaries, the empty and the nothing regex) the result equals seq of the same regexes
    unmarked, which it walks item by item."""
    import random

    from gramgen.grammar.ir import EMPTY, NOTHING, CharRanges, Repeat, Seq, char
    from gramgen.grammar.simplify import alt, seq

    rng = random.Random(5)
    leaves = [char("a"), char("b"), CharRanges(((97, 97),)), Repeat(char("a"), 0, 2), Repeat(char("a"), 1, None),
              Repeat(char("b"), 2, 2), Seq((char("a"), char("a"))), EMPTY, alt([char("a"), char("c")])]
    merged_across = 0
    for _ in range(3000):
        pool = list(leaves)
        for _ in range(rng.randrange(1, 8)):
            parts = [rng.choice(pool) for _ in range(rng.randrange(1, 5))]
            if rng.random() < 0.02:
                parts.append(NOTHING)
            made = seq(parts) if rng.random() < 0.8 else Seq(tuple(parts))
            ref = seq([_unmarked(p) for p in parts]) if made.__class__ is not Seq or getattr(made, "_flat", False) else made
            assert made == ref, (parts, made, ref)
            if (len(parts) > 1 and isinstance(parts[0], Seq) and getattr(parts[0], "_flat", False)
                    and isinstance(made, Seq) and len(made.items) < sum(len(getattr(p, "items", (p,))) for p in parts)):
                merged_across += 1
            pool.append(made)
    assert merged_across > 100, merged_across
