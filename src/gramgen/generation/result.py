"""What generation returns: one :class:`GenerationResult` per prompt, whatever the sampler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FinishReason", "GenerationResult", "GenerationStats"]

#: Why a sequence stopped:
#:
#: * ``"eos"``: the sampler drew an end-of-sequence token (allowed only where the text is a
#:   complete word of the constraint);
#: * ``"grammar"``: the constraint allows nothing but ending, so the text is complete and
#:   no draw was needed (masked sampling only: the weighted samplers draw EOS, whose
#:   probability enters their weights);
#: * ``"max_new_tokens"``: the budget ran out first; the output is incomplete;
#: * ``"dead_end"``: no allowed token had any probability (or no token was allowed at all):
#:   the output is incomplete.
FinishReason = Literal["eos", "grammar", "max_new_tokens", "dead_end"]


@dataclass
class GenerationStats:
    """Where the work went for one output."""

    prompt_tokens: int = 0
    #: forward passes that fed this sequence new tokens (the prefill included)
    forward_passes: int = 0
    #: tokens emitted without a draw because they were the only token allowed (jump-forward)
    forced_tokens: int = 0
    #: tokens drawn from a distribution (a drawn EOS included; accepted drafts included:
    #: verification draws them from the target distribution)
    sampled_tokens: int = 0
    #: speculative decoding: draft tokens sent to verification, and how many were kept
    drafted: int = 0
    accepted: int = 0
    #: forward passes of a draft model (speculation with ``draft=<model>``)
    draft_forward_passes: int = 0
    #: seconds spent computing constraint masks and checks for this sequence
    mask_seconds: float = 0.0
    #: steps whose mask passed the sampler's work bound (``Constrained(max_mask_work=...)``)
    #: and whose token was drawn by checking the best tokens one at a time
    bounded_masks: int = 0
    #: wall-clock seconds of the whole call this output came from
    seconds: float = 0.0
    #: tokens this output emitted (EOS not counted), set when the call ends
    new_tokens: int = 0
    #: monitors (``generate(..., monitors=...)``): triggers reached (at the end of the
    #: document and in the generated text), static-analysis queries made (a trigger met
    #: again is answered from a cache) and their seconds, queries that failed or timed out
    #: (nothing was restricted there), and states where the monitors and the constraint
    #: together allowed no token, so the monitors were set aside
    monitor_triggers: int = 0
    monitor_queries: int = 0
    monitor_query_seconds: float = 0.0
    monitor_failures: int = 0
    monitor_fallbacks: int = 0

    @property
    def tokens_per_second(self) -> float:
        """Emitted tokens per wall-clock second of the call (0 before it ends)."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Share of draft tokens kept (None when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else None


@dataclass
class GenerationResult:
    """One generated output.

    ``text`` is exactly the bytes the constraint saw, decoded as UTF-8. ``tokens`` are the
    emitted token ids without the final EOS; ``eos_token`` is the EOS id that ended the
    output when one was drawn, else None. ``value`` is the parsed JSON (or the pydantic
    instance) when the constraint was a ``schema=`` and the output is complete, else None.

    ``logprob`` sums, over every emitted token and a drawn EOS, its log-probability under
    the distribution it was drawn from:

    * ``"constrained"``: the model's softmax at ``temperature`` (1 for greedy), restricted to
      the allowed tokens and renormalised, then truncated by ``top_k`` / ``top_p``; a
      forced token has probability 1 there (log 0);
    * ``"awrs"``, ``"smc"`` and ``"asap"``: the model's own distribution at temperature 1
      (log P(output | prompt)), since what these samplers target is the model conditioned
      on the constraint; their weights are in ``extras``.

    ``complete`` is True when the output is a whole word of the constraint
    (``finish_reason`` ``"eos"`` or ``"grammar"``) and, for ``schema=``, parsed and validated.
    """

    text: str
    value: Any
    tokens: list[int]
    logprob: float
    finish_reason: FinishReason
    complete: bool
    stats: GenerationStats = field(default_factory=GenerationStats)
    eos_token: int | None = None
    #: why a complete output has no ``value`` (it failed to parse / validate), else None
    error: str | None = None
    #: sampler details: ``log_weight`` (awrs), ``log_ml`` and ``particles`` (smc),
    #: ``trie_nodes`` (asap), ``constraint_evaluations`` and ``steps`` (all)
    extras: dict[str, Any] = field(default_factory=dict)
