"""Exact oracles for the sampler tests: small vocabularies, finite languages, enumeration.

Everything a sampler should produce is computed here by brute force over the finite
language (all token sequences the matcher allows, EOS included):
``P(w) = Π P(w_i | w_<i)``, ``Z = Σ_{w ∈ L} P(w)``, ``Q = P/Z``, and the distribution
of masked (GCD) sampling, ``Π P(w_i|u) / Σ_{t allowed} P(t|u)``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

import gramgen
from gramgen.generation import SyntheticLM, TransformersLM

EOS = "<eos>"


def small_vocab(pieces: list[str]) -> gramgen.Vocabulary:
    """Tokens spelled by ``pieces``; EOS is the last id; one special non-EOS id before it."""
    tokens = [p.encode() for p in pieces] + [b"", b""]
    return gramgen.Vocabulary(tokens, eos_token_ids=[len(pieces) + 1], special_ids=[len(pieces)])


# -- three finite languages ----------------------------------------------------------------

BINARY_PIECES = ["0", "1", "00", "11", "01", "2", "a", " "]
BINARY = r"[01]{1,5}"

ENUM_PIECES = ['{"', 'color', '":', ':', ' "', 'red', 'green', 'blue', 'gre', 'en', '"}', '"', '}',
               'size', 'x', ' ', '{']
ENUM_LARK = r'''
start: "{\"color\": \"" COLOR "\"}" | "{\"size\": \"" SIZE "\"}"
COLOR: "red" | "green" | "blue"
SIZE: "x" | "xx"
'''

EXPR_PIECES = ["x", "y", "(", ")", "+", "*", "(x", "y)", "x)", "z", " "]
EXPR_LARK = r'''
start: e2
e0: "x" | "y"
e1: e0 | "(" e0 op e0 ")"
e2: e1 | "(" e1 op e1 ")"
op: "+" | "*"
'''


def binary_setup(seed: int = 0, scale: float = 2.0):
    vocab = small_vocab(BINARY_PIECES)
    cg = gramgen.compile(gramgen.Grammar.from_regex(BINARY), vocab)
    return vocab, cg, SyntheticLM.hashed(vocab, seed=seed, scale=scale)


def enum_setup(seed: int = 0, scale: float = 2.0):
    vocab = small_vocab(ENUM_PIECES)
    cg = gramgen.compile(gramgen.Grammar.from_lark(ENUM_LARK), vocab)
    return vocab, cg, SyntheticLM.hashed(vocab, seed=seed, scale=scale)


def expr_setup(seed: int = 0, scale: float = 2.0):
    vocab = small_vocab(EXPR_PIECES)
    cg = gramgen.compile(gramgen.Grammar.from_lark(EXPR_LARK), vocab)
    return vocab, cg, SyntheticLM.hashed(vocab, seed=seed, scale=scale)


# -- enumeration -----------------------------------------------------------------------------

@dataclass
class Exact:
    """The finite language as token sequences, with every exact quantity the tests need."""

    words: list[tuple[int, ...]]     # every allowed token sequence, ending with EOS
    logp: np.ndarray                 # log P(w | prompt)
    gcd: np.ndarray                  # probability of w under masked sampling
    log_efg: dict[tuple[int, ...], float]  # log EFG(u) for every viable prefix u

    @property
    def log_z(self) -> float:
        return float(np.logaddexp.reduce(self.logp))

    @property
    def q(self) -> np.ndarray:
        return np.exp(self.logp - self.log_z)

    def index(self) -> dict[tuple[int, ...], int]:
        return {w: i for i, w in enumerate(self.words)}


def enumerate_language(lm, cg, prompt: list[int], max_new_tokens: int = 64) -> Exact:
    """Depth-first over the matcher's masks; one model call per viable prefix."""
    eos = set(cg.vocab.eos_token_ids)
    words: list[tuple[int, ...]] = []
    logps: list[float] = []
    gcds: list[float] = []
    log_efg: dict[tuple[int, ...], float] = {}

    def walk(matcher, prefix: tuple[int, ...], logp: float, gcd: float) -> float:
        allowed = np.flatnonzero(matcher.mask())
        if len(prefix) + 1 >= max_new_tokens:
            allowed = np.array([t for t in allowed if t in eos], dtype=np.int64)
        row = lm.next_logprobs([prompt + list(prefix)])[0]
        local = np.logaddexp.reduce(row[allowed]) if allowed.size else -np.inf
        terms = []
        for t in allowed.tolist():
            lp = float(row[t])
            g = gcd * math.exp(lp - local)
            if t in eos:
                words.append(prefix + (t,))
                logps.append(logp + lp)
                gcds.append(g)
                terms.append(lp)
            else:
                child = matcher.fork()
                child.advance(t)
                terms.append(lp + walk(child, prefix + (t,), logp + lp, g))
        value = float(np.logaddexp.reduce(terms)) if terms else -np.inf
        log_efg[prefix] = value
        return value

    walk(cg.matcher(), (), 0.0, 1.0)
    return Exact(words, np.array(logps), np.array(gcds), log_efg)


# -- statistics ------------------------------------------------------------------------------

def pooled_posterior(results, exact: Exact) -> np.ndarray:
    """SMC results pooled into one distribution over ``exact.words``: each run's weighted
    particles, the run weighted by its estimate exp(log_ml) (consistent for Q)."""
    idx = exact.index()
    pooled = np.zeros(len(exact.words))
    for res in results:
        for w, p in res.posterior().items():
            pooled[idx[w]] += p * math.exp(res.log_ml)
    return pooled / pooled.sum()


def word(result, vocab) -> tuple[int, ...]:
    """A generated output as the enumeration lists it: its tokens, then EOS (the first EOS
    id when the output ended because the grammar allowed nothing else)."""
    eos = result.eos_token if result.eos_token is not None else vocab.eos_token_ids[0]
    return tuple(result.tokens) + (eos,)


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) in nats (terms with p = 0 contribute 0)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = p > 0
    return float(np.sum(p[m] * (np.log(p[m]) - np.log(q[m]))))


def empirical(samples, exact: Exact, smoothing: float = 1e-9) -> np.ndarray:
    """Empirical distribution of ``samples`` over ``exact.words`` (add-``smoothing``)."""
    idx = exact.index()
    counts = np.full(len(exact.words), smoothing)
    for s in samples:
        counts[idx[tuple(s)]] += 1  # a KeyError here means a sample outside the language
    return counts / counts.sum()


def _gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(a, x)."""
    if x <= 0:
        return 1.0
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1.0 - total * math.exp(-x + a * math.log(x) - math.lgamma(a)))
    # continued fraction (modified Lentz) for Q(a, x)
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; bins with expected count < ``min_expected`` are
    merged into one. Returns the p-value (1.0 when fewer than two bins remain)."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    expected = n * np.asarray(probs, dtype=np.float64)
    if np.any((expected == 0) & (counts > 0)):
        return 0.0  # a draw where the target has no mass
    big = expected >= min_expected
    obs = list(counts[big])
    exp = list(expected[big])
    if (~big).any() and expected[~big].sum() > 0:
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    if len(obs) < 2:
        return 1.0
    obs_a, exp_a = np.array(obs), np.array(exp)
    stat = float(np.sum((obs_a - exp_a) ** 2 / exp_a))
    return _gamma_q((len(obs) - 1) / 2, stat / 2)


# -- the real model ---------------------------------------------------------------------------

REAL_GRAMMAR = r"(Yes|No)\.?"
REAL_QUESTION = "Is the sky blue? Answer Yes or No."


@functools.cache
def smollm2():
    """(TransformersLM, tokenizer) for SmolLM2-135M-Instruct, converted once and cached
    under ``$GRAMGEN_CACHE`` (default ~/.cache/gramgen). The vocabulary is the tokenizer's
    own (EOS = its eos token only). One torch thread: the tests run beside others on few
    cores, where more threads only contend."""
    import torch

    torch.set_num_threads(1)
    model = gramgen.load_model("smollm2", device="cpu")
    vocab = gramgen.Vocabulary.from_huggingface(model.tokenizer)
    return TransformersLM(model.hf_model, vocab), model.tokenizer


@functools.cache
def smollm2_yes_no():
    """The real-model instance: "Yes"/"No", optionally with a period, as the chat answer
    to REAL_QUESTION, with its exact enumeration (every tokenisation; one forward per
    viable prefix, 17 in all). Masked sampling is biased here (KL(GCD || Q) ≈ 0.25)."""
    lm, tok = smollm2()
    cg = gramgen.compile(gramgen.Grammar.from_regex(REAL_GRAMMAR), lm.vocab)
    prompt = tok.apply_chat_template([{"role": "user", "content": REAL_QUESTION}],
                                     add_generation_prompt=True)
    if not isinstance(prompt, list):  # a BatchEncoding in some transformers versions
        prompt = prompt["input_ids"]
    return lm, cg, list(prompt), enumerate_language(lm, cg, list(prompt))
