"""Masked sampling (grammar-constrained decoding): each token from the model's distribution
restricted to the allowed tokens; greedy at temperature 0.

Before each draw the constraint's full mask is computed. Where it allows a single token,
that token is emitted without a draw (jump-forward): the restricted distribution puts all
its mass there whatever the logits, so this is exact, and a run of such tokens reaches
the model in the same forward pass as the draw before it. Where it allows nothing but EOS
the sequence ends (``finish_reason="grammar"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ...automata import bitmask
from ...automata.vocabulary import Vocabulary
from ...errors import ConfigurationError
from ..constraint import fill_bitmask
from ..loop import Choice, Sequence

__all__ = ["Constrained", "MaskedSampler", "check_sampling_arguments", "single_allowed", "warp"]


@dataclass(frozen=True)
class Constrained:
    """Masked sampling. ``temperature=0`` is greedy; otherwise the masked logits are
    divided by ``temperature``, cut to the ``top_k`` most likely tokens and to the
    smallest set holding ``top_p`` of the mass, then sampled. ``jump_forward``: emit
    tokens the constraint forces without a draw (exact; saves forward passes)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    jump_forward: bool = True

    def __post_init__(self) -> None:
        check_sampling_arguments(self.temperature, self.top_k, self.top_p, None)


def check_sampling_arguments(temperature, top_k, top_p, num_particles) -> None:
    """Raise :class:`~gramgen.ConfigurationError` naming the first argument that is not a
    usable value: ``temperature`` a finite number >= 0, ``top_k`` a positive int,
    ``top_p`` a number in (0, 1], ``num_particles`` a positive int (None: not given)."""
    if (isinstance(temperature, bool) or not isinstance(temperature, Real)
            or not math.isfinite(temperature) or temperature < 0):
        raise ConfigurationError(f"temperature must be a finite number >= 0 (0 = greedy), "
                                 f"not {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, Integral) or top_k < 1):
        raise ConfigurationError(f"top_k must be a positive int or None, not {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, Real)
                              or not 0 < top_p <= 1):   # (NaN fails the comparison)
        raise ConfigurationError(f"top_p must be a number in (0, 1] or None, not {top_p!r}")
    if num_particles is not None and (isinstance(num_particles, bool)
                                      or not isinstance(num_particles, Integral) or num_particles < 1):
        raise ConfigurationError(f"num_particles must be a positive int, not {num_particles!r} "
                                 "(None: the SMC default)")


def single_allowed(words: np.ndarray) -> int | None:
    """The token id if exactly one bit of the packed row is set, -1 if none, None if more."""
    nz = np.flatnonzero(words)
    if nz.size == 0:
        return -1
    if nz.size > 1:
        return None
    w = int(words[nz[0]]) & 0xFFFFFFFF
    if w & (w - 1):
        return None
    return int(nz[0]) * 32 + w.bit_length() - 1


def warp(scores, temperature: float, top_k: int | None, top_p: float | None):
    """Scores divided by ``temperature``, then ``-inf`` outside the top ``top_k`` and
    outside the smallest most-likely set whose mass reaches ``top_p`` (which always keeps
    the most likely token)."""
    import torch

    scores = scores / temperature
    if top_k is not None and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs   # mass strictly above each token
        scores = scores.scatter(-1, order, ordered.masked_fill(before >= top_p, float("-inf")))
    return scores


class MaskedSampler:
    """The step strategy of :class:`Constrained` (see the module docstring)."""

    def __init__(self, options: Constrained, vocab: Vocabulary, seed: int | None = None):
        self.options = options
        self.eos = frozenset(vocab.eos_token_ids)
        self.n_words = bitmask.n_words(vocab.size)
        self.seed = seed
        self._generator = None

    def prepare(self, seq: Sequence, max_new_tokens: int) -> None:
        seq.needs_logits = True
        if seq.constraint is None:
            return
        words = np.zeros((1, self.n_words), dtype=np.int32)
        while True:
            fill_bitmask(seq.constraint, words, 0)
            single = single_allowed(words[0])
            if single == -1:
                seq.finish = "dead_end"
                return
            if single in self.eos:     # only ending is allowed
                seq.finish = "grammar"
                return
            if single is None or not self.options.jump_forward or len(seq.tokens) >= max_new_tokens:
                seq.state = words[0]
                return
            seq.push(single)
            seq.stats.forced_tokens += 1

    def choose(self, seqs: list[Sequence], logits) -> list[Choice]:
        import torch

        width = logits.shape[-1]
        host = np.full((len(seqs), bitmask.n_words(max(width, self.n_words * 32))), -1, dtype=np.int32)
        constrained = False
        for b, seq in enumerate(seqs):
            if seq.constraint is not None:
                host[b] = 0
                host[b, :self.n_words] = seq.state
                constrained = True
        scores = logits
        if constrained:
            scores = bitmask.apply_bitmask(logits, torch.from_numpy(host).to(logits.device,
                                                                             non_blocking=True))
        picked, logps = self._pick(scores)
        return [Choice(int(t), float(lp)) for t, lp in zip(picked.tolist(), logps.tolist())]

    def _pick(self, scores):
        import torch

        opts = self.options
        if opts.temperature == 0:
            logp = torch.log_softmax(scores, dim=-1)
            picked = torch.argmax(scores, dim=-1)
            return picked, logp.gather(-1, picked[:, None])[:, 0]
        if self._generator is None and self.seed is not None:
            self._generator = torch.Generator(device=scores.device).manual_seed(int(self.seed))
        scores = warp(scores, opts.temperature, opts.top_k, opts.top_p)
        logp = torch.log_softmax(scores, dim=-1)
        picked = torch.multinomial(logp.exp(), 1, generator=self._generator)[:, 0]
        return picked, logp.gather(-1, picked[:, None])[:, 0]

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]:
        return population
