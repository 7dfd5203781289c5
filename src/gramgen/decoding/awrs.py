"""Adaptive weighted rejection sampling (AWRS; Lipkin et al., COLM 2025).

One step draws a token from the model distribution restricted to the allowed tokens,
checking only the tokens it draws, and returns an unbiased estimate of the allowed mass
(the local normaliser) for SMC to weight with.

Round 1 visits tokens in the order of Gumbel keys ``log p(t) + G_t`` (a weighted draw
without replacement) and stops at the first allowed token ``x``: ``x`` is then an exact
draw from ``p(t)·1[t allowed] / Z``. Round 2 repeats the draw with fresh keys over the
tokens round 1 did not reject (``x`` included) and stops again at the first allowed one.
With ``r1`` the mass rejected in round 1 and ``N`` the rejections of both rounds,
``w = (M - r1) / (N + 1)`` has ``E[w] = Z``, where ``M`` is the total mass of ``p``
(1 when ``p`` is normalised; the kept mass when it was pruned).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["AWRSStep", "awrs_step", "gumbel_order"]


@dataclass(frozen=True)
class AWRSStep:
    """One AWRS draw. ``token`` is None when no token is allowed (``log_weight`` = -inf)."""

    token: int | None
    log_weight: float
    evaluations: int
    rejections: int


def gumbel_order(logp: np.ndarray, rng: np.random.Generator, exclude=()) -> Iterator[int]:
    """Token ids in decreasing order of ``logp + Gumbel`` keys, skipping ``-inf`` and
    ``exclude``: a weighted draw without replacement, produced lazily (top 16, then 4x
    more) so a draw that stops early never sorts the vocabulary."""
    keys = logp + rng.gumbel(size=logp.shape[0])
    excl = np.fromiter(exclude, dtype=np.int64)
    if excl.size:
        keys[excl] = -np.inf
    finite = int(np.count_nonzero(np.isfinite(keys)))
    done, k = 0, 16
    neg = -keys
    while done < finite:
        k = min(k, finite)
        top = np.argpartition(neg, k - 1)[:k] if k < neg.shape[0] else np.arange(neg.shape[0])
        top = top[np.lexsort((top, neg[top]))]
        for t in top[done:k].tolist():
            yield t
        done, k = k, 4 * k


def awrs_step(logp: np.ndarray, check: Callable[[int], bool],
              rng: np.random.Generator) -> AWRSStep:
    """Draw one token exactly from ``p·1[check]/Z`` and an unbiased weight for ``Z``.

    ``logp`` is the (possibly unnormalised) log-probability of every token id; ``check``
    is called at most once per token id.
    """
    logp = np.asarray(logp, dtype=np.float64)
    verdicts: dict[int, bool] = {}

    def ok(t: int) -> bool:
        v = verdicts.get(t)
        if v is None:
            v = verdicts[t] = bool(check(t))
        return v

    rejected: list[int] = []
    x = None
    for t in gumbel_order(logp, rng):
        if ok(t):
            x = t
            break
        rejected.append(t)
    if x is None:
        return AWRSStep(None, -np.inf, len(verdicts), len(rejected))
    n_rej = len(rejected)
    for t in gumbel_order(logp, rng, exclude=rejected):
        if ok(t):
            break
        n_rej += 1
    # the mass left after round 1, computed from what is kept (accurate when r1 is close to M)
    kept = logp.copy()
    if rejected:
        kept[np.asarray(rejected, dtype=np.int64)] = -np.inf
    top = np.max(kept)
    log_left = top + np.log(np.sum(np.exp(kept - top)))
    return AWRSStep(x, float(log_left - np.log(n_rej + 1)), len(verdicts), n_rej)
