"""The one generation loop, whatever the sampler.

Every sampler is a strategy of one step (:class:`~gramgen.generation.samplers.Sampler`):

1. *prepare* each live sequence: the sampler may end it (the constraint allows nothing but
   ending), emit tokens without a draw (jump-forward), and say whether its next draw needs
   the model's logits; the loop then ends sequences that reached ``max_new_tokens``;
2. with speculative decoding, a *drafter* proposes a few tokens for each sequence that
   needs the model (:mod:`.speculation`);
3. one forward pass scores the distinct contexts of the live sequences, each with its
   draft, and returns the logits after every drafted position (the model's session feeds
   only what each added since it last saw it, forced tokens included);
4. the sampler *chooses* per live sequence: the drafted tokens it accepts (verified
   exactly, see each sampler's ``verify``), then one token (None: a dead end); the loop
   advances the constraint, appends the tokens or ends the sequence on EOS, and counts;
5. *after the step* the sampler may replace the population (SMC resampling).

Stop conditions, EOS handling and statistics live here, once, so they behave the same for
every sampler.
"""

from __future__ import annotations

import time
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from typing import Any, Protocol

from .constraint import Constraint
from .lm import LanguageModel, Session
from .result import FinishReason, GenerationStats

__all__ = ["Choice", "Draft", "Drafter", "Sequence", "Sampler", "run"]


@dataclass(slots=True)   # not frozen: one is made per sequence and step, and frozen inits cost
class Choice:
    """A sampler's pick for one sequence: the drafted tokens it ``accepted`` (speculative
    decoding; none otherwise), then the token (None: no allowed token has any probability,
    a dead end), the log-probability of all of them under the distributions drawn from,
    and the log of the importance weight the draws contribute (0 for exact local draws).
    ``finish``: end the sequence after the accepted tokens with this reason instead of
    drawing (the constraint allows nothing but ending there)."""

    token: int | None
    logprob: float = 0.0
    log_weight: float = 0.0
    accepted: tuple[int, ...] = ()
    finish: FinishReason | None = None


@dataclass
class Draft:
    """Tokens proposed for a sequence by a drafter, and for each the distribution it was
    drawn from (a tensor over the vocabulary) or None for a point mass (a deterministic
    proposal: prompt lookup, forced text, a greedy draft)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, probs: Any = None) -> None:
        self.tokens.append(int(token))
        self.probs.append(probs)


@dataclass(eq=False)
class Sequence:
    """One sequence being generated: the prompt, what was emitted, its constraint state."""

    prompt: list[int]
    constraint: Constraint | None
    tokens: list[int] = field(default_factory=list)
    logprob: float = 0.0
    log_weight: float = 0.0
    finish: FinishReason | None = None
    eos_token: int | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)
    #: whether the next draw needs the model's logits (set by the sampler's prepare)
    needs_logits: bool = True
    #: the sampler's own per-sequence state (e.g. the next mask, a trie node)
    state: Any = None
    #: tokens proposed for verification this step (speculative decoding), or None
    draft: Draft | None = None

    def context(self) -> list[int]:
        return self.prompt + self.tokens

    def push(self, token: int) -> None:
        """Advance the constraint by ``token`` and append it (not EOS)."""
        if self.constraint is not None:
            self.constraint.advance(token)
        self.tokens.append(token)

    def copy(self) -> Sequence:
        """An independent copy (the constraint forked), e.g. for a resampled particle."""
        return Sequence(list(self.prompt), None if self.constraint is None else self.constraint.fork(),
                        list(self.tokens), self.logprob, self.log_weight, self.finish,
                        self.eos_token, GenerationStats(**vars(self.stats)), self.needs_logits,
                        self.state, None)


class Sampler(Protocol):
    """One step of generation; see the module docstring for when each method runs."""

    def prepare(self, seq: Sequence, max_new_tokens: int) -> None: ...

    def choose(self, seqs: list[Sequence], logits: Any) -> list[Choice]:
        """One choice per sequence; ``logits`` is ``[len(seqs), width]`` (a torch tensor on
        the model's device) or None when no sequence needed the model this step. When some
        sequence carries a draft of ``d`` tokens (at most), ``[len(seqs), d + 1, width]``:
        the logits after each drafted position, the last row after the whole context and
        draft (shorter drafts are right-aligned: their positions are the last ones)."""
        ...

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]: ...


class Drafter(Protocol):
    """Proposes tokens for verification (speculative decoding, :mod:`.speculation`)."""

    def propose(self, seqs: list[Sequence], max_new_tokens: int) -> None:
        """Set ``seq.draft`` on the sequences worth drafting for (all need the model)."""
        ...


def run(lm: LanguageModel, population: SequenceOf[Sequence], sampler: Sampler, *,
        max_new_tokens: int, session: Session | None = None,
        drafter: Drafter | None = None) -> list[Sequence]:
    """Generate until every sequence has finished; returns the final population (the
    same sequences unless the sampler replaced some after a step). ``session``: a model
    session to continue in (default: a new one). ``drafter``: propose tokens each step for
    the sampler to verify (speculative decoding; the output distribution is unchanged)."""
    t0 = time.perf_counter()
    eos = frozenset(lm.vocab.eos_token_ids)
    own = session is None
    if own:
        session = lm.session()
    try:
        return _run(lm, population, sampler, max_new_tokens, session, eos, t0, drafter)
    finally:
        close = getattr(session, "close", None)
        if own and close is not None:
            close()


def _run(lm, population, sampler, max_new_tokens, session, eos, t0, drafter) -> list[Sequence]:
    population = list(population)
    for seq in population:
        seq.stats.prompt_tokens = len(seq.prompt)
        _prepare(sampler, seq, max_new_tokens)
    step = 0
    while live := [s for s in population if s.finish is None]:
        logits = None
        if any(s.needs_logits for s in live):
            if drafter is not None:
                _propose(drafter, [s for s in live if s.needs_logits], max_new_tokens)
            logits = _score(session, live)
        choices = sampler.choose(live, logits)
        for seq, choice in zip(live, choices):
            _apply(seq, choice, eos)
        step += 1
        population = sampler.after_step(population, step)
        for seq in population:
            if seq.finish is None:
                _prepare(sampler, seq, max_new_tokens)
    seconds = time.perf_counter() - t0
    for seq in population:
        seq.stats.seconds = seconds
        seq.stats.new_tokens = len(seq.tokens)
    return population


def _apply(seq: Sequence, choice: Choice, eos: frozenset) -> None:
    """Append what the sampler chose: the accepted drafted tokens, then the token."""
    seq.logprob += choice.logprob
    seq.log_weight += choice.log_weight
    if seq.draft is not None:
        seq.stats.drafted += len(seq.draft)
        seq.stats.accepted += len(choice.accepted)
        seq.draft = None
    for token in choice.accepted:
        seq.push(token)
    seq.stats.sampled_tokens += len(choice.accepted)
    if choice.finish is not None:
        seq.finish = choice.finish
        return
    token = choice.token
    if token is None:
        seq.finish = "dead_end"
        return
    seq.stats.sampled_tokens += 1
    if token in eos:
        if seq.constraint is not None:
            seq.constraint.advance(token)
        seq.finish, seq.eos_token = "eos", token
    else:
        seq.push(token)


def _propose(drafter: Drafter, seqs: list[Sequence], max_new_tokens: int) -> None:
    t0 = time.perf_counter()
    drafter.propose(seqs, max_new_tokens)
    share = (time.perf_counter() - t0) / len(seqs)
    for seq in seqs:
        seq.stats.mask_seconds += share


def _prepare(sampler: Sampler, seq: Sequence, max_new_tokens: int) -> None:
    t0 = time.perf_counter()
    sampler.prepare(seq, max_new_tokens)
    seq.stats.mask_seconds += time.perf_counter() - t0
    if seq.finish is None and len(seq.tokens) >= max_new_tokens:
        seq.finish = "max_new_tokens"


def _score(session, live: list[Sequence]):
    """Logits ``[len(live), width]`` of the live sequences' next tokens, one forward pass
    for their distinct contexts; with drafts, ``[len(live), d + 1, width]`` for the
    longest draft ``d`` (each context scored with its draft appended)."""
    index: dict[tuple[int, ...], int] = {}
    last = 1
    if any(s.draft is not None for s in live):
        last = 1 + max(len(s.draft) for s in live if s.draft is not None)
        if min(len(s.prompt) + len(s.tokens) for s in live) < last:
            for s in live:   # a context too short for the others' positions: no drafts this step
                s.draft = None
            last = 1
    if last == 1:
        rows = [index.setdefault(tuple(s.context()), len(index)) for s in live]
        logits = session.logits(list(index))[:, -1]
    else:
        rows = [index.setdefault(tuple(s.context()) + tuple(s.draft.tokens if s.draft is not None else ()),
                                 len(index)) for s in live]
        logits = session.logits(list(index), last)
    if session.forwarded:
        for seq in live:
            seq.stats.forward_passes += 1
    if rows != list(range(len(live))):
        import torch

        logits = logits.index_select(0, torch.tensor(rows, device=logits.device))
    return logits
