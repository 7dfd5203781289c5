"""Masked sampling (grammar-constrained decoding): each token from the model's distribution
restricted to the allowed tokens; greedy at temperature 0.

Before each draw the constraint's full mask is computed. Where it allows a single token,
that token is emitted without a draw (jump-forward): the restricted distribution puts all
its mass there whatever the logits, so this is exact, and a run of such tokens reaches
the model in the same forward pass as the draw before it. Where it allows nothing but EOS
the sequence ends (``finish_reason="grammar"``).

With speculative decoding, :meth:`MaskedSampler.verify` keeps the same distribution: at
each drafted position the target is the masked, warped distribution ``p'`` this sampler
would draw from there; a draft ``x`` drawn from ``q`` is kept with probability
``min(1, p'(x) / q(x))`` (``p'(x)`` for a point-mass draft), and the first rejected one is
replaced by a draw from ``max(0, p' - q)`` renormalised (``p'`` without ``x``), which is
exactly ``p'`` overall (Leviathan et al., 2023). Greedy keeps a draft iff it is the argmax.

With ``max_mask_work`` the mask's costly part (the parser walk of the tokens that end a
lexeme) is bounded. Past the bound the step draws without the full mask, from the same
distribution: the tokens are visited best first, by score for greedy and ``top_k``, by
score / temperature plus Gumbel noise for plain sampling (the first allowed token in that
order is a draw from the masked distribution: the Gumbel-max trick), each one looked up in
what the bounded mask decided and checked alone (:meth:`Matcher.check`) only when the mask
left it open; ``top_k`` draws among the first ``k`` allowed. ``top_p`` needs the allowed
tokens' total mass, so it completes the mask; so does a step that needs more than
:data:`MAX_OPEN_CHECKS` checks or visits thousands of tokens, or that meets tokens of
probability 0 before an allowed one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ...automata import bitmask
from ...automata.vocabulary import Vocabulary
from ...errors import ConfigurationError
from ..constraint import fill_bitmask
from ..loop import Choice, Draft, Sequence

__all__ = ["Constrained", "MAX_OPEN_CHECKS", "MaskedSampler", "check_sampling_arguments", "mask_row",
           "single_allowed", "warp"]

#: a step past the mask's work bound checks at most this many tokens one by one before it
#: completes the mask instead (the allowed tokens then hold little of the model's mass)
MAX_OPEN_CHECKS = 256
#: tokens taken per round, best first, when a step visits them without the full mask, and
#: the most it visits before completing the mask instead
_VISIT_CHUNK = 64
_MAX_VISITS = 4096


@dataclass(frozen=True)
class Constrained:
    """Masked sampling. ``temperature=0`` is greedy; otherwise the masked logits are
    divided by ``temperature``, cut to the ``top_k`` most likely tokens and to the
    smallest set holding ``top_p`` of the mass, then sampled. ``jump_forward``: emit
    tokens the constraint forces without a draw (exact; saves forward passes).

    ``max_mask_work``: bound each mask's parser walk to this much work (see
    :meth:`gramgen.Matcher.fill_bitmask`); a step past it draws its token by checking the
    best tokens one at a time, from the same distribution (see the module docstring), and
    is counted in ``stats.bounded_masks``. Its log-probability is then exact with
    ``top_k``; otherwise the allowed tokens' total mass is unknown and the token's
    log-probability before masking (a lower bound) is added instead. Such a step emits
    no forced token without a draw. None (default): every mask is complete."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    jump_forward: bool = True
    max_mask_work: int | None = None

    def __post_init__(self) -> None:
        check_sampling_arguments(self.temperature, self.top_k, self.top_p, None)
        work = self.max_mask_work
        if work is not None and (isinstance(work, bool) or not isinstance(work, Integral) or work < 0):
            raise ConfigurationError(f"max_mask_work must be an int >= 0 or None, not {work!r}")


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


def mask_row(logits, words: np.ndarray):
    """``logits`` ``[1, width]`` with ``-inf`` outside the packed mask row ``words`` (a
    width wider than the mask's is masked out too)."""
    import torch

    host = np.zeros((1, bitmask.n_words(max(logits.shape[-1], words.shape[0] * 32))), dtype=np.int32)
    host[0, :words.shape[0]] = words
    return bitmask.apply_bitmask(logits, torch.from_numpy(host).to(logits.device))


def _aligned(q, p):
    """``q`` (a distribution over the vocabulary) on ``p``'s device and dtype, cut or
    zero-padded to ``p``'s width (a model's logits may be wider than its vocabulary)."""
    import torch

    out = torch.zeros_like(p)
    n = min(q.shape[-1], p.shape[-1])
    out[:n] = q[:n].to(p.device, p.dtype)
    return out


@dataclass
class _Open:
    """A step's mask left open by the work bound: the tokens known ``allowed`` and those
    ``undecided`` (packed rows; the mask is ``allowed`` plus the allowed undecided ones)."""

    allowed: np.ndarray
    undecided: np.ndarray

    def fate(self, token: int) -> bool | None:
        """True: allowed; False: not; None: ask the constraint."""
        w, bit = token >> 5, 1 << (token & 31)
        if w >= self.allowed.shape[0]:
            return False
        if int(self.allowed[w]) & bit:
            return True
        return None if int(self.undecided[w]) & bit else False


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
        bound = self.options.max_mask_work
        bounded = getattr(seq.constraint, "bounded_words", None) if bound is not None else None
        while True:
            if bounded is not None:
                allowed, undecided = bounded(bound)
                if undecided is not None:
                    seq.state = _Open(allowed, undecided)
                    seq.stats.bounded_masks += 1
                    return
                words[0] = allowed.view(np.int32)
            else:
                fill_bitmask(seq.constraint, words, 0)
            settled = self._settled(words[0])
            if settled is None or (settled.token is not None and len(seq.tokens) >= max_new_tokens):
                seq.state = words[0]
                return
            if settled.token is None:   # a dead end, or only ending is allowed
                seq.finish = settled.finish or "dead_end"
                return
            seq.push(settled.token)
            seq.stats.forced_tokens += 1

    def _settled(self, words: np.ndarray) -> Choice | None:
        """What a mask (a packed row) decides without a draw: nothing allowed (a dead
        end), only EOS (the text is complete: ``finish="grammar"``), or, with
        ``jump_forward``, the one token allowed (its probability is 1); None: a draw."""
        single = single_allowed(words)
        if single == -1:
            return Choice(None)
        if single in self.eos:
            return Choice(None, finish="grammar")
        if single is not None and self.options.jump_forward:
            return Choice(single)
        return None

    def choose(self, seqs: list[Sequence], logits) -> list[Choice]:
        if logits.ndim == 3:   # some sequences carry drafts: verify those
            out: list[Choice | None] = [None] * len(seqs)
            plain = [b for b, seq in enumerate(seqs) if seq.draft is None]
            if plain:
                picked = self._choose([seqs[b] for b in plain], logits[plain, -1])
                for b, choice in zip(plain, picked):
                    out[b] = choice
            for b, seq in enumerate(seqs):
                if seq.draft is not None:
                    out[b] = self.verify(seq, logits[b, logits.shape[1] - len(seq.draft) - 1:], seq.draft)
            return out
        return self._choose(seqs, logits)

    def verify(self, seq: Sequence, logits, draft: Draft) -> Choice:
        """The accepted prefix of ``draft`` and the token after it, from ``logits``
        ``[len(draft) + 1, width]`` (the rows after each drafted position); see the module
        docstring. Masks past the first rejection are never computed."""
        import torch

        greedy = self.options.temperature == 0
        accepted: list[int] = []
        logprob = 0.0
        words = np.zeros((1, self.n_words), dtype=np.int32)
        done = self._complete(seq)   # (a mask left open: the draft is verified on the full one)
        if done is not None:
            return done
        fork = None
        for j in range(len(draft) + 1):
            if j == 0 or seq.constraint is None:
                row_words = seq.state if seq.constraint is not None else None
            else:
                if fork is None:
                    fork = seq.constraint.fork()
                fork.advance(draft.tokens[j - 1])
                fill_bitmask(fork, words, 0)
                row_words = words[0]
                settled = self._settled(row_words)   # as prepare would, without a draw
                if settled is not None:
                    if settled.token is None or j == len(draft):
                        return dataclasses.replace(settled, logprob=logprob, accepted=tuple(accepted))
                    accepted.append(settled.token)   # a draft the constraint allowed: it is that token
                    continue
            scores = self._masked(logits[j:j + 1], row_words)
            if not greedy:
                scores = warp(scores, self.options.temperature, self.options.top_k, self.options.top_p)
            logp = torch.log_softmax(scores, dim=-1)[0]
            if j == len(draft):   # every draft kept: the next token
                token = int(torch.argmax(logp)) if greedy else self._draw_row(logp)
                return Choice(token, logprob + float(logp[token]), 0.0, tuple(accepted))
            x, q = draft.tokens[j], draft.probs[j]
            if greedy:
                best = int(torch.argmax(logp))
                keep = best == x
            elif q is None:
                # a point mass: the draw plain sampling makes here, kept iff it is the
                # draft (probability p(x)); otherwise it is a draw of p without x, which is
                # the residual. One draw per emitted token, as without speculation, so a
                # seed gives the same tokens with and without point-mass drafts
                best = self._draw_row(logp)
                keep = best == x
                if not keep:
                    return Choice(best, logprob + float(logp[best]), 0.0, tuple(accepted))
            else:
                p_x = float(logp[x].exp()) if x < logp.shape[0] else 0.0
                q_x = 1.0 if q is None else float(q[x])
                keep = p_x > 0 and self._uniform(logp.device) * q_x < p_x
            if keep:
                accepted.append(x)
                logprob += float(logp[x])
                if x in self.eos:
                    return Choice(x, logprob, 0.0, tuple(accepted[:-1]))
                continue
            if greedy:
                return Choice(best, logprob + float(logp[best]), 0.0, tuple(accepted))
            p = logp.exp()
            if q is None:
                residual = p.clone()
                residual[x] = 0.0
            else:
                residual = torch.clamp(p - _aligned(q, p), min=0.0)
            if not float(residual.sum()) > 0:   # p' == q up to rounding: p' itself is exact
                residual = p
            token = self._draw(residual)
            return Choice(token, logprob + float(logp[token]), 0.0, tuple(accepted))
        raise AssertionError("unreachable")  # pragma: no cover

    def _masked(self, logits, words):
        """``logits`` ``[1, width]`` with the tokens outside ``words`` (a packed row, or None
        without a constraint) at ``-inf``."""
        return logits if words is None else mask_row(logits, words)

    def generator(self, device):
        """The torch generator of this sampler's draws (seeded once), or None."""
        import torch

        if self._generator is None and self.seed is not None:
            self._generator = torch.Generator(device=device).manual_seed(int(self.seed))
        return self._generator

    def _uniform(self, device) -> float:
        import torch

        return float(torch.rand((), generator=self.generator(device), device=device))

    def _draw_row(self, logp) -> int:
        """A token drawn from ``exp(logp)`` (1-D) exactly as :meth:`_pick` draws a row."""
        import torch

        return int(torch.multinomial(logp.exp()[None], 1, generator=self.generator(logp.device))[0, 0])

    def _draw(self, weights) -> int:
        """A token drawn with probability proportional to ``weights`` (1-D, >= 0)."""
        import torch

        return int(torch.multinomial(weights / weights.sum(), 1, generator=self.generator(weights.device))[0])

    def _complete(self, seq: Sequence) -> Choice | None:
        """Replace an open state by the full mask (the work bound given up for this step).
        Where that allows one token, nothing but EOS, or nothing, the choice prepare would
        have made without a draw (so a seed draws the same tokens as without the bound)."""
        if not isinstance(seq.state, _Open):
            return None
        t0 = time.perf_counter()
        words = np.zeros((1, self.n_words), dtype=np.int32)
        fill_bitmask(seq.constraint, words, 0)
        seq.state = words[0]
        seq.stats.mask_seconds += time.perf_counter() - t0
        return self._settled(seq.state)

    def _choose(self, seqs: list[Sequence], logits) -> list[Choice]:
        opened = [b for b, seq in enumerate(seqs) if isinstance(seq.state, _Open)]
        if not opened:
            return self._choose_masked(seqs, logits)
        out: list[Choice | None] = [None] * len(seqs)
        for b in opened:
            t0 = time.perf_counter()
            out[b] = self._choose_open(seqs[b], logits[b])
            seqs[b].stats.mask_seconds += time.perf_counter() - t0
        rest = []
        for b in range(len(seqs)):
            if out[b] is None:
                out[b] = self._complete(seqs[b])
                if out[b] is None:
                    rest.append(b)
        if rest:
            for b, choice in zip(rest, self._choose_masked([seqs[b] for b in rest], logits[rest])):
                out[b] = choice
        return out

    def _choose_open(self, seq: Sequence, row) -> Choice | None:
        """The choice for a sequence whose mask was left open, by visiting tokens best
        first (see the module docstring); None: give up, complete the mask."""
        import torch

        opts = self.options
        if opts.top_p is not None and opts.top_p < 1.0:
            return None
        open_: _Open = seq.state
        constraint = seq.constraint
        width = min(row.shape[-1], self.n_words * 32)
        scores = row[:width].float()
        greedy = opts.temperature == 0
        if greedy or opts.top_k is not None:
            keys = scores
        else:
            u = torch.rand(scores.shape, generator=self.generator(scores.device), device=scores.device)
            gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(u.dtype).tiny)))
            keys = scores / opts.temperature + gumbel
        want = 1 if opts.top_k is None else opts.top_k
        picked: list[int] = []
        last = None   # the key of the last token picked: ties with it are taken too
        checks = 0
        hi = math.inf   # the tokens with a key above hi were visited
        k = 0
        while len(picked) < want:
            if k >= _MAX_VISITS:
                return None
            k = min(width, max(_VISIT_CHUNK, 4 * k))
            vals, idx = torch.topk(keys, k)
            full = k == width
            low = -math.inf if full else float(vals[-1])
            # a key equal to the chunk's lowest may recur outside it: those wait for the
            # next, bigger chunk, so every token is visited once, by key then id
            batch = sorted((-v, t) for v, t in zip(vals.tolist(), idx.tolist()) if v <= hi and (full or v > low))
            for neg, token in batch:
                key = -neg
                if key == -math.inf or (len(picked) >= want and key != last):
                    break
                fate = open_.fate(token)
                if fate is None:
                    checks += 1
                    if checks > MAX_OPEN_CHECKS:
                        return None
                    fate = constraint.check(token)
                if fate:
                    picked.append(token)
                    last = key
            else:
                if not full:
                    hi = low
                    continue
            break
        if not picked:
            return None
        if greedy:
            token = picked[0]
            logp = torch.log_softmax(scores, dim=-1)
            return Choice(token, float(logp[token]))
        if opts.top_k is None:
            token = picked[0]   # the Gumbel-max draw
            logp = torch.log_softmax(scores / opts.temperature, dim=-1)
            return Choice(token, float(logp[token]))
        chosen = torch.tensor(picked, device=scores.device)
        logp = torch.log_softmax(scores[chosen] / opts.temperature, dim=-1)
        j = int(torch.multinomial(logp.exp(), 1, generator=self.generator(scores.device))[0])
        return Choice(picked[j], float(logp[j]))

    def _choose_masked(self, seqs: list[Sequence], logits) -> list[Choice]:
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
        scores = warp(scores, opts.temperature, opts.top_k, opts.top_p)
        logp = torch.log_softmax(scores, dim=-1)
        picked = torch.multinomial(logp.exp(), 1, generator=self.generator(scores.device))[:, 0]
        return picked, logp.gather(-1, picked[:, None])[:, 0]

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]:
        return population
