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

Both rounds are exponential races over the whole vocabulary. Tokens the grammar rules out
before any check (its byte alphabet and the bytes that may come next, see
``CompiledGrammar.possible_tokens``) still run in the race and count among ``r1`` and
``N`` exactly as rejections, they are only never checked: the token and the weight are
the same random variables as without the pre-filter (and, for one seed, the same values),
at a fraction of the checks.

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
from ...runtime.compiled import possible_tokens as _matcher_possible
from ..constraint import MatcherConstraint, known_mask
from ..lm import never_ids, normalised_logprobs
from ..loop import Choice, Draft, Sequence

__all__ = ["AWRS", "AWRSSampler", "AWRSStep", "WithoutReplacement", "awrs_step", "possible_tokens"]


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
    vocabulary is scanned only O(log) times per step, never sorted. (:func:`awrs_step`
    draws by exponential races instead, which let tokens known to be rejected take part
    without being visited one by one.)
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


class _Race:
    """One without-replacement draw from ``p`` as an exponential race: token t "arrives" at
    ``E_t / p_t`` with ``E_t ~ Exp(1)`` drawn for every token; arrival order is a weighted
    draw without replacement (Gumbel-top-k in another guise). The first allowed arrival is
    found by visiting the candidates (tokens that may be allowed) in arrival order, sorting
    lazily (a few at a time, never the whole vocabulary); tokens left out of the
    candidates are known rejections, which arrive and count exactly as if checked."""

    #: arrivals visited one at a time (one pass each) before the rest are sorted in batches
    ONE_BY_ONE = 4

    def __init__(self, p: np.ndarray, out: tuple[np.ndarray, ...], rng: np.random.Generator):
        """``out``: arrays of token ids that do not race (no mass, or already rejected)."""
        times = rng.standard_exponential(p.shape[0])
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(times, p, out=times)
        for ids in out:
            times[ids] = np.inf
        self.times = times

    def first(self, ids: np.ndarray | None, ok: Callable[[int], bool],
              allowed: Callable[[], np.ndarray] | None, mask_after: int) -> int | None:
        """The first allowed arrival among the candidates ``ids`` (token ids; None: every
        token that races), or None. After ``mask_after`` checked rejections, ``allowed()``
        (the full mask) finishes the race in one pass: the same token, so the outcome does
        not depend on when (or whether) the mask is used."""
        times = self.times
        ahead = times.copy() if ids is None else times[ids]
        rejected = 0

        def token(i: int) -> int:
            return i if ids is None else int(ids[i])

        def finish() -> int | None:
            mask = allowed()
            masked = np.where(mask if ids is None else mask[ids], times if ids is None else times[ids], np.inf)
            if not masked.size:
                return None
            i = int(np.argmin(masked))
            return token(i) if masked[i] < np.inf else None

        # the first arrivals one by one (usually the first is allowed), then in batches
        for _ in range(min(self.ONE_BY_ONE, ahead.size)):
            i = int(np.argmin(ahead))
            if ahead[i] == np.inf:
                return None
            if ok(token(i)):
                return token(i)
            rejected += 1
            if allowed is not None and rejected >= mask_after:
                return finish()
            ahead[i] = np.inf
        keep = np.flatnonzero(ahead < np.inf)
        ids, rest = (keep if ids is None else ids[keep]), ahead[keep]
        k = 8
        while ids.size:
            if ids.size > k:
                part = np.argpartition(rest, k)
                head, tail = part[:k], part[k:]
            else:
                head, tail = np.arange(ids.size), None
            head = head[np.argsort(rest[head], kind="stable")]
            for t in ids[head].tolist():
                if ok(t):
                    return t
                rejected += 1
                if allowed is not None and rejected >= mask_after:
                    return finish()
            if tail is None:
                break
            ids, rest = ids[tail], rest[tail]
            k *= 4
        return None


def awrs_step(logp: np.ndarray, check: Callable[[int], bool], rng: np.random.Generator,
              mask: Callable[[], np.ndarray] | None = None,
              mask_after: int = 32, known: np.ndarray | None = None,
              possible: np.ndarray | None = None) -> AWRSStep:
    """Draw one token exactly from ``p·1[check]/Z`` and an unbiased weight for ``Z``.

    ``logp`` is the (possibly unnormalised) log-probability of every token id; ``check``
    is called at most once per token id. When the model and the constraint disagree
    badly, rejections approach the vocabulary size; if the constraint can also give its
    full ``mask``, a round that has checked and rejected ``mask_after`` tokens computes it
    once and finds the rest of the draw in one vectorised pass; ``evaluations`` then
    counts the whole mask.

    ``possible``: bool[V], a superset of the allowed tokens known without checking (the
    grammar's alphabet and next bytes, see ``CompiledGrammar.possible_tokens``). Tokens
    outside it are rejections known in advance: they still take part in both rounds and
    count in the weight exactly as if checked and rejected, but are never checked.

    Each round is an exponential race over every token (:class:`_Race`), so for one
    ``rng`` state the token, the weight and ``rejections`` are the same random variables
    with or without ``possible`` and whether or not the mask is used: they only save checks.

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

    full: list[np.ndarray] = []

    def allowed() -> np.ndarray:
        if not full:
            full.append(np.asarray(mask(), dtype=bool))
        return full[0]

    def cost() -> int:
        return len(verdicts) + (p.shape[0] if full else 0)

    fallback = allowed if mask is not None else None
    dead = np.flatnonzero(p == 0.0)
    ids = None if possible is None else np.flatnonzero(np.asarray(possible, dtype=bool) & (p > 0))
    round1 = _Race(p, (dead,), rng)
    x = round1.first(ids, ok, fallback, mask_after)
    if x is None:
        return AWRSStep(None, -np.inf, cost(), p.shape[0] - dead.shape[0])
    t1 = round1.times
    rejected = np.flatnonzero(t1 < t1[x])
    n_rej = rejected.shape[0]
    total = float(p.sum())
    r1 = float(p[rejected].sum())
    if r1 <= 0.5 * total:
        left = total - r1   # the mass round 1 did not reject (x included)
    else:
        rest = p.copy()
        rest[rejected] = 0.0
        left = float(rest.sum())
    round2 = _Race(p, (dead, rejected), rng)
    y = round2.first(None if ids is None else ids[t1[ids] >= t1[x]], ok, fallback, mask_after)
    if y is None:  # only a constraint whose mask disagrees with its checks gets here
        y = x
    t2 = round2.times
    n_rej += int(np.count_nonzero(t2 < t2[y]))
    return AWRSStep(x, top + float(np.log(left)) - float(np.log(n_rej + 1)), cost(), n_rej)


# -- AWRS as a step of the generation loop ------------------------------------------------

def possible_tokens(constraint) -> np.ndarray | None:
    """bool[V], a superset of the tokens ``constraint`` allows now, known without checking
    any (see :func:`awrs_step`'s ``possible``): from the constraint's own optional
    ``possible_tokens()``, or for a gramgen matcher from its compiled grammar
    (``CompiledGrammar.possible_tokens``); None when nothing is known."""
    method = getattr(constraint, "possible_tokens", None)
    if method is not None:
        return method()
    if isinstance(constraint, MatcherConstraint):
        return _matcher_possible(constraint.matcher)
    return None


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
        known = known_mask(c)
        step = awrs_step(logp, c.check, self.rng, getattr(c, "mask", None), known=known,
                         possible=None if known is not None else possible_tokens(c))
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
