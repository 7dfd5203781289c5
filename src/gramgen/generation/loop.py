"""The one generation loop, whatever the sampler.

Every sampler is a strategy of one step (:class:`~gramgen.generation.samplers.Sampler`):

1. *prepare* each live sequence: the sampler may end it (the constraint allows nothing but
   ending), emit tokens without a draw (jump-forward), and say whether its next draw needs
   the model's logits; the loop then ends sequences that reached ``max_new_tokens``;
2. one forward pass scores the distinct contexts of the live sequences (the model's
   session feeds only what each added since it last saw it, forced tokens included);
3. the sampler *chooses* one token per live sequence (None: a dead end); the loop
   advances the constraint, appends the token or ends the sequence on EOS, and counts;
4. *after the step* the sampler may replace the population (SMC resampling).

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

__all__ = ["Choice", "Sequence", "Sampler", "run"]


@dataclass(frozen=True)
class Choice:
    """A sampler's pick for one sequence: the token (None: no allowed token has any
    probability), its log-probability under the distribution drawn from, and the log
    of the importance weight the draw contributes (0 for exact local draws)."""

    token: int | None
    logprob: float = 0.0
    log_weight: float = 0.0


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
                        self.state)


class Sampler(Protocol):
    """One step of generation; see the module docstring for when each method runs."""

    def prepare(self, seq: Sequence, max_new_tokens: int) -> None: ...

    def choose(self, seqs: list[Sequence], logits: Any) -> list[Choice]:
        """One choice per sequence; ``logits`` is ``[len(seqs), width]`` (a torch tensor on
        the model's device) or None when no sequence needed the model this step."""
        ...

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]: ...


def run(lm: LanguageModel, population: SequenceOf[Sequence], sampler: Sampler, *,
        max_new_tokens: int, session: Session | None = None) -> list[Sequence]:
    """Generate until every sequence has finished; returns the final population (the
    same sequences unless the sampler replaced some after a step). ``session``: a model
    session to continue in (default: a new one)."""
    t0 = time.perf_counter()
    eos = frozenset(lm.vocab.eos_token_ids)
    own = session is None
    if own:
        session = lm.session()
    try:
        return _run(lm, population, sampler, max_new_tokens, session, eos, t0)
    finally:
        close = getattr(session, "close", None)
        if own and close is not None:
            close()


def _run(lm, population, sampler, max_new_tokens, session, eos, t0) -> list[Sequence]:
    population = list(population)
    for seq in population:
        seq.stats.prompt_tokens = len(seq.prompt)
        _prepare(sampler, seq, max_new_tokens)
    step = 0
    while live := [s for s in population if s.finish is None]:
        logits = None
        if any(s.needs_logits for s in live):
            logits = _score(session, live)
        choices = sampler.choose(live, logits)
        for seq, choice in zip(live, choices):
            seq.logprob += choice.logprob
            seq.log_weight += choice.log_weight
            token = choice.token
            if token is None:
                seq.finish = "dead_end"
                continue
            seq.stats.sampled_tokens += 1
            if token in eos:
                if seq.constraint is not None:
                    seq.constraint.advance(token)
                seq.finish, seq.eos_token = "eos", token
            else:
                seq.push(token)
        step += 1
        population = sampler.after_step(population, step)
        for seq in population:
            if seq.finish is None:
                _prepare(sampler, seq, max_new_tokens)
    seconds = time.perf_counter() - t0
    for seq in population:
        seq.stats.seconds = seconds
    return population


def _prepare(sampler: Sampler, seq: Sequence, max_new_tokens: int) -> None:
    t0 = time.perf_counter()
    sampler.prepare(seq, max_new_tokens)
    seq.stats.mask_seconds += time.perf_counter() - t0
    if seq.finish is None and len(seq.tokens) >= max_new_tokens:
        seq.finish = "max_new_tokens"


def _score(session, live: list[Sequence]):
    """Logits ``[len(live), width]`` of the live sequences' next tokens, one forward pass
    for their distinct contexts."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(s.context()), len(index)) for s in live]
    logits = session.logits(list(index))[:, -1]
    if session.forwarded:
        for seq in live:
            seq.stats.forward_passes += 1
    if rows != list(range(len(live))):
        import torch

        logits = logits.index_select(0, torch.tensor(rows, device=logits.device))
    return logits
