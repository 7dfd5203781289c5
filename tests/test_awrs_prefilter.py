"""AWRS's pre-filter: tokens ruled out before any check (the grammar's byte alphabet, the
bytes that may come next, a cached mask).

Exactness: the filter holds every token ``check`` allows, by brute force over the whole
vocabulary (``check`` of every token id, with the mask cache off so each check walks the
token) on random reachable states, for JSON Schema, Lark, regex and GBNF grammars and
several real tokenizers. Sampling: with the filter, AWRS's token, weight and rejections
are the very same values for one seed as without it (the filtered tokens still race and
count as rejections, they are only never checked), so its local distribution and the
unbiasedness of its weight are those test_awrs.py and test_smc.py establish; here only
the checks drop.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from conftest import SHARED, vocabulary
from synthetic import EOS, chi_square_pvalue, expr_setup

import gramgen
from gramgen.automata.alphabet import language_bytes
from gramgen.generation import SMC, MatcherConstraint, SyntheticLM, awrs_step
from gramgen.generation.samplers.awrs import possible_tokens
from gramgen.runtime import CompileOptions

P_MIN = 1e-3

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0},
                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
          "required": ["name", "age"], "additionalProperties": False}

GRAMMARS = {
    "json-schema": lambda: gramgen.Grammar.from_json_schema(SCHEMA),
    "lark-json": lambda: gramgen.Grammar.builtin("json"),
    "regex": lambda: gramgen.Grammar.from_regex(r"(?:[a-f0-9]{2,4}-)+(?:x|yz|é)\d{1,3}"),
    "gbnf-arithmetic": lambda: gramgen.Grammar.from_file(SHARED / "data/gbnf/llama.cpp/arithmetic.gbnf"),
}
TOKENIZERS = ["gpt2", "llama3", "qwen2", "smollm2"]


class _NoKnownMasks(MatcherConstraint):
    """A matcher constraint that never offers a mask it computed (``known_mask``), whose
    draw would differ from AWRS's: so that two runs can be compared draw for draw."""

    def known_mask(self):
        return None

    def fork(self):
        return type(self)(self.matcher.fork(), self.counter, self._masks)


class _Unfiltered(_NoKnownMasks):
    """The same, with nothing known before checks (AWRS as without the filter)."""

    def possible_tokens(self):
        return None


def _walk_states(cg, rng: random.Random, n_states: int):
    """Matchers at ``n_states`` reachable states: the start, then the ends of random walks
    of random allowed tokens (the shorter ones preferred, so walks get deep)."""
    vocab = cg.vocab
    eos = set(vocab.eos_token_ids)
    out = []
    while len(out) < n_states:
        m = cg.matcher()
        for _ in range(rng.randint(1, 12) if out else 0):
            allowed = [t for t in np.flatnonzero(m.mask()).tolist() if t not in eos]
            if not allowed:
                break
            short = [t for t in allowed if len(vocab.token_bytes(t)) <= 2]
            m.advance(rng.choice(short if short and rng.random() < 0.5 else allowed))
        out.append(m)
    return out


@pytest.mark.parametrize("tname", TOKENIZERS)
@pytest.mark.parametrize("gname", list(GRAMMARS))
def test_filter_holds_every_token_check_allows(gname, tname):
    """On 6 random reachable states: every token id the mask allows (no mask cache; the
    mask equals trying every token, as test_masks shows) is in the filter, ``check`` refuses
    a sample of the tokens outside it, and in the alphabet part alone; and on
    some state the filter rules out a tenth of the vocabulary or more (so this comparison has
    something to fail)."""
    vocab = vocabulary(tname)
    grammar = GRAMMARS[gname]()
    cg = gramgen.compile(grammar, vocab, CompileOptions(mask_cache_size=0))
    alphabet = cg.token_filter.in_alphabet
    smallest = vocab.size
    rng = random.Random(f"{gname}/{tname}")
    for m in _walk_states(cg, rng, 6):
        possible = cg.possible_tokens(m)
        assert possible.shape == (vocab.size,) and possible.dtype == bool
        assert not (possible & ~alphabet).any()
        # the mask (no cache) is brute force's stand-in over the whole vocabulary (it equals
        # trying every token: test_masks); check itself on a sample outside the filter
        allowed = m.mask()
        outside = np.flatnonzero(~possible)
        for t in rng.sample(outside.tolist(), min(300, outside.size)):
            assert not m.check(t), (m.text_bytes(), vocab.token_bytes(t))
        missed = np.flatnonzero(allowed & ~possible)
        assert not missed.size, (m.text_bytes(), [vocab.token_bytes(int(t)) for t in missed[:5]])
        assert allowed.any()
        smallest = min(smallest, int(possible.sum()))
    assert smallest < 0.9 * vocab.size, smallest


def test_alphabet_is_the_bytes_of_the_lexemes():
    """The alphabet of a regex is its characters' bytes; a token with any other byte is out."""
    vocab = vocabulary("gpt2")
    cg = gramgen.compile(gramgen.Grammar.from_regex(r"[ab]+c?"), vocab)
    np.testing.assert_array_equal(np.flatnonzero(language_bytes(cg.tables.lex_dfas)), [97, 98, 99])
    ids = {vocab.token_bytes(t): t for t in range(vocab.size)}
    f = cg.token_filter
    assert f.in_alphabet[ids[b"ab"]] and f.in_alphabet[ids[b"c"]]
    assert not f.in_alphabet[ids[b"d"]] and not f.in_alphabet[ids[b" a"]]
    assert set(np.flatnonzero(f.in_alphabet).tolist()) >= set(vocab.eos_token_ids)
    m = cg.matcher()
    m.advance(ids[b"ab"])
    possible = cg.possible_tokens(m)
    assert possible[ids[b"c"]] and possible[ids[b"ab"]]
    m.advance(ids[b"c"])
    possible = cg.possible_tokens(m)   # after "c" only EOS can come
    assert set(np.flatnonzero(possible).tolist()) == set(vocab.eos_token_ids)


def test_filter_is_the_cached_mask_where_there_is_one():
    vocab = vocabulary("smollm2")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMA), vocab)
    m = _walk_states(cg, random.Random(1), 1)[0]
    before = cg.possible_tokens(m)
    mask = m.mask()   # now cached by the state's signature
    after = cg.possible_tokens(m)
    expected = mask.copy()
    expected[list(vocab.eos_token_ids)] = True
    np.testing.assert_array_equal(after, expected)
    assert after.sum() < before.sum()
    m.advance(int(np.flatnonzero(mask)[0]))
    done = gramgen.compile(gramgen.Grammar.from_regex("a"), vocab).matcher()
    done.advance_many([int(t) for t in np.flatnonzero(done.mask())[:1]])
    done.advance(vocab.eos_token_ids[0])
    assert not done._cg.possible_tokens(done).any()   # after EOS nothing is allowed


def test_indented_matcher_has_no_filter():
    """The Python indenter rewrites the text the chart sees: no filter is claimed there."""
    cg = gramgen.compile(gramgen.Grammar.builtin("python"), vocabulary("gpt2"))
    m = cg.matcher()
    assert type(m).__name__ == "IndentedMatcher"
    assert cg.possible_tokens(m) is None and possible_tokens(MatcherConstraint(m)) is None


@pytest.mark.parametrize("mask_after", [32, 2])
def test_same_draw_and_weight_with_and_without_the_filter(mask_after):
    """For one seed, awrs_step with the filter returns the very token, weight and
    rejections it returns without it (whether or not the full mask is used), checking
    far fewer tokens."""
    vocab = vocabulary("gpt2")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMA), vocab)
    lm = SyntheticLM.hashed(vocab, seed=3, scale=3.0)
    checks = [0, 0]
    for i, m in enumerate(_walk_states(cg, random.Random(5), 8)):
        logp = lm.next_logprobs([[0, *m.tokens]])[0]
        possible = cg.possible_tokens(m)
        for seed in range(5):
            fresh = m.fork()
            plain = awrs_step(logp, fresh.check, np.random.default_rng(seed), fresh.mask, mask_after)
            filtered = awrs_step(logp, m.check, np.random.default_rng(seed), m.mask, mask_after,
                                 possible=possible)
            assert (filtered.token, filtered.log_weight, filtered.rejections) == \
                (plain.token, plain.log_weight, plain.rejections), (i, seed)
            assert filtered.evaluations <= plain.evaluations
            checks[0] += plain.evaluations
            checks[1] += filtered.evaluations
    assert checks[1] * 3 < checks[0], checks


def test_filtered_draws_follow_the_local_distribution():
    """Direct check with the filter on: chi-square of 4000 draws against π and the mean
    weight within 4 standard errors of Z, on contexts with junk tokens the filter removes."""
    vocab, cg, _ = expr_setup()
    lookup = {vocab.token_bytes(i): i for i in range(vocab.size)}
    junk = [lookup[b"z"], lookup[b" "]]
    lm = SyntheticLM.hashed(vocab, seed=1, scale=2.0, bias=dict.fromkeys(junk, 2.5))
    rng = np.random.default_rng(11)
    n = 4000
    for path in [[], ["("], ["(", "(x", "+", "y"]]:
        m = cg.matcher()
        m.advance_many([lookup[p.encode()] for p in path])
        logp = lm.next_logprobs([[0, *m.tokens]])[0]
        possible = cg.possible_tokens(m)
        assert not possible[junk].any()
        mask = m.mask()
        p = np.exp(logp)
        z = float(p[mask].sum())
        counts = np.zeros(vocab.size)
        weights = np.empty(n)
        for i in range(n):
            step = awrs_step(logp, m.check, rng, possible=possible)
            counts[step.token] += 1
            weights[i] = math.exp(step.log_weight)
        assert chi_square_pvalue(counts, np.where(mask, p, 0) / z) > P_MIN
        assert abs(weights.mean() - z) < 4 * weights.std() / math.sqrt(n), (weights.mean(), z)
    assert EOS  # (the synthetic vocabulary's EOS piece; used by expr_setup's language)


@pytest.mark.parametrize("sampler", ["awrs", "smc"])
def test_generate_same_outputs_fewer_checks(sampler):
    """gramgen.generate with AWRS and SMC on a real vocabulary: the same tokens, weights and
    log Z estimates as without the filter for each seed, at a fraction of the checks."""
    vocab = vocabulary("smollm2")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMA), vocab)
    lm = SyntheticLM.hashed(vocab, seed=0, scale=2.0)
    options = {"sampler": "awrs"} if sampler == "awrs" else {"sampler": SMC(num_particles=4)}
    evaluations = [0, 0]
    for seed in range(3):
        runs = []
        for k, constraint in enumerate([_Unfiltered(cg.matcher()), _NoKnownMasks(cg.matcher())]):
            r = gramgen.generate(lm, [0], constraint=constraint, max_new_tokens=12, seed=seed, **options)
            evaluations[k] += r.extras["constraint_evaluations"]
            runs.append(r)
        a, b = runs
        assert a.tokens == b.tokens and a.finish_reason == b.finish_reason
        key = "log_weight" if sampler == "awrs" else "log_ml"
        assert a.extras[key] == b.extras[key]
    assert evaluations[1] * 10 < evaluations[0], evaluations
