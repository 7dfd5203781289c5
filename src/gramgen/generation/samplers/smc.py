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
property, e.g. ASAp's learned upper bounds (:meth:`ASApTrie.twist
<gramgen.generation.ASApTrie.twist>`).

The particles are the rows of one run of the generation loop; resampling happens after a
step, between the loop's draws. With speculative decoding each particle verifies its own
draft (AWRS's coupling, :meth:`AWRSSampler.verify`), so a step may extend particles by
different numbers of tokens; each particle's weight is still the product of AWRS's weights
along its tokens (and the twist at its new prefix), and the final particles target the
same ``Q``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence as SequenceOf
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Literal

import numpy as np

from ...errors import ConfigurationError
from ..constraint import Constraint
from ..lm import LanguageModel
from ..loop import Choice, Sequence, run
from .asap import ASApTrie
from .awrs import AWRSSampler

__all__ = ["SMC", "SMCResult", "SMCSampler", "log_mean_exp", "smc"]

Resampling = Literal["multinomial", "systematic"]


@dataclass(frozen=True)
class SMC:
    """SMC options. ``num_particles`` sequences; resample after a step when the effective
    sample size falls below ``ess_threshold · num_particles`` (0: never, i.e. importance
    sampling with AWRS weights); ``resampling``: ``"multinomial"`` or ``"systematic"``;
    ``twist``: a callable ``tokens -> log ψ`` or an :class:`~gramgen.generation.ASApTrie` built for
    the same prompt and ``max_new_tokens`` (its learned bounds)."""

    num_particles: int = 8
    ess_threshold: float = 0.5
    resampling: Resampling = "multinomial"
    twist: Any = None

    def __post_init__(self) -> None:
        if (isinstance(self.num_particles, bool) or not isinstance(self.num_particles, int)
                or self.num_particles < 1):
            raise ConfigurationError(f"num_particles must be a positive int, not {self.num_particles!r}")
        if (isinstance(self.ess_threshold, bool) or not isinstance(self.ess_threshold, Real)
                or not 0 <= self.ess_threshold <= 1):
            raise ConfigurationError(f"ess_threshold must be in [0, 1], not {self.ess_threshold!r}")
        if self.resampling not in ("multinomial", "systematic"):
            raise ConfigurationError(f"unknown resampling method {self.resampling!r} "
                                     "(multinomial, systematic)")
        if self.twist is not None and not (callable(self.twist) or isinstance(self.twist, ASApTrie)):
            raise ConfigurationError(f"twist must be a callable tokens -> log psi or an ASApTrie, "
                                     f"not {type(self.twist).__name__}")


def log_mean_exp(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    top = np.max(x) if x.size else -np.inf
    if not np.isfinite(top):
        return float(top) if x.size else -np.inf
    return float(top + np.log(np.mean(np.exp(x - top))))


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
    positions = (rng.random() + np.arange(k)) / k
    return np.minimum(np.searchsorted(np.cumsum(w), positions, side="right"), k - 1)


@dataclass
class SMCResult:
    """The final particles with their log weights (``-inf`` for any that did not end with
    EOS), the log marginal likelihood estimate and the run's bookkeeping."""

    particles: list[Sequence]
    log_weights: np.ndarray
    log_ml: float
    steps: int
    resample_steps: list[int] = field(default_factory=list)
    ess: list[float] = field(default_factory=list)
    evaluations: int = 0
    tokens_proposed: int = 0

    def posterior(self) -> dict[tuple[int, ...], float]:
        """Normalised weight of each distinct finished sequence (its tokens and EOS)."""
        lw = self.log_weights
        if not np.isfinite(lw).any():
            return {}
        w = np.exp(lw - np.max(lw))
        w /= w.sum()
        out: dict[tuple[int, ...], float] = {}
        for p, wi in zip(self.particles, w):
            if wi > 0:
                key = tuple(p.tokens) + (p.eos_token,)
                out[key] = out.get(key, 0.0) + float(wi)
        return out


class SMCSampler(AWRSSampler):
    """The step strategy of :class:`SMC`: an AWRS draw per particle (twisted), then
    resampling after the step when the effective sample size is low."""

    def __init__(self, options: SMC, vocab, rng: np.random.Generator,
                 twist: Callable[[tuple[int, ...]], float] | None):
        super().__init__(vocab, rng)
        self.options = options
        self.twist = twist
        self.ess: list[float] = []
        self.resample_steps: list[int] = []
        self.steps = 0
        self.proposed = 0

    def choose(self, seqs: list[Sequence], logits) -> list[Choice]:
        choices = super().choose(seqs, logits)
        self.proposed += len(seqs)
        if self.twist is None:
            return choices
        out = []
        for seq, c in zip(seqs, choices):
            if c.token is None or c.finish is not None:
                out.append(c)
                continue
            old = float(self.twist(tuple(seq.tokens)))
            grown = tuple(seq.tokens) + c.accepted
            new = 0.0 if c.token in self.eos else float(self.twist(grown + (c.token,)))
            out.append(Choice(c.token, c.logprob, c.log_weight + new - old, c.accepted, c.finish))
        return out

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]:
        self.steps = step
        log_w = np.array([p.log_weight for p in population])
        ess = _ess(log_w)
        self.ess.append(ess)
        unfinished = any(p.finish is None for p in population)
        if not unfinished or not np.isfinite(log_w).any() or ess >= self.options.ess_threshold * len(population):
            return population
        idx = _resample(log_w, self.rng, self.options.resampling)
        mean = log_mean_exp(log_w)
        resampled = [population[i].copy() for i in idx]
        for p in resampled:
            p.log_weight = mean
        self.resample_steps.append(step)
        return resampled


def smc(lm: LanguageModel, constraint: Constraint, prompt_ids: SequenceOf[int], *,
        num_particles: int, max_new_tokens: int, rng: np.random.Generator,
        ess_threshold: float = 0.5, resampling: Resampling = "multinomial",
        twist: Callable[[tuple[int, ...]], float] | None = None, drafter=None) -> SMCResult:
    """Run SMC; ``constraint`` is forked once per particle (it is not advanced itself).
    ``drafter``: speculative decoding, each particle drafting and verifying on its own.

    Resampled particles all take the mean weight, which keeps ``log_ml`` unbiased.
    """
    options = SMC(num_particles, ess_threshold, resampling, twist)
    sampler = SMCSampler(options, lm.vocab, rng, twist)
    start = 0.0 if twist is None else float(twist(()))
    prompt = [int(t) for t in prompt_ids]
    counter_start = constraint.counter.count
    population = [Sequence(list(prompt), constraint.fork(), log_weight=start)
                  for _ in range(num_particles)]
    population = run(lm, population, sampler, max_new_tokens=max_new_tokens, drafter=drafter)
    final = np.array([p.log_weight if p.finish == "eos" else -np.inf for p in population])
    return SMCResult(population, final, log_mean_exp(final), sampler.steps, sampler.resample_steps,
                     sampler.ess, constraint.counter.count - counter_start, sampler.proposed)
