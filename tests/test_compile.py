"""``gramgen.compile`` and its options: one typed, frozen CompileOptions; keyword arguments
override its fields; bad values are ConfigurationErrors naming the option."""

from __future__ import annotations

import dataclasses

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


def test_max_dfa_states_is_applied():
    with pytest.raises(gramgen.CompileLimitError, match="max_states=20"):
        gramgen.compile(gramgen.Grammar.from_regex("[ab]*a[ab]{6}"), VOCAB, max_dfa_states=20)
    gramgen.compile(gramgen.Grammar.from_regex("[ab]*a[ab]{6}"), VOCAB, max_dfa_states=1_000)


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
