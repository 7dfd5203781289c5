"""Adaptive weighted rejection sampling (AWRS; Lipkin et al., COLM 2025).

One step draws a token from the model distribution restricted to the allowed tokens,
checking only the tokens it draws, and returns an unbiased estimate of the allowed mass
(the local normaliser) for SMC to weight with.

Round 1 draws tokens from ``p`` without replacement and stops at the first allowed token
``x``: ``x`` is then an exact draw from ``p(t)·1[t allowed] / Z``. Round 2 repeats the
draw, afresh, over the tokens round 1 did not reject (``x`` included) and stops again at the first allowed one.
With ``r1`` the mass rejected in round 1 and ``N`` the rejections of both rounds,
``w = (M - r1) / (N + 1)`` has ``E[w] = Z``, where ``M`` is the total mass of ``p``
(1 when ``p`` is normalised; the kept mass when it was pruned).

Speculative decoding (:meth:`AWRSSampler.verify`): no full mask is computed, so a draft is
verified by coupling: at each drafted position AWRS makes its own draw, exactly as it
would without the draft; the drafted token is kept iff that draw equals it, and the first
draw that differs is the token emitted. Each draw and weight is the one plain AWRS would
make at that position, so outputs and weights are distributed exactly as without
speculation; the draft only decides how many positions one forward pass scores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...automata.vocabulary import Vocabulary
from ..constraint import known_mask
from ..lm import never_ids, normalised_logprobs
from ..loop import Choice, Draft, Sequence

__all__ = ["AWRS", "AWRSSampler", "AWRSStep", "WithoutReplacement", "awrs_step"]


@dataclass(frozen=True)
class AWRSStep:
    """One AWRS draw. ``token`` is None when no token is allowed (``log_weight`` = -inf)."""

    token: int | None
    log_weight: float
    evaluations: int
    rejections: int


class WithoutReplacement:
    """Weighted draws without replacement from ``p`` (unnormalised, >= 0), one at a time.

    A draw inverts the cumulative sum and redraws when it lands on a removed token, which
    is exact (rejection from the restricted distribution); once removed tokens hold half
    the mass the sums are rebuilt without them, so a draw costs O(log V) expected and the
    vocabulary is scanned only O(log) times per step, never sorted.
    """

    def __init__(self, p: np.ndarray, rng: np.random.Generator):
        self.p = p
        self.rng = rng
        self.cum = np.cumsum(p)
        self.removed: set[int] = set()
        self.removed_mass = 0.0          # of removed tokens still inside ``cum``
        self.positive = int(np.count_nonzero(p > 0))
        self._owns_p = False

    def copy(self) -> WithoutReplacement:
        other = WithoutReplacement.__new__(WithoutReplacement)
        other.p, other.rng, other.cum = self.p, self.rng, self.cum
        other.removed, other.removed_mass = set(self.removed), self.removed_mass
        other.positive, other._owns_p = self.positive, False
        self._owns_p = False  # both copy ``p`` before writing to it
        return other

    def remove(self, t: int) -> None:
        self.removed.add(t)
        self.removed_mass += float(self.p[t])

    def remove_many(self, ts: np.ndarray) -> None:
        self.removed.update(ts.tolist())
        self.removed_mass += float(self.p[ts].sum())

    def draw(self) -> int | None:
        """A token not yet removed, with probability ∝ p; None when none has mass."""
        if len(self.removed) >= self.positive:
            return None
        while True:
            total = float(self.cum[-1])
            if self.removed_mass > 0.5 * total:
                self._rebuild()
                continue
            t = int(np.searchsorted(self.cum, self.rng.random() * total, side="right"))
            t = min(t, self.cum.shape[0] - 1)
            if self.p[t] > 0 and t not in self.removed:
                return t

    def left(self) -> float:
        """The mass of the tokens not removed."""
        if self.removed_mass > 1e-3 * float(self.cum[-1]):
            self._rebuild()
        return float(self.cum[-1]) - self.removed_mass

    def _rebuild(self) -> None:
        if not self._owns_p:
            self.p = self.p.copy()
            self._owns_p = True
        self.p[np.fromiter(self.removed, dtype=np.int64)] = 0.0
        self.cum = np.cumsum(self.p)
        self.removed_mass = 0.0


def _first_allowed(p: np.ndarray, excluded: np.ndarray, allowed: np.ndarray,
                   rng: np.random.Generator) -> tuple[np.ndarray, int | None]:
    """Continue a without-replacement draw over the tokens with mass outside ``excluded``
    (bool mask), all at once: (the tokens drawn before the first allowed one, that token
    or None).

    Exponential race (Gumbel-top-k in another guise): token t "arrives" at time
    ``E_t / p_t`` with ``E_t ~ Exp(1)``; arrival order is a weighted draw without
    replacement, so the first allowed token is the allowed one that arrives first and
    the tokens drawn before it are those arriving earlier. No sort is needed.
    """
    with np.errstate(divide="ignore"):
        times = rng.standard_exponential(p.shape[0]) / p
    times[excluded] = np.inf
    masked = np.where(allowed, times, np.inf)
    x = int(np.argmin(masked))
    if masked[x] == np.inf:
        return np.flatnonzero(np.isfinite(times)), None
    return np.flatnonzero(times < times[x]), x


def awrs_step(logp: np.ndarray, check: Callable[[int], bool], rng: np.random.Generator,
              mask: Callable[[], np.ndarray] | None = None,
              mask_after: int = 32, known: np.ndarray | None = None) -> AWRSStep:
    """Draw one token exactly from ``p·1[check]/Z`` and an unbiased weight for ``Z``.

    ``logp`` is the (possibly unnormalised) log-probability of every token id; ``check``
    is called at most once per token id. When the model and the constraint disagree
    badly, rejections approach the vocabulary size; if the constraint can also give its
    full ``mask``, a round that has rejected ``mask_after`` tokens computes it once and
    finds the rest of the draw in one vectorised pass. The draws and the weight are the
    same random variables either way; ``evaluations`` then counts the whole mask.

    ``known``: the mask of this state if it is already at hand (decided before this step's
    draws, e.g. kept from an earlier step in the same state): then the token is drawn
    from the masked distribution directly and the weight is the exact ``Z``, with no
    check and no variance.
    """
    logp = np.asarray(logp, dtype=np.float64)
    top = float(np.max(logp))
    if top == -np.inf:
        return AWRSStep(None, -np.inf, 0, 0)
    p = np.exp(logp - top)  # mass relative to the top token; the weight adds ``top`` back
    if known is not None:
        q = np.where(known, p, 0.0)
        z = float(q.sum())
        if z == 0.0:
            return AWRSStep(None, -np.inf, 0, 0)
        x = int(np.searchsorted(np.cumsum(q), rng.random() * z, side="right"))
        x = min(x, q.shape[0] - 1)
        while q[x] == 0.0:  # float edge: land on the allowed token just below
            x -= 1
        return AWRSStep(x, top + float(np.log(z)), 0, 0)
    verdicts: dict[int, bool] = {}

    def ok(t: int) -> bool:
        v = verdicts.get(t)
        if v is None:
            v = verdicts[t] = bool(check(t))
        return v

    round1 = WithoutReplacement(p, rng)
    x = None
    while (t := round1.draw()) is not None:
        if ok(t):
            x = t
            break
        round1.remove(t)
        if len(round1.removed) >= mask_after and mask is not None:
            return _vectorised(p, top, round1.removed, np.asarray(mask(), dtype=bool), rng,
                               len(verdicts))
    n_rej = len(round1.removed)
    if x is None:
        return AWRSStep(None, -np.inf, len(verdicts), n_rej)
    round2 = round1.copy()
    while (t := round2.draw()) is not None:
        if ok(t):
            break
        round2.remove(t)
        n_rej += 1
        if len(round2.removed) - len(round1.removed) >= mask_after and mask is not None:
            excluded = np.zeros(p.shape[0], dtype=bool)
            excluded[np.fromiter(round2.removed, dtype=np.int64)] = True
            rest, _ = _first_allowed(p, excluded, np.asarray(mask(), dtype=bool), rng)
            return AWRSStep(x, top + float(np.log(round1.left())) - float(np.log(n_rej + rest.shape[0] + 1)),
                            len(verdicts) + p.shape[0], n_rej + rest.shape[0])
    log_left = top + float(np.log(round1.left()))
    return AWRSStep(x, log_left - float(np.log(n_rej + 1)), len(verdicts), n_rej)


def _vectorised(p, top, rejected, allowed, rng, checked) -> AWRSStep:
    """Finish an AWRS step from the full mask, round 1 having rejected ``rejected``."""
    removed = np.zeros(p.shape[0], dtype=bool)
    removed[np.fromiter(rejected, dtype=np.int64)] = True
    rest, x = _first_allowed(p, removed, allowed, rng)
    removed[rest] = True
    n_rej = int(np.count_nonzero(removed))
    evaluations = checked + p.shape[0]
    if x is None:
        return AWRSStep(None, -np.inf, evaluations, n_rej)
    left = float(p[~removed].sum())  # what round 1 did not reject, summed directly
    rest2, _ = _first_allowed(p, removed, allowed, rng)
    n_rej += rest2.shape[0]
    return AWRSStep(x, top + float(np.log(left)) - float(np.log(n_rej + 1)), evaluations, n_rej)


# -- AWRS as a step of the generation loop ------------------------------------------------

@dataclass(frozen=True)
class AWRS:
    """Adaptive weighted rejection sampling: each token an exact draw from the model's
    distribution restricted to the allowed tokens (temperature 1), checking only the
    tokens it draws; the sequence's importance weight is in ``extras["log_weight"]``."""


class AWRSSampler:
    """The step strategy of :class:`AWRS`: one :func:`awrs_step` per sequence on the model's
    normalised log-probabilities; ``log_weight`` accumulates its weights."""

    def __init__(self, vocab: Vocabulary, rng: np.random.Generator):
        self.vocab = vocab
        self.rng = rng
        self.eos = frozenset(vocab.eos_token_ids)
        self._never = never_ids(vocab)

    def prepare(self, seq: Sequence, max_new_tokens: int) -> None:
        seq.needs_logits = True

    def draw(self, seq: Sequence, logp: np.ndarray) -> AWRSStep:
        c = seq.constraint
        t0 = time.perf_counter()
        step = awrs_step(logp, c.check, self.rng, getattr(c, "mask", None), known=known_mask(c))
        seq.stats.mask_seconds += time.perf_counter() - t0
        seq.state = (seq.state or 0) + step.rejections   # rejections of this sequence
        return step

    def choose(self, seqs: list[Sequence], logits) -> list[Choice]:
        if logits.ndim == 3:   # drafts to verify
            out = []
            for b, seq in enumerate(seqs):
                d = 0 if seq.draft is None else len(seq.draft)
                rows = normalised_logprobs(logits[b, logits.shape[1] - d - 1:], self.vocab, self._never)
                out.append(self.verify(seq, rows, seq.draft or Draft()))
            return out
        rows = normalised_logprobs(logits, self.vocab, self._never)
        out = []
        for seq, logp in zip(seqs, rows):
            step = self.draw(seq, logp)
            if step.token is None:
                out.append(Choice(None, 0.0, -np.inf))
            else:
                out.append(Choice(step.token, float(logp[step.token]), step.log_weight))
        return out

    def verify(self, seq: Sequence, rows: np.ndarray, draft: Draft) -> Choice:
        """The drafted tokens kept and the token after them, from the normalised
        log-probabilities ``rows`` ``[len(draft) + 1, vocab.size]`` (see the module docstring)."""
        accepted: list[int] = []
        logprob = log_weight = 0.0
        state = seq
        for j in range(len(draft) + 1):
            if j:
                if state is seq:   # draw against a fork advanced over the kept drafts
                    state = Sequence(seq.prompt, seq.constraint.fork(), stats=seq.stats, state=seq.state)
                state.constraint.advance(draft.tokens[j - 1])
            step = self.draw(state, rows[j])
            seq.state = state.state
            log_weight += step.log_weight
            if step.token is None:
                return Choice(None, logprob, -np.inf, tuple(accepted))
            logprob += float(rows[j][step.token])
            if j < len(draft) and step.token == draft.tokens[j] and step.token not in self.eos:
                accepted.append(step.token)
                continue
            return Choice(step.token, logprob, log_weight, tuple(accepted))
        raise AssertionError("unreachable")  # pragma: no cover

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]:
        return population
