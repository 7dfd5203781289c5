"""AWRS: exact local samples, an unbiased local normaliser, few constraint checks.

Oracles: exact enumeration of the without-replacement draw orders (tiny vocabularies),
and the locally constrained distribution ``π = p·1[allowed]/Z`` of real matcher states.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic import (EOS, binary_setup, chi_square_pvalue, expr_setup, smollm2_yes_no)

import gramgen
from gramgen.generation import MatcherConstraint, PredicateConstraint, SyntheticLM, awrs_step
from gramgen.generation.samplers.awrs import WithoutReplacement

P_MIN = 1e-3  # chi-square p-value below which a distribution test fails


def _exact_awrs(p: np.ndarray, allowed: set[int], biased: bool = False):
    """E[w] and P(x = t) of AWRS by enumerating every draw order of both rounds.

    ``biased`` uses the round-1-only estimator ``1 - r1``, which is *not* unbiased: the
    test below must tell the two apart.
    """
    v = len(p)
    ex = [0.0]
    px = np.zeros(v)

    def round2(rem: frozenset, prob: float, n_rej: int, left: float) -> None:
        tot = sum(p[t] for t in rem)
        for t in rem:
            q = prob * p[t] / tot
            if t in allowed:
                ex[0] += q * left / (n_rej + 1)
            else:
                round2(rem - {t}, q, n_rej + 1, left)

    def round1(rem: frozenset, prob: float, rejected: tuple) -> None:
        tot = sum(p[t] for t in rem)
        for t in rem:
            q = prob * p[t] / tot
            if t in allowed:
                px[t] += q
                left = 1.0 - sum(p[r] for r in rejected)
                if biased:
                    ex[0] += q * left
                else:
                    round2(frozenset(range(v)) - set(rejected), q, len(rejected), left)
            else:
                round1(rem - {t}, q, rejected + (t,))

    round1(frozenset(range(v)), 1.0, ())
    return ex[0], px


def test_weight_is_exactly_unbiased_by_enumeration():
    """E[w] = Z and x ~ π to rounding, for 30 random (p, allowed set) of 6 tokens; the
    round-1-only estimator misses Z by more than 1e-3 on most of them."""
    rng = np.random.default_rng(7)
    biased_misses = 0
    for _ in range(30):
        p = rng.dirichlet(np.full(6, 0.5))
        allowed = set(rng.choice(6, size=int(rng.integers(1, 6)), replace=False).tolist())
        z = sum(p[t] for t in allowed)
        mean_w, px = _exact_awrs(p, allowed)
        assert mean_w == pytest.approx(z, abs=1e-12)
        target = np.array([p[t] / z if t in allowed else 0.0 for t in range(6)])
        np.testing.assert_allclose(px, target, atol=1e-12)
        biased_w, _ = _exact_awrs(p, allowed, biased=True)
        biased_misses += abs(biased_w - z) > 1e-3
    assert biased_misses >= 10


def test_without_replacement_draw_order():
    """The first two draws of the sampler AWRS uses follow p(a)p(b)/(1-p(a))."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    rng = np.random.default_rng(3)
    n = 20_000
    counts = np.zeros((4, 4))
    for _ in range(n):
        s = WithoutReplacement(p, rng)
        a = s.draw()
        s.remove(a)
        counts[a, s.draw()] += 1
    expected = np.array([[p[a] * p[b] / (1 - p[a]) if a != b else 0 for b in range(4)]
                         for a in range(4)])
    assert chi_square_pvalue(counts.ravel(), expected.ravel()) > P_MIN


def _contexts(cg, vocab, lm, paths):
    """(logp, matcher, allowed mask) at the end of each token path."""
    out = []
    for path in paths:
        m = cg.matcher()
        m.advance_many(path)
        out.append((lm.next_logprobs([[0, *path]])[0], m, m.mask()))
    return out


def _ids(vocab, pieces):
    lookup = {vocab.token_bytes(i): i for i in range(vocab.size)}
    return [vocab.eos_token_ids[0] if p == EOS else lookup[p.encode()] for p in pieces]


@pytest.mark.parametrize("mask_after", [64, 1])
@pytest.mark.parametrize("setup,paths,junk", [
    (binary_setup, [[], ["0"], ["1", "00"], ["0", "1", "1", "0"], ["1", "00", "11"]],
     ["2", "a", " "]),
    (expr_setup, [[], ["("], ["(x", "+"], ["(", "(x", "+", "y"], ["(", "(x", "*", "y)", "+"]],
     ["z", " "]),
])
def test_tokens_follow_local_distribution_and_weight_mean_is_z(setup, paths, junk, mask_after):
    """Per context, 4000 draws: chi-square against π (p > 1e-3), and |mean w - Z| <
    4 standard errors. The contexts include one with a single allowed token ("10011"
    then EOS; "(x+y" then ")") and one where the allowed tokens hold < 5% of the mass.
    ``mask_after=1`` runs the vectorised continuation (full mask) after one rejection."""
    vocab, cg, _ = setup()
    # tokens that are never allowed get extra mass, so some contexts have a small Z
    lm = SyntheticLM.hashed(vocab, seed=1, scale=2.0, bias=dict.fromkeys(_ids(vocab, junk), 2.5))
    rng = np.random.default_rng(11)
    n = 4000
    smallest_z = 1.0
    sizes = []
    for logp, m, mask in _contexts(cg, vocab, lm, [_ids(vocab, p) for p in paths]):
        p = np.exp(logp)
        z = float(p[mask].sum())
        smallest_z = min(smallest_z, z)
        sizes.append(int(mask.sum()))
        counts = np.zeros(vocab.size)
        weights = np.empty(n)
        for i in range(n):
            step = awrs_step(logp, m.check, rng, m.mask, mask_after=mask_after)
            counts[step.token] += 1
            weights[i] = math.exp(step.log_weight)
        assert chi_square_pvalue(counts, np.where(mask, p, 0) / z) > P_MIN
        assert abs(weights.mean() - z) < 4 * weights.std() / math.sqrt(n), (weights.mean(), z)
    assert min(sizes) == 1 and smallest_z < 0.05, (sizes, smallest_z)


def test_no_allowed_token_gives_weight_zero():
    vocab, cg, lm = binary_setup()
    m = cg.matcher()
    m.advance_many(_ids(vocab, ["1", EOS]))
    step = awrs_step(lm.next_logprobs([[0]])[0], m.check, np.random.default_rng(0))
    assert step.token is None and step.log_weight == -math.inf
    assert step.evaluations == int(np.count_nonzero(np.isfinite(lm.next_logprobs([[0]])[0])))


def test_predicate_constraint_matches_the_grammar():
    """A Python predicate for the same language as the regex gives the same local
    distribution and the same outputs for the same seed."""
    vocab, cg, lm = binary_setup(seed=2)

    def prefix_ok(text: str) -> bool:
        return len(text) <= 5 and set(text) <= {"0", "1"}

    def complete_ok(text: str) -> bool:
        return 1 <= len(text) <= 5 and set(text) <= {"0", "1"}

    pred = PredicateConstraint(vocab, prefix_ok, complete_ok)
    for seed in range(20):
        a = gramgen.generate(lm, [0], grammar=cg, sampler="awrs", max_new_tokens=16, seed=seed)
        b = gramgen.generate(lm, [0], constraint=pred, sampler="awrs", max_new_tokens=16, seed=seed)
        assert a.tokens == b.tokens and a.extras["log_weight"] == b.extras["log_weight"]
        assert a.finish_reason == b.finish_reason == "eos" and b.complete
    assert pred.counter.count > 0


def test_few_checks_when_the_model_agrees():
    """A model that puts 90% of its mass on allowed tokens needs < 3 checks per token
    (Z ≈ 0.9: mean first-round checks ≈ 1/Z), against vocab.size for a full mask."""
    vocab, cg, _ = binary_setup()
    allowed_bias = {t: 6.0 for t in _ids(vocab, ["0", "1", "00", "11", "01", EOS])}
    lm = SyntheticLM.hashed(vocab, seed=0, scale=0.5, bias=allowed_bias)
    c = MatcherConstraint(cg.matcher())
    total = steps = 0
    for seed in range(200):
        r = gramgen.generate(lm, [0], constraint=c, sampler="awrs", max_new_tokens=16, seed=seed)
        total += r.extras["constraint_evaluations"]
        steps += r.extras["steps"]
    per_step = total / steps
    assert 1.0 <= per_step < 3.0, per_step
    # masked sampling: one full mask before each draw, and one more when the grammar then
    # allows nothing but ending
    full = gramgen.generate(lm, [0], grammar=cg, temperature=1.0, max_new_tokens=16, seed=0,
                            jump_forward=False)
    masks = full.extras["steps"] + (full.finish_reason == "grammar")
    assert full.extras["constraint_evaluations"] == masks * vocab.size


def test_awrs_on_smollm2_matches_exact_local_distribution():
    """Real SmolLM2-135M, first token of a chat answer "Yes"/"No": 1500 AWRS draws against the
    exact masked distribution (chi-square p > 1e-3), mean weight within 4 standard errors
    of the exact allowed mass, and far fewer checks than the 49152 of a full mask."""
    lm, cg, prompt, _ = smollm2_yes_no()
    logp = lm.next_logprobs([prompt])[0]
    m = cg.matcher()
    mask = m.mask()
    p = np.exp(logp)
    z = float(p[mask].sum())
    rng = np.random.default_rng(5)
    n = 1500
    counts = np.zeros(lm.vocab.size)
    weights = np.empty(n)
    checks = 0
    for i in range(n):
        step = awrs_step(logp, m.check, rng)
        counts[step.token] += 1
        weights[i] = math.exp(step.log_weight)
        checks += step.evaluations
    assert chi_square_pvalue(counts, np.where(mask, p, 0) / z) > P_MIN
    assert abs(weights.mean() - z) < 4 * weights.std() / math.sqrt(n), (weights.mean(), z)
    assert checks / n < 20 < lm.vocab.size


def test_known_mask_gives_exact_draw_and_weight():
    """With the state's mask already at hand, AWRS draws from π directly (chi-square) and
    its weight is exactly Z, with no check; MatcherConstraint offers masks it computed."""
    vocab, cg, lm = binary_setup(seed=1)
    logp = lm.next_logprobs([[0]])[0]
    c = MatcherConstraint(cg.matcher())
    assert c.known_mask() is None
    mask = c.mask()
    np.testing.assert_array_equal(c.fork().known_mask(), mask)
    p = np.exp(logp)
    z = float(p[mask].sum())
    rng = np.random.default_rng(0)
    counts = np.zeros(vocab.size)
    for _ in range(3000):
        step = awrs_step(logp, c.check, rng, known=mask)
        assert step.evaluations == 0 and step.log_weight == pytest.approx(math.log(z), abs=1e-12)
        counts[step.token] += 1
    assert chi_square_pvalue(counts, np.where(mask, p, 0) / z) > P_MIN
