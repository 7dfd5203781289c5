"""Sequential Monte Carlo with AWRS proposals: the model conditioned on the constraint.

Locally constrained sampling draws each token from ``p(t | u)`` restricted to the allowed
tokens, which over-weights prefixes with few grammatical continuations. SMC keeps
``num_particles`` sequences, extends each by one AWRS draw per step (exact locally) and
multiplies its weight by AWRS's unbiased estimate of the allowed mass; resampling when the
effective sample size drops moves particles from dead ends to promising prefixes.

Target: ``Q(w) ∝ P(w | prompt) · 1[w accepted]`` over sequences that end with EOS within
``max_new_tokens`` tokens (EOS included). ``exp(log_ml)`` is an unbiased estimate of that
target's normaliser (the probability the model's own sample is accepted within the
budget), and the weighted finished particles approximate ``Q``, consistently as the number
of particles grows. An optional ``twist(tokens) -> log ψ`` (with ψ = 1 on finished
sequences and ψ > 0 wherever the target is) guides resampling without changing either
property, e.g. ASAp's learned upper bounds (:meth:`gramgen.ASAp.twist`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .awrs import awrs_step
from .constraint import Constraint, known_mask
from .lm import LanguageModel

__all__ = ["Particle", "SMCResult", "smc", "log_mean_exp"]


def log_mean_exp(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    top = np.max(x) if x.size else -np.inf
    if not np.isfinite(top):
        return float(top) if x.size else -np.inf
    return float(top + np.log(np.mean(np.exp(x - top))))


@dataclass
class Particle:
    """One sequence: its tokens, constraint state, log weight and model log-probability."""

    tokens: list[int]
    constraint: Constraint
    log_weight: float
    logprob: float = 0.0
    finished: bool = False   # EOS was drawn: a complete word
    dead: bool = False       # no token was allowed (weight 0)

    def copy(self) -> Particle:
        return Particle(list(self.tokens), self.constraint.fork(), self.log_weight,
                        self.logprob, self.finished, self.dead)


@dataclass
class SMCResult:
    """The final particles with their log weights (``-inf`` for any that did not finish),
    the log marginal likelihood estimate and the run's bookkeeping."""

    particles: list[Particle]
    log_weights: np.ndarray
    log_ml: float
    steps: int
    resample_steps: list[int] = field(default_factory=list)
    ess: list[float] = field(default_factory=list)
    evaluations: int = 0
    tokens_proposed: int = 0

    def posterior(self) -> dict[tuple[int, ...], float]:
        """Normalised weight of each distinct finished sequence."""
        lw = self.log_weights
        if not np.isfinite(lw).any():
            return {}
        w = np.exp(lw - np.max(lw))
        w /= w.sum()
        out: dict[tuple[int, ...], float] = {}
        for p, wi in zip(self.particles, w):
            if wi > 0:
                out[tuple(p.tokens)] = out.get(tuple(p.tokens), 0.0) + float(wi)
        return out


def _ess(log_w: np.ndarray) -> float:
    if not np.isfinite(log_w).any():
        return 0.0
    w = np.exp(log_w - np.max(log_w))
    return float(w.sum() ** 2 / np.sum(w * w))


def _resample(log_w: np.ndarray, rng: np.random.Generator, method: str) -> np.ndarray:
    k = log_w.shape[0]
    w = np.exp(log_w - np.max(log_w))
    w /= w.sum()
    if method == "multinomial":
        return rng.choice(k, size=k, p=w)
    if method == "systematic":
        positions = (rng.random() + np.arange(k)) / k
        return np.minimum(np.searchsorted(np.cumsum(w), positions, side="right"), k - 1)
    raise ValueError(f"unknown resampling method {method!r} (multinomial, systematic)")


def smc(lm: LanguageModel, constraint: Constraint, prompt_ids: Sequence[int], *,
        num_particles: int, max_new_tokens: int, rng: np.random.Generator,
        ess_threshold: float = 0.5, resampling: str = "multinomial",
        twist: Callable[[tuple[int, ...]], float] | None = None) -> SMCResult:
    """Run SMC; ``constraint`` is forked once per particle (it is not advanced itself).

    Resampling happens after a step when ESS < ``ess_threshold · num_particles``
    (``ess_threshold=0`` never resamples: importance sampling with AWRS weights); the
    resampled particles all take the mean weight, which keeps ``log_ml`` unbiased.
    """
    if num_particles < 1:
        raise ValueError("num_particles must be at least 1")
    prompt = [int(t) for t in prompt_ids]
    eos = set(lm.vocab.eos_token_ids)
    start = 0.0 if twist is None else float(twist(()))
    particles = [Particle([], constraint.fork(), start) for _ in range(num_particles)]
    counter_start = constraint.counter.count
    result = SMCResult(particles, np.zeros(0), -np.inf, 0)
    proposed = 0
    for step in range(max_new_tokens):
        live = [p for p in particles if not (p.finished or p.dead)]
        if not live:
            break
        result.steps = step + 1
        contexts: dict[tuple[int, ...], int] = {}
        for p in live:
            contexts.setdefault(tuple(p.tokens), len(contexts))
        rows = lm.next_logprobs([prompt + list(c) for c in contexts])
        for p in live:
            logp = rows[contexts[tuple(p.tokens)]]
            draw = awrs_step(logp, p.constraint.check, rng, getattr(p.constraint, "mask", None),
                             known=known_mask(p.constraint))
            proposed += 1
            if draw.token is None:
                p.dead = True
                p.log_weight = -np.inf
                continue
            old = 0.0 if twist is None else float(twist(tuple(p.tokens)))
            p.constraint.advance(draw.token)
            p.tokens.append(draw.token)
            p.logprob += float(logp[draw.token])
            p.log_weight += draw.log_weight
            if draw.token in eos:
                p.finished = True
            if twist is not None:
                new = 0.0 if p.finished else float(twist(tuple(p.tokens)))
                p.log_weight += new - old
        log_w = np.array([p.log_weight for p in particles])
        ess = _ess(log_w)
        result.ess.append(ess)
        if not np.isfinite(log_w).any():
            break
        unfinished = any(not (p.finished or p.dead) for p in particles)
        if unfinished and ess < ess_threshold * num_particles:
            idx = _resample(log_w, rng, resampling)
            mean = log_mean_exp(log_w)
            particles = [particles[i].copy() for i in idx]
            for p in particles:
                p.log_weight = mean
            result.resample_steps.append(step + 1)
    final = np.array([p.log_weight if p.finished else -np.inf for p in particles])
    result.particles = particles
    result.log_weights = final
    result.log_ml = log_mean_exp(final)
    result.evaluations = constraint.counter.count - counter_start
    result.tokens_proposed = proposed
    return result
