"""ASAp: upper bounds that only fall, exactness once explored, convergence where GCD stays
biased, persistence. Oracles by enumeration of finite languages (see synthetic.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic import (BINARY, BINARY_PIECES, Exact, binary_setup, empirical, enumerate_language, kl,
                       small_vocab, smollm2_yes_no, word)

import gramgen
from gramgen import GramgenError
from gramgen.generation import ASApSampling, ASApTrie, SyntheticLM


def asap_distribution(asap: ASApTrie, lm, cg, ex: Exact, prompt) -> np.ndarray:
    """The exact distribution of ASAp's *next* sample over ``ex.words``: the product of
    its next-token distributions, with plain masking (Ê = G) where the trie has no node."""
    cache: dict[tuple[int, ...], dict[int, float]] = {}

    def local(prefix: tuple[int, ...]) -> dict[int, float]:
        if prefix not in cache:
            dist = asap.next_token_distribution(prefix)
            if dist is None:
                m = cg.matcher()
                m.advance_many(prefix)
                allowed = np.flatnonzero(m.mask())
                p = np.exp(lm.next_logprobs([list(prompt) + list(prefix)])[0][allowed])
                dist = (allowed, p / p.sum())
            cache[prefix] = dict(zip(dist[0].tolist(), dist[1].tolist()))
        return cache[prefix]

    out = np.empty(len(ex.words))
    for i, w in enumerate(ex.words):
        prob = 1.0
        for j, t in enumerate(w):
            prob *= local(w[:j]).get(t, 0.0)
        out[i] = prob
    return out


def test_worked_example_from_the_design_note():
    """L = {ab, b}; P(a)=.9, P(b)=.1, then P(a|a)=.99, P(b|a)=.01. GCD picks "ab" 90% of
    the time, the target 8.26%; once ASAp has expanded "a" its first step is exact."""
    vocab = small_vocab(["a", "b"])
    eos = vocab.eos_token_ids[0]
    table = {(): {0: 0.9, 1: 0.1}, (0,): {0: 0.99, 1: 0.01}}

    def logits(ctx):
        out = np.full(vocab.size, -np.inf)
        for t, pr in table.get(tuple(ctx[1:]), {eos: 1.0}).items():
            out[t] = math.log(pr)
        return out

    lm = SyntheticLM(vocab, logits)
    cg = gramgen.compile(gramgen.Grammar.from_lark('start: "ab" | "b"'), vocab)
    asap = ASApTrie(lm, cg, [0], max_new_tokens=8, seed=0)
    while asap.log_bound((0,)) is None or asap.next_token_distribution((0,)) is None:
        asap.sample()
    allowed, probs = asap.next_token_distribution(())
    q_a = 0.9 * 0.01 / (0.9 * 0.01 + 0.1)
    assert dict(zip(allowed.tolist(), probs.tolist())) == pytest.approx({0: q_a, 1: 1 - q_a},
                                                                       abs=1e-12)
    assert math.exp(asap.log_bound((0,))) == pytest.approx(0.01, abs=1e-12)


def test_bounds_stay_above_efg_and_never_increase():
    """After each of 150 samples, at every prefix of the language the trie knows:
    Ê(u) ≥ EFG(u) (to 1e-12, relative) and Ê(u) ≤ its value after the previous sample."""
    vocab, cg, lm = binary_setup(seed=1, scale=1.0)
    ex = enumerate_language(lm, cg, [0])
    asap = ASApTrie(lm, cg, [0], max_new_tokens=16, seed=3)
    previous: dict[tuple[int, ...], float] = {}
    for _ in range(150):
        asap.sample()
        for prefix, log_efg in ex.log_efg.items():
            b = asap.log_bound(prefix)
            if b is None:
                continue
            assert b >= log_efg - 1e-12, (prefix, b, log_efg)
            assert b <= previous.get(prefix, 0.0) + 1e-12
            previous[prefix] = b
    assert len(previous) > 100  # the walk did reach most of the language


def test_exact_once_every_prefix_is_explored():
    """A one-key JSON enum object, {"c":1|2|3} (8 token sequences): once the trie holds
    every viable prefix, ASAp's next-sample distribution equals Q (KL < 1e-9) and its
    bounds equal EFG; masked sampling's KL is > 0.05 on this instance."""
    vocab = small_vocab(['{"c":', '{', '"c":', '1', '2', '3', '}', '1}', 'x'])
    cg = gramgen.compile(gramgen.Grammar.from_lark(r'start: "{\"c\":" ("1" | "2" | "3") "}"'),
                         vocab)
    lm = SyntheticLM.hashed(vocab, seed=3, scale=0.5)
    ex = enumerate_language(lm, cg, [0])
    assert kl(ex.gcd, ex.q) > 0.05
    asap = ASApTrie(lm, cg, [0], max_new_tokens=32, seed=1)
    prefixes = list(ex.log_efg)
    for n in range(5000):
        asap.sample()
        if n % 50 == 0 and all(asap.next_token_distribution(u) is not None for u in prefixes):
            break
    assert all(asap.next_token_distribution(u) is not None for u in prefixes)
    assert kl(asap_distribution(asap, lm, cg, ex, [0]), ex.q) < 1e-9
    for u, log_efg in ex.log_efg.items():
        assert asap.log_bound(u) == pytest.approx(log_efg, abs=1e-9)


def test_converges_where_masked_sampling_stays_biased():
    """Binary strings of length <= 5 (272 token sequences), KL(GCD || Q) = 1.17 exactly.
    ASAp, 3 seeds × 1500 samples: the exact KL of its next sample is < 0.1 × KL(GCD || Q);
    the empirical KL of samples 751-1500 is < 0.3 (the floor of an exact sampler,
    (|L|-1)/2N, is 0.18 here), while 750 masked samples have empirical KL > 0.8."""
    vocab, cg, lm = binary_setup(seed=1, scale=1.0)
    ex = enumerate_language(lm, cg, [0])
    kl_gcd = kl(ex.gcd, ex.q)
    assert kl_gcd > 1.0
    for seed in range(3):
        asap = ASApTrie(lm, cg, [0], max_new_tokens=16, seed=seed)
        samples = [asap.sample().tokens for _ in range(1500)]
        assert kl(asap_distribution(asap, lm, cg, ex, [0]), ex.q) < 0.1 * kl_gcd
        if seed == 0:
            kl_asap = kl(empirical(samples[750:], ex), ex.q)
    gcd = [word(gramgen.generate(lm, [0], grammar=cg, temperature=1.0, max_new_tokens=16, seed=s), vocab)
           for s in range(750)]
    kl_gcd_emp = kl(empirical(gcd, ex), ex.q)
    assert kl_asap < 0.3 < 0.8 < kl_gcd_emp, (kl_asap, kl_gcd_emp)


def test_save_load_round_trip(tmp_path):
    """A loaded trie gives the same next-token distributions and, with the same seed,
    the same samples as the original; a different grammar or vocabulary is refused."""
    vocab, cg, lm = binary_setup(seed=2)
    a = ASApTrie(lm, cg, [0], max_new_tokens=16, seed=0)
    for _ in range(40):
        a.sample()
    path = tmp_path / "trie.npz"
    a.save(path)
    b = ASApTrie.load(path, lm, cg, seed=9)
    assert b.num_nodes == a.num_nodes and b.samples_drawn == 40
    a.rng = np.random.default_rng(9)
    for _ in range(30):
        assert a.sample().tokens == b.sample().tokens
    assert a.num_nodes == b.num_nodes
    other = gramgen.compile(gramgen.Grammar.from_regex(r"[01]{1,4}"), vocab)
    with pytest.raises(GramgenError):
        ASApTrie.load(path, lm, other)
    with np.load(path, allow_pickle=False) as data:  # plain arrays only
        assert set(data.files) == {"header", "parent", "token", "sizes", "allowed", "logp", "log_e"}


def test_generate_asap_reuses_a_trie():
    vocab, cg, lm = binary_setup(seed=2)
    asap = ASApTrie(lm, cg, [0], max_new_tokens=16, seed=0)
    r = gramgen.generate(lm, [0], grammar=cg, max_new_tokens=16, seed=0,
                         sampler=ASApSampling(trie=asap, warmup=5))
    assert asap.samples_drawn == 6 and r.complete and r.finish_reason == "eos"
    assert r.eos_token == vocab.eos_token_ids[0]
    m = cg.matcher()
    m.advance_many(r.tokens + [r.eos_token])
    assert m.is_terminated()
    with pytest.raises(GramgenError):
        gramgen.generate(lm, [0, 1], grammar=cg, max_new_tokens=16, seed=0,
                         sampler=ASApSampling(trie=asap))
    with pytest.raises(GramgenError, match="max_new_tokens"):   # another budget, another target
        gramgen.generate(lm, [0], grammar=cg, max_new_tokens=8, seed=0,
                         sampler=ASApSampling(trie=asap))


def test_budget_too_small_raises():
    vocab, cg, lm = binary_setup()
    asap = ASApTrie(lm, cg, [0], max_new_tokens=1, seed=0)
    with pytest.raises(GramgenError):
        asap.sample()


def test_asap_on_smollm2_converges_to_the_exact_conditional():
    """Real SmolLM2-135M, chat answer "Yes"/"No" with an optional period (12 token
    sequences, KL(GCD || Q) ≈ 0.25): after 300 ASAp samples the exact KL of its next
    sample to Q is < 0.05 × KL(GCD || Q)."""
    lm, cg, prompt, ex = smollm2_yes_no()
    kl_gcd = kl(ex.gcd, ex.q)
    assert kl_gcd > 0.1
    asap = ASApTrie(lm, cg, prompt, max_new_tokens=8, seed=0)
    for _ in range(300):
        asap.sample()
    assert kl(asap_distribution(asap, lm, cg, ex, prompt), ex.q) < 0.05 * kl_gcd


def test_generate_asap_accepts_an_equal_recompiled_grammar():
    """generate() may compile the grammar anew on each call: an ASAp trie built for an
    equal grammar over the same vocabulary is reused, a different grammar is refused."""
    vocab, cg, lm = binary_setup(seed=2)
    asap = ASApTrie(lm, cg, [0], max_new_tokens=16, seed=0)
    again = gramgen.compile(gramgen.Grammar.from_regex(BINARY), vocab)
    gramgen.generate(lm, [0], grammar=again, max_new_tokens=16, seed=0,
                     sampler=ASApSampling(trie=asap))
    assert asap.samples_drawn == 1
    other = gramgen.compile(gramgen.Grammar.from_regex(r"[01]{1,4}"), vocab)
    with pytest.raises(GramgenError):
        gramgen.generate(lm, [0], grammar=other, max_new_tokens=16, seed=0,
                         sampler=ASApSampling(trie=asap))


# -- learning across generate() calls ----------------------------------------------------------

SMALL = r"[01]{1,2}"


def small_setup():
    """9 token sequences; the masked distribution is far from Q (KL(GCD || Q) = 0.76)."""
    vocab = small_vocab(BINARY_PIECES)
    cg = gramgen.compile(gramgen.Grammar.from_regex(SMALL), vocab)
    return vocab, cg, SyntheticLM.hashed(vocab, seed=0, scale=2.0)


def test_repeated_generate_calls_converge_to_the_conditional():
    """300 calls of generate(sampler="asap", temperature=1, seed=i) on a fresh model: the
    empirical distribution is within KL 0.1 of the exact Q (an exact sampler's expected
    KL is (|L|-1)/2N = 0.013 here) and 10x closer than 300 calls of masked sampling (KL
    0.83). Fails before the fix, when every call started a fresh trie (KL as masking's)."""
    vocab, cg, lm = small_setup()
    ex = enumerate_language(lm, cg, [0])
    assert len(ex.words) == 9 and kl(ex.gcd, ex.q) > 0.7
    asap = [word(gramgen.generate(lm, [0], regex=SMALL, sampler="asap", temperature=1, seed=i,
                                  max_new_tokens=8), vocab) for i in range(300)]
    gcd = [word(gramgen.generate(lm, [0], regex=SMALL, sampler="constrained", temperature=1,
                                 seed=i, max_new_tokens=8), vocab) for i in range(300)]
    kl_asap, kl_gcd = kl(empirical(asap, ex), ex.q), kl(empirical(gcd, ex), ex.q)
    assert kl_asap < 0.1 and kl_asap < kl_gcd / 10, (kl_asap, kl_gcd)
    # the same calls on another fresh model give the same outputs: seeded, deterministic
    _, _, again = small_setup()
    assert [word(gramgen.generate(again, [0], regex=SMALL, sampler="asap", seed=i, max_new_tokens=8),
                 vocab) for i in range(30)] == asap[:30]


def test_generate_keeps_one_state_per_model_prompt_and_budget():
    vocab, cg, lm = small_setup()

    def drawn(model, prompt=(0,), budget=8):
        out = gramgen.generate(model, list(prompt), grammar=cg, sampler="asap", seed=0,
                               max_new_tokens=budget)
        return out.extras["samples_drawn"]

    assert [drawn(lm) for _ in range(3)] == [1, 2, 3]
    assert drawn(lm, prompt=(0, 1)) == 1 and drawn(lm, budget=6) == 1 and drawn(lm) == 4
    _, _, other = small_setup()
    assert drawn(other) == 1       # another model object learns apart
    again = gramgen.compile(gramgen.Grammar.from_regex(SMALL), vocab)   # an equal grammar
    out = gramgen.generate(lm, [0], grammar=again, sampler="asap", seed=0, max_new_tokens=8)
    assert out.extras["samples_drawn"] == 5
    state = gramgen.generation.samplers.shared_state(lm)
    assert len(state) == 3
    assert all(t.lm is None and t.compiled is None for t in state._tries.values())  # parked


def test_an_asap_object_learns_saves_and_loads(tmp_path):
    """sampler=gramgen.ASAp(): the state one holds; saved (plain arrays, no pickle) and
    loaded, it continues exactly as the original does."""
    vocab, cg, lm = small_setup()
    asap = gramgen.ASAp()
    first = [gramgen.generate(lm, [0], grammar=cg, sampler=asap, seed=i, max_new_tokens=8)
             for i in range(40)]
    assert [r.extras["samples_drawn"] for r in first] == list(range(1, 41))
    assert len(asap) == 1 and asap.samples_drawn == 40 and 0 < asap.nbytes
    assert gramgen.generation.samplers.shared_state(lm).samples_drawn == 0   # untouched
    path = tmp_path / "asap.npz"
    asap.save(path)
    with np.load(path, allow_pickle=False) as data:
        assert "header" in data.files
    loaded = gramgen.ASAp.load(path)
    assert len(loaded) == 1 and loaded.samples_drawn == 40 and loaded.nbytes == asap.nbytes
    for i in range(40, 70):
        a = gramgen.generate(lm, [0], grammar=cg, sampler=asap, seed=i, max_new_tokens=8)
        b = gramgen.generate(lm, [0], grammar=cg, sampler=loaded, seed=i, max_new_tokens=8)
        assert a.tokens == b.tokens and a.extras["trie_nodes"] == b.extras["trie_nodes"]
    # warm-up draws through the options object
    r = gramgen.generate(lm, [0], grammar=cg, sampler=ASApSampling(state=asap, warmup=4),
                         seed=0, max_new_tokens=8)
    assert r.extras["samples_drawn"] == 75


def test_an_asap_object_learns_from_one_model():
    vocab, cg, lm = small_setup()
    asap = gramgen.ASAp()
    gramgen.generate(lm, [0], grammar=cg, sampler=asap, seed=0, max_new_tokens=8)
    _, _, other = small_setup()
    with pytest.raises(gramgen.ConfigurationError, match="another model object"):
        gramgen.generate(other, [0], grammar=cg, sampler=asap, seed=0, max_new_tokens=8)
    big = small_vocab(BINARY_PIECES + ["3"])
    fresh = gramgen.ASAp()   # bound to a model that is gone after the call: a new one may come,
    gramgen.generate(SyntheticLM.hashed(vocab), [0], regex=SMALL, sampler=fresh, max_new_tokens=8)
    with pytest.raises(gramgen.ConfigurationError, match="another vocabulary"):   # but not this
        gramgen.generate(SyntheticLM.hashed(big), [0], regex=SMALL, sampler=fresh, max_new_tokens=8)
    with pytest.raises(gramgen.ConfigurationError, match="needs a grammar"):
        gramgen.generate(other, [0], constraint=gramgen.generation.MatcherConstraint(cg.matcher()),
                         sampler=gramgen.ASAp(), max_new_tokens=8)


def test_memory_is_bounded():
    """max_tries: least recently used targets go first; max_bytes: tries are dropped, and
    the one in use stops growing (its samples stay in the language)."""
    vocab, cg, lm = binary_setup(seed=1, scale=1.0)
    asap = gramgen.ASAp(max_tries=2)
    for prompt in ([0], [0, 1], [0], [0, 2]):
        gramgen.generate(lm, prompt, grammar=cg, sampler=asap, seed=0, max_new_tokens=16)
    assert sorted(key[1] for key in asap._tries) == [(0,), (0, 2)]
    largest = 3 * 8 * vocab.size + 256   # a node allowing every token (see _Node.nbytes)
    small = gramgen.ASAp(max_bytes=4000)
    for seed in range(60):
        out = gramgen.generate(lm, [0], grammar=cg, sampler=small, seed=seed, max_new_tokens=16)
        assert out.complete
        m = cg.matcher()
        m.advance_many(out.tokens + [out.eos_token])
        assert m.is_terminated()
        assert out.extras["trie_bytes"] < 4000 + largest
    assert out.extras["trie_bytes"] >= 4000   # it did fill up
    for seed in range(3):
        gramgen.generate(lm, [0, 1], grammar=cg, sampler=small, seed=seed, max_new_tokens=16)
    assert len(small) == 1 and small.nbytes < 4000 + largest   # the older trie was dropped


def test_bad_asap_files_and_options(tmp_path):
    with pytest.raises(gramgen.ConfigurationError, match="no such ASAp file"):
        gramgen.ASAp.load(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(GramgenError, match="not a gramgen ASAp file"):
        gramgen.ASAp.load(junk)
    vocab, cg, lm = small_setup()
    trie = ASApTrie(lm, cg, [0], max_new_tokens=8)
    trie.save(tmp_path / "trie.npz")
    with pytest.raises(GramgenError, match=r"ASAp state \(ASAp.load\)"):
        gramgen.ASAp.load(tmp_path / "trie.npz")
    for bad in (dict(max_bytes=0), dict(max_tries=-1), dict(max_bytes=1.5)):
        with pytest.raises(gramgen.ConfigurationError):
            gramgen.ASAp(**bad)
    with pytest.raises(gramgen.ConfigurationError, match="state="):
        ASApSampling(trie=gramgen.ASAp())
