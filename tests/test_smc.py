"""SMC with AWRS proposals: unbiased marginal likelihood, consistent posterior.

The exact normaliser Z = P(the model's output is in L) and the exact conditional Q come
from enumerating the finite language (see synthetic.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic import binary_setup, enumerate_language, pooled_posterior, smollm2, smollm2_yes_no

import gramgen
from gramgen import ConfigurationError
from gramgen.generation import SMC, ASApTrie, MatcherConstraint, TransformersLM, smc


def _z_hats(lm, cg, k, runs, seed0=0, twist=None, prompt=(0,), max_new_tokens=16):
    out = np.empty(runs)
    for r in range(runs):
        res = smc(lm, MatcherConstraint(cg.matcher()), list(prompt), num_particles=k,
                  max_new_tokens=max_new_tokens, rng=np.random.default_rng(seed0 + r),
                  twist=twist)
        out[r] = math.exp(res.log_ml)
    return out


def _within(z_hats, z, sigmas=4.0):
    se = z_hats.std(ddof=1) / math.sqrt(len(z_hats))
    return abs(z_hats.mean() - z) < sigmas * se


def test_log_ml_is_unbiased_and_sharpens_with_particles():
    """mean Ẑ within 4 standard errors of the exact Z (K = 10, 300 runs; K = 50, 60
    runs), and the relative variance of Ẑ falls as K grows."""
    vocab, cg, lm = binary_setup(seed=1, scale=1.0)
    z = math.exp(enumerate_language(lm, cg, [0]).log_z)
    z10 = _z_hats(lm, cg, 10, 300)
    z50 = _z_hats(lm, cg, 50, 60, seed0=1000)
    assert _within(z10, z) and _within(z50, z), (z10.mean(), z50.mean(), z)
    assert (z50 / z).var() < 0.5 * (z10 / z).var()


def test_log_ml_test_has_power():
    """The same check rejects a run whose weights ignore AWRS's correction (Ẑ = 1 for
    locally constrained sampling) and a run that forgets the resampling mean."""
    vocab, cg, lm = binary_setup(seed=1, scale=1.0)
    z = math.exp(enumerate_language(lm, cg, [0]).log_z)
    ones = np.ones(300) + np.random.default_rng(0).normal(0, 1e-3, 300)
    assert not _within(ones, z)
    z10 = _z_hats(lm, cg, 10, 300)
    assert not _within(z10 * 1.3, z)  # a 30% bias is detectable at this sample size


def test_weighted_particles_approach_the_conditional():
    """Weighted particles of 20 runs × 100 particles, pooled with each run weighted by its
    Ẑ, are within TV 0.1 of Q, while masked sampling's exact distribution is at
    TV > 0.3 on this instance."""
    vocab, cg, lm = binary_setup(seed=0, scale=1.5)
    ex = enumerate_language(lm, cg, [0])
    pooled = pooled_posterior([smc(lm, MatcherConstraint(cg.matcher()), [0], num_particles=100,
                                   max_new_tokens=16, rng=np.random.default_rng(r)) for r in range(20)], ex)
    tv = 0.5 * np.abs(pooled - ex.q).sum()
    tv_gcd = 0.5 * np.abs(ex.gcd - ex.q).sum()
    assert tv < 0.1 < 0.3 < tv_gcd, (tv, tv_gcd)


def test_asap_twist_keeps_z_unbiased():
    """ASAp's learned bounds as an SMC twist: Ẑ stays unbiased (4 standard errors, 200
    runs of K = 10), and the twist does change the weights. (An upper-bound twist with a
    locally constrained proposal need not lower the variance, so that is not asserted.)"""
    vocab, cg, lm = binary_setup(seed=1, scale=1.0)
    z = math.exp(enumerate_language(lm, cg, [0]).log_z)
    asap = ASApTrie(lm, cg, [0], max_new_tokens=16, seed=0)
    for _ in range(300):
        asap.sample()
    twisted = _z_hats(lm, cg, 10, 200, seed0=500, twist=asap.twist)
    plain = _z_hats(lm, cg, 10, 200, seed0=500)
    assert _within(twisted, z), (twisted.mean(), z)
    assert np.abs(twisted - plain).max() > 1e-3 * z


def test_generate_smc_contract():
    vocab, cg, lm = binary_setup(seed=3)
    a = gramgen.generate(lm, [0], grammar=cg, sampler="smc", max_new_tokens=16, seed=4, num_particles=12)
    b = gramgen.generate(lm, [0], grammar=cg, sampler="smc", max_new_tokens=16, seed=4, num_particles=12)
    assert a.tokens == b.tokens and a.extras["log_ml"] == b.extras["log_ml"]
    assert a.finish_reason == "eos" and a.complete
    assert len(a.extras["particles"]) == 12
    chosen = [p for p in a.extras["particles"] if p["tokens"] == a.tokens]
    assert chosen and all(p["finished"] and p["log_weight"] > -math.inf for p in chosen)
    assert a.logprob == pytest.approx(chosen[0]["logprob"])
    drawn = a.tokens + [a.eos_token]
    row_lp = sum(lm.next_logprobs([[0, *drawn[:i]]])[0][t] for i, t in enumerate(drawn))
    assert a.logprob == pytest.approx(row_lp)
    assert 0 < a.extras["constraint_evaluations"]
    never = gramgen.generate(lm, [0], grammar=cg, max_new_tokens=16, seed=4,
                             sampler=SMC(num_particles=12, ess_threshold=0.0))
    assert never.extras["resample_steps"] == []
    # a budget of one token leaves no room for a word and its EOS
    short = gramgen.generate(lm, [0], grammar=cg, sampler="smc", max_new_tokens=1, seed=0,
                             num_particles=4)
    assert short.extras["log_ml"] == -math.inf and short.finish_reason == "max_new_tokens"
    m = cg.matcher()
    m.advance_many(short.tokens)
    assert not short.complete
    with pytest.raises(ConfigurationError, match="resampling"):
        SMC(resampling="bogus")
    with pytest.raises(ConfigurationError, match="temperature 1"):
        gramgen.generate(lm, [0], grammar=cg, sampler="smc", temperature=0.5)


def test_smc_on_smollm2_estimates_exact_z():
    """Real SmolLM2-135M, chat answer "Yes"/"No" with an optional period: mean Ẑ over 30 runs of 10
    particles within 4 standard errors of the exact Z (enumerated with the model)."""
    lm, cg, prompt, ex = smollm2_yes_no()
    z = math.exp(ex.log_z)
    z_hats = _z_hats(lm, cg, 10, 30, prompt=prompt)
    assert _within(z_hats, z), (z_hats.mean(), z)
    assert abs(math.log(z_hats.mean()) - ex.log_z) < 0.5


def test_transformers_lm_cached_batches_match_fresh_forwards():
    """SMC scores particles in one batch, most extending a cached context: the batched,
    left-padded, KV-cache-reusing rows equal one fresh forward per context (float32 noise),
    and they are normalised log-probabilities over the whole vocabulary."""
    lm, tok = smollm2()
    base = tok.encode("The capital of France is")
    other = tok.encode("Numbers: 1, 2, 3")
    cached_lm = TransformersLM(lm.hf_model, lm.vocab)
    cached_lm.next_logprobs([base, other])
    contexts = [base + tok.encode(" Paris"), other + tok.encode(", 4, 5"), base,
                tok.encode("Hello")]
    rows = cached_lm.next_logprobs(contexts)
    assert cached_lm.tokens_run < sum(map(len, contexts)) + len(base) + len(other)
    for ctx, row in zip(contexts, rows):
        ref = TransformersLM(lm.hf_model, lm.vocab).next_logprobs([ctx])[0]
        assert row.shape == (lm.vocab.size,) and row.dtype == np.float64
        assert np.abs(np.exp(row) - np.exp(ref)).max() < 1e-4
        assert abs(np.logaddexp.reduce(row)) < 1e-9
