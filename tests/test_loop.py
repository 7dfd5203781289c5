"""The one generation loop: budgets, endings, statistics and results mean the same thing for
every sampler (SyntheticLM, exact and cheap)."""

from __future__ import annotations

import typing

import numpy as np
import pytest
from synthetic import binary_setup, small_vocab

import gramgen
from gramgen.generation import FinishReason, SyntheticLM

SAMPLERS = ["constrained", "awrs", "smc", "asap"]


def _options(sampler):
    return dict(sampler=sampler, temperature=1.0, num_particles=4 if sampler == "smc" else None)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_ends_its_outputs_the_same_way(sampler):
    vocab, cg, lm = binary_setup(seed=4)
    eos = set(vocab.eos_token_ids)
    reasons = set(typing.get_args(FinishReason))
    for seed in range(12):
        r = gramgen.generate(lm, [0], grammar=cg, max_new_tokens=16, seed=seed, **_options(sampler))
        assert r.finish_reason in reasons
        assert not eos & set(r.tokens)
        assert (r.eos_token is not None) == (r.finish_reason == "eos")
        assert r.complete == (r.finish_reason in ("eos", "grammar"))
        m = cg.matcher()
        m.advance_many(r.tokens)
        assert m.is_accepting() or not r.complete
        assert r.text == b"".join(vocab.token_bytes(t) for t in r.tokens).decode()
        assert r.stats.sampled_tokens + r.stats.forced_tokens == len(r.tokens) + (r.eos_token is not None)
        assert r.stats.prompt_tokens == 1 and r.logprob <= 0


@pytest.mark.parametrize("sampler", ["constrained", "awrs", "smc"])
def test_max_new_tokens_counts_the_same_for_every_sampler(sampler):
    """A budget of 2 tokens on a language of words of 3 or more: never a longer output,
    never complete."""
    vocab, _, lm = binary_setup(seed=5)
    cg = gramgen.compile(gramgen.Grammar.from_regex("[01]{3,5}"), vocab)
    for seed in range(6):
        r = gramgen.generate(lm, [0], grammar=cg, max_new_tokens=2, seed=seed, **_options(sampler))
        assert len(r.tokens) <= 2 and not r.complete
        assert r.finish_reason == "max_new_tokens"


@pytest.mark.parametrize("sampler", ["constrained", "awrs"])
def test_a_vocabulary_that_cannot_spell_the_language_is_a_dead_end(sampler):
    vocab = small_vocab(["a", "b"])
    lm = SyntheticLM.hashed(vocab, seed=0)
    cg = gramgen.compile(gramgen.Grammar.from_regex("ab?c"), vocab)
    r = gramgen.generate(lm, [0], grammar=cg, max_new_tokens=8, seed=0, **_options(sampler))
    assert r.finish_reason == "dead_end" and not r.complete
    assert r.text in ("a", "ab")


def test_greedy_is_the_argmax_of_the_masked_model():
    vocab, cg, lm = binary_setup(seed=6)
    r = gramgen.generate(lm, [0], grammar=cg, max_new_tokens=16)
    m = cg.matcher()
    for i, t in enumerate(r.tokens):
        logp = lm.next_logprobs([[0, *r.tokens[:i]]])[0]
        allowed = m.mask()
        assert t == int(np.argmax(np.where(allowed, logp, -np.inf)))
        m.advance(t)


def test_sampled_outputs_are_reproducible_by_seed():
    vocab, cg, lm = binary_setup(seed=7)
    for sampler in SAMPLERS:
        # ASAp learns across calls: the same seed reproduces from the same (fresh) state
        def options():
            return dict(_options(sampler), sampler=gramgen.ASAp()) if sampler == "asap" else _options(sampler)
        a = gramgen.generate(lm, [[0], [0]], grammar=cg, max_new_tokens=16, seed=11, **options())
        b = gramgen.generate(lm, [[0], [0]], grammar=cg, max_new_tokens=16, seed=11, **options())
        assert [r.tokens for r in a] == [r.tokens for r in b]


def test_configuration_errors_name_the_argument():
    vocab, cg, lm = binary_setup()
    bad = [dict(sampler="beam"), dict(num_particles=3), dict(max_new_tokens=0),
           dict(temperature=-1.0), dict(top_k=0, temperature=1.0), dict(sampler="awrs", top_p=0.5),
           dict(speculative=object())]
    words = ["beam", "num_particles", "max_new_tokens", "temperature", "top_k", "temperature 1",
             "speculative"]
    for kwargs, word in zip(bad, words):
        with pytest.raises(gramgen.ConfigurationError, match=word):
            gramgen.generate(lm, [0], grammar=cg, **kwargs)
    with pytest.raises(gramgen.ConfigurationError, match="token ids"):
        gramgen.generate(lm, "text needs a tokenizer", grammar=cg)
    pred = gramgen.generation.PredicateConstraint(vocab, lambda t: True, lambda t: True)
    with pytest.raises(gramgen.ConfigurationError, match="full masks"):
        gramgen.generate(lm, [0], constraint=pred)
