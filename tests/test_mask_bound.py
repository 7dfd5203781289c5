"""The per-mask work bound and masked sampling past it.

A bounded mask (``Matcher.bounded_words`` / ``fill_bitmask(max_work=...)``) stops its exit
walk once it passes the bound: what it returns must then be a subset of the exact mask,
with every other allowed token among the ones it leaves open. Masked sampling past the
bound draws by visiting the best tokens one at a time; its outputs must be distributed
exactly as with full masks (greedy: the same tokens; sampled: chi-square against the
enumerated masked distribution, p > P_MIN at fixed seeds)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from synthetic import chi_square_pvalue, enumerate_language, expr_setup, small_vocab

import gramgen
from gramgen.automata import bitmask
from gramgen.generation import SyntheticLM
from gramgen.generation.constraint import MatcherConstraint
from gramgen.generation.loop import Sequence, run
from gramgen.generation.samplers import Constrained, MaskedSampler
from gramgen.generation.samplers.masked import _Open, warp

#: a chi-square test fails below this p-value (fixed seeds: a pass is reproducible)
P_MIN = 1e-3

GRAMMARS = {
    "json": lambda: gramgen.Grammar.builtin("json"),
    "sql": lambda: gramgen.Grammar.builtin("sql"),
    "long-string": lambda: gramgen.Grammar.from_json_schema({
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 300}, "n": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string", "format": "date-time"}}},
        "required": ["s"]}, whitespace="flexible"),
}


def _bits(words: np.ndarray, size: int) -> np.ndarray:
    return bitmask.unpack(np.asarray(words, dtype=np.uint32), size)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_a_bounded_mask_is_a_subset_and_leaves_the_rest_open(name, tokenizer):
    """Along random walks of allowed tokens, for bounds from 0 (every walk stops) up:
    ``allowed ⊆ mask ⊆ allowed ∪ undecided``, ``fill_bitmask`` says the same, and a
    mask computed within its bound is the exact one. Each compile starts with empty
    caches, so the bounded walks are real walks (a cached mask is always complete)."""
    from conftest import vocabulary

    vocab = vocabulary(tokenizer)
    rng = random.Random(f"{name}/{tokenizer}")
    stopped = completed = 0
    for limit in (0, 300, 20_000, 10**9):
        cg = gramgen.compile(GRAMMARS[name](), vocab)
        fresh = gramgen.compile(GRAMMARS[name](), vocab)   # the exact masks, from other caches
        m, exact = cg.matcher(), fresh.matcher()
        row = np.zeros((1, bitmask.n_words(vocab.size)), dtype=np.int32)
        for _ in range(30):
            mask = exact.mask()
            allowed, undecided = m.bounded_words(limit)
            got = _bits(allowed, vocab.size)
            if undecided is None:
                completed += 1
                assert (got == mask).all(), (name, limit, m.text_bytes())
            else:
                stopped += 1
                open_ = _bits(undecided, vocab.size)
                assert not (got & ~mask).any(), (name, limit, m.text_bytes())
                assert not (mask & ~(got | open_)).any(), (name, limit, m.text_bytes())
                assert not (got & open_).any()
            # the same again, as a row (a stopped walk caches nothing: it stops alike)
            assert m.fill_bitmask(row, max_work=limit) == (undecided is None)
            assert (row[0].view(np.uint32) == allowed).all()
            tokens = [t for t in np.flatnonzero(mask).tolist() if t not in vocab.eos_token_ids]
            if not tokens:
                break
            t = rng.choice(tokens)
            m.advance(t)
            exact.advance(t)
    assert stopped and completed, (stopped, completed)   # both cases were met
    with pytest.raises(gramgen.ConfigurationError, match="max_work"):
        m.bounded_words(-1)


def test_fill_bitmask_with_a_bound_returns_whether_the_row_is_exact():
    from conftest import vocabulary

    vocab = vocabulary("gpt2")
    cg = gramgen.compile(GRAMMARS["long-string"](), vocab)
    m = cg.matcher()
    m.advance_text(b'{"s": "abc')
    row = np.zeros((2, bitmask.n_words(vocab.size)), dtype=np.int32)
    assert m.fill_bitmask(row, 1, max_work=0) is False
    partial = _bits(row[1].view(np.uint32), vocab.size)
    assert partial.any() and not (partial & ~m.mask()).any() and (m.mask() & ~partial).any()
    assert m.fill_bitmask(row, 0) is True   # (now cached: complete whatever the bound)
    assert m.fill_bitmask(row, 1, max_work=0) is True
    assert (row[0] == row[1]).all() and (_bits(row[0].view(np.uint32), vocab.size) == m.mask()).all()


# -- masked sampling past the bound ---------------------------------------------------------------

class Opened(MatcherConstraint):
    """A matcher whose every bounded mask is left open: a random part of the allowed
    tokens is given as allowed, the rest of them and a random part of the others as
    undecided (the sampler must get the same distribution from any such split)."""

    def __init__(self, matcher, rng=None, counter=None, _opened=None):
        super().__init__(matcher, counter)
        self.rng = rng or np.random.default_rng(0)
        self._opened = [0] if _opened is None else _opened   # (shared with forks)

    @property
    def opened(self) -> int:
        return self._opened[0]

    def bounded_words(self, max_work):
        mask = self.matcher.mask()
        keep = mask & (self.rng.random(mask.shape[0]) < 0.3)
        rest = (mask & ~keep) | (~mask & (self.rng.random(mask.shape[0]) < 0.5))
        self._opened[0] += 1
        return bitmask.pack(keep), bitmask.pack(rest)

    def fork(self):
        return Opened(self.matcher.fork(), self.rng, self.counter, self._opened)


PAIRS_PIECES = ['{"', 'a', 'b', '":', '1', '2', '22', ',"', '}', '"x', '"}', 'x"', '"', ':', ',',
                '{', '2}', '1,"']
PAIRS_LARK = r'''
start: "{" pair ("," pair)? "}"
pair: KEY ":" VAL
KEY: "\"a\"" | "\"b\""
VAL: "1" | "22" | "\"x\""
'''


def _pairs_setup(seed: int = 0):
    vocab = small_vocab(PAIRS_PIECES)
    cg = gramgen.compile(gramgen.Grammar.from_lark(PAIRS_LARK), vocab)
    return vocab, cg, SyntheticLM.hashed(vocab, seed=seed, scale=2.0)


def _sample(lm, cg, vocab, options, seed, constraint=None):
    seq = Sequence([0], constraint if constraint is not None else MatcherConstraint(cg.matcher()))
    [seq] = run(lm, [seq], MaskedSampler(options, vocab, seed), max_new_tokens=40)
    return seq


@pytest.mark.parametrize("setup", [expr_setup, _pairs_setup])
def test_greedy_past_the_bound_emits_the_same_tokens(setup):
    """Greedy with every mask left open picks the argmax of the masked model, ties by
    lowest id as ``torch.argmax`` does: the same outputs as with full masks."""
    for seed in range(4):
        vocab, cg, lm = setup(seed)
        full = _sample(lm, cg, vocab, Constrained(), 0)
        opened = Opened(cg.matcher(), np.random.default_rng(seed))
        bounded = _sample(lm, cg, vocab, Constrained(max_mask_work=0), 0, opened)
        assert bounded.tokens == full.tokens
        # (where only EOS is allowed it is drawn there: "eos", not "grammar")
        assert bounded.finish == full.finish or {bounded.finish, full.finish} == {"eos", "grammar"}
        assert bounded.stats.bounded_masks == opened.opened > 0
        # forced tokens are drawn there instead: the same tokens, more draws
        assert bounded.stats.sampled_tokens >= full.stats.sampled_tokens


@pytest.mark.parametrize("setup", [expr_setup, _pairs_setup])
def test_sampling_past_the_bound_has_the_masked_distribution(setup):
    """Temperature 1 with every mask left open (Gumbel-max over the visited tokens):
    the outputs' frequencies against the enumerated masked-sampling distribution."""
    vocab, cg, lm = setup(3)
    exact = enumerate_language(lm, cg, [0])
    index = exact.index()
    counts = np.zeros(len(exact.words))
    rng = np.random.default_rng(1)
    n = 3000
    for seed in range(n):
        seq = _sample(lm, cg, vocab, Constrained(temperature=1.0, max_mask_work=0), seed,
                      Opened(cg.matcher(), rng))
        counts[index[tuple(seq.tokens) + ((seq.eos_token if seq.eos_token is not None
                                            else vocab.eos_token_ids[0]),)]] += 1
    assert chi_square_pvalue(counts, exact.gcd) > P_MIN


@pytest.mark.parametrize("options", [dict(temperature=0.7, top_k=2), dict(temperature=1.3, top_k=3),
                                     dict(temperature=0.8), dict(temperature=1.0, top_p=0.8)])
def test_one_step_past_the_bound_draws_from_the_warped_masked_distribution(options):
    """One step from states of the pairs grammar, its mask left open: the choices'
    frequencies against the masked logits warped (temperature, top_k, top_p); with
    ``top_k`` the reported log-probability is the exact one of the drawn token."""
    import torch

    vocab, cg, lm = _pairs_setup(5)
    for prefix in ([], [0], [0, 1], [0, 1, 3]):
        m = cg.matcher()
        m.advance_many(prefix)
        mask = m.mask()
        logits = torch.tensor(lm.next_logprobs([[0, *prefix]])[0], dtype=torch.float32)[None]
        scores = logits.masked_fill(~torch.from_numpy(mask)[None], float("-inf"))
        probs = torch.softmax(warp(scores, options["temperature"], options.get("top_k"),
                                   options.get("top_p")), dim=-1)[0].numpy().astype(np.float64)
        sampler = MaskedSampler(Constrained(max_mask_work=0, **options), vocab, seed=7)
        rng = np.random.default_rng(2)
        counts = np.zeros(vocab.size)
        for _ in range(2000):
            seq = Sequence([0], Opened(m.fork(), rng))
            seq.state = _Open(*seq.constraint.bounded_words(0))
            [choice] = sampler.choose([seq], logits)
            counts[choice.token] += 1
            if "top_k" in options:
                assert choice.logprob == pytest.approx(float(np.log(probs[choice.token])), abs=1e-5)
        assert not counts[probs == 0].any()
        assert chi_square_pvalue(counts[probs > 0], probs[probs > 0]) > P_MIN, (options, prefix)


def test_top_p_completes_the_mask():
    """``top_p`` needs the allowed tokens' mass: the step completes the mask and draws as
    without a bound, the same token for the same seed."""
    vocab, cg, lm = _pairs_setup(2)
    for seed in range(5):
        a = _sample(lm, cg, vocab, Constrained(temperature=1.0, top_p=0.9), seed)
        b = _sample(lm, cg, vocab, Constrained(temperature=1.0, top_p=0.9, max_mask_work=0), seed,
                    Opened(cg.matcher(), np.random.default_rng(seed)))
        assert a.tokens == b.tokens and a.logprob == pytest.approx(b.logprob)


def test_bad_bounds_are_configuration_errors():
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(gramgen.ConfigurationError, match="max_mask_work"):
            Constrained(max_mask_work=bad)


def test_generate_with_a_bound_on_a_real_vocabulary():
    """With a real tokenizer's vocabulary and bound 0, every walk stops: the steps that
    needed one are drawn past the bound, and greedy outputs equal those of full masks."""
    from conftest import vocabulary

    vocab = vocabulary("gpt2")
    lm = SyntheticLM.hashed(vocab, seed=3, scale=3.0)
    grammar = GRAMMARS["long-string"]()
    for seed in range(2):
        full = gramgen.generate(lm, [0], grammar=gramgen.compile(grammar, vocab), max_new_tokens=40, seed=seed)
        bounded = gramgen.generate(lm, [0], grammar=gramgen.compile(grammar, vocab), max_new_tokens=40, seed=seed,
                                   sampler=Constrained(max_mask_work=0))
        assert bounded.tokens == full.tokens
        assert bounded.stats.bounded_masks > 0 and full.stats.bounded_masks == 0


def test_drafts_are_verified_on_the_full_mask_of_a_step_left_open():
    """Prompt lookup drafts from a prompt that spells words of the pairs grammar; with
    every mask left open, greedy verification keeps the outputs of full masks."""
    vocab, cg, lm = _pairs_setup(4)
    prompt = [0, 1, 3, 4, 6, 2, 3, 5, 8, 0, 1, 3, 4, 8]   # {"a":1,"b":22} {"a":1}
    full = gramgen.generate(lm, prompt, grammar=cg, max_new_tokens=30)
    for draft in ("prompt_lookup", "forced"):
        opened = Opened(cg.matcher(), np.random.default_rng(0))
        drafted = gramgen.generate(lm, prompt, constraint=opened, max_new_tokens=30,
                                   sampler=Constrained(max_mask_work=0),
                                   # (fixed draft lengths: adaptive ones follow measured
                                   # wall times, and may draft nothing on a busy machine)
                                   speculative=gramgen.Speculation(draft=draft, adaptive=False))
        assert drafted.tokens == full.tokens
        assert opened.opened > 0 and drafted.stats.drafted > 0, draft
