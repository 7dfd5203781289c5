"""Speculative decoding on the one loop: drafters propose, samplers verify exactly.

Each step of :func:`~gramgen.generation.loop.run`, a :class:`Speculator` proposes up to
``num_draft_tokens`` tokens for every sequence that needs the model; one forward pass
scores the context with its draft and returns the logits after every drafted position;
the sampler then keeps a prefix of the draft and draws the token after it (each sampler's
``verify``). The verification rules keep every sampler's output distribution exactly as
it is without speculation (docs/speculative.md says why); the drafts only decide how many
tokens one forward pass yields.

Drafters, run in the order given, each extending what the previous ones proposed:

* ``"forced"``: the text the grammar forces next (keys, punctuation), in the tokenizer's
  canonical tokenisation (proposed, never committed: another tokenisation stays possible);
* ``"prompt_lookup"``: the tokens that followed the latest earlier occurrence of the
  context's last ``max_ngram`` (down to 1) tokens, in the prompt or the text so far
  (extraction copies values from the document); when no token n-gram recurs, the text
  after the latest earlier occurrence of the generated text's last characters (a value
  copied into JSON starts after a quote, where the document's tokens had a space), in
  the tokenizer's canonical tokenisation;
* a :class:`~gramgen.generation.LanguageModel` with the same vocabulary (a smaller model):
  it drafts token by token under the same constraint, the way the sampler would draw
  (greedy argmax of its masked logits; sampling from its masked, warped distribution,
  which verification then needs as ``q``; for AWRS, SMC and ASAp its most likely allowed
  token among its top few).

Every proposal is cut at the first token the constraint rejects (it could never be
kept). With ``adaptive=True`` each drafter drafts, per sequence and step, the number of
tokens that maximises the expected tokens per second: from its acceptance so far (per
sequence, starting from the call's; per place in its run of tokens, since a copied name is
right to its end or wrong from its start; for lookup per kind of match), the measured cost
of a step of the target model for each number of positions it verifies, and a draft model's
cost per forward pass (:class:`StepCosts`). A drafter that does not pay drafts nothing, and probes
after 8 steps, then 16, 32, up to 64. What was learned carries over to the target's later
calls (:func:`_learned`). Acceptance starts from 0.9 for the first token of forced text (the
grammar's own; only its tokenisation may differ) and 0.5 for the others.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence as SequenceOf
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

import numpy as np

from ..automata import bitmask
from ..automata.token_table import token_table_for
from ..errors import ConfigurationError, TokenRejected
from .constraint import fill_bitmask
from .lm import LanguageModel
from .loop import Draft, Sequence
from .samplers.masked import mask_row, warp

__all__ = ["DRAFTERS", "Speculation", "Speculator"]

#: the drafters named by a string
DRAFTERS = ("prompt_lookup", "forced")
#: prompt lookup tries this many earlier occurrences of the n-gram, most recent first
_LOOKUP_CANDIDATES = 4
#: a draft model's candidates checked per position by samplers without full masks
_CHECKED_CANDIDATES = 8
#: a drafter that does not pay tries one token after 8 steps, then 16, 32, 64 ..., to
#: re-measure it
_PROBE_EVERY = 8
_PROBE_MAX = 64
#: the acceptance each drafter starts from: forced text is the grammar's own (only its
#: tokenisation may differ), lookup and a draft model are guesses
#: (first token of a run, each later one given those before)
_PRIOR_ACCEPTANCE = {"forced": (0.9, 0.95), "prompt_lookup": (0.5, 0.8), "model": (0.5, 0.6)}
#: weight of the past in the running acceptance estimates
_DECAY = 0.9
#: until measured: the cost of one more verified position, and of a draft-model forward,
#: relative to a step of the target model
_PRIOR_POSITION_COST = 0.1
_PRIOR_DRAFT_COST = 0.3
#: step costs are the median of this many recent steps (per number of drafted positions)
_RECENT = 9
#: text lookup matches the last 12 down to 2 bytes of the generated text
_TEXT_SUFFIX = (12, 2)
#: bytes of text taken after a text match, per token wanted
_BYTES_PER_TOKEN = 8


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding options for :func:`gramgen.generate` (``speculative=``).

    ``draft``: ``"prompt_lookup"``, ``"forced"``, a draft model (a
    :class:`gramgen.Model` with the target's vocabulary), or a sequence of these run in
    order (e.g. ``("forced", "prompt_lookup")``). ``num_draft_tokens``: the most tokens
    drafted per step (γ). ``max_ngram``: the longest n-gram prompt lookup matches.
    ``adaptive``: adjust each sequence's draft length to its acceptance.
    """

    draft: Any = "prompt_lookup"
    num_draft_tokens: int = 5
    max_ngram: int = 3
    adaptive: bool = True

    def __post_init__(self) -> None:
        for name in ("num_draft_tokens", "max_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ConfigurationError(f"Speculation's {name} must be a positive int, not {value!r}")
        if not isinstance(self.adaptive, bool):
            raise ConfigurationError(f"Speculation's adaptive must be True or False, not {self.adaptive!r}")
        parts = self.parts
        if not parts:
            raise ConfigurationError("Speculation's draft names no drafter: give 'prompt_lookup', "
                                     "'forced', a draft model, or a sequence of them")
        models = 0
        for part in parts:
            if isinstance(part, str):
                if part not in DRAFTERS:
                    raise ConfigurationError(f"unknown drafter {part!r}: choose from "
                                             + ", ".join(repr(d) for d in DRAFTERS)
                                             + " or give a draft model")
            elif isinstance(part, LanguageModel):
                models += 1
            else:
                raise ConfigurationError(f"a drafter is 'prompt_lookup', 'forced' or a gramgen model "
                                         f"(gramgen.Model), not {type(part).__name__}")
        if models > 1:
            raise ConfigurationError("Speculation takes at most one draft model")
        if len({p if isinstance(p, str) else id(p) for p in parts}) != len(parts):
            raise ConfigurationError("Speculation's draft names a drafter twice")

    @property
    def parts(self) -> tuple:
        """The drafters in the order they run."""
        draft = self.draft
        if isinstance(draft, (str, LanguageModel)) or not isinstance(draft, SequenceOf):
            return (draft,)
        return tuple(draft)

    @property
    def model(self) -> LanguageModel | None:
        """The draft model, if one is among the drafters."""
        return next((p for p in self.parts if not isinstance(p, str)), None)


@dataclass(frozen=True)
class DraftPolicy:
    """How a draft model picks its tokens: ``"greedy"`` (argmax of its masked logits),
    ``"sample"`` (from its masked logits warped like the sampler's: ``q`` is recorded for
    verification) or ``"checked"`` (its most likely allowed token among its top few, for
    samplers that never compute full masks)."""

    kind: str = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    #: ``device -> torch.Generator | None``: the sampler's generator, so seeds reproduce
    generator: Any = None


@dataclass(eq=False)
class _Drafting:
    """One sequence's draft in the making: the constraint forked and advanced over it."""

    seq: Sequence
    room: int
    constraint: Any
    eos: frozenset
    draft: Draft = field(default_factory=Draft)
    ended: bool = False
    #: which drafter proposed each drafted token, and its place in that drafter's run
    sources: list[tuple[str, int]] = field(default_factory=list)
    source: str = ""
    run: int = 0

    #: the most tokens the draft may hold after the current drafter
    limit: int = 1 << 30

    @property
    def left(self) -> int:
        return 0 if self.ended else min(self.room, self.limit) - len(self.draft)

    def context(self) -> list[int]:
        return self.seq.prompt + self.seq.tokens + self.draft.tokens

    def extend(self, tokens: list[int], probs=None) -> int:
        """Add the tokens the constraint accepts, in order (at most ``left``); the first
        rejected one ends the draft. Returns how many were added."""
        tokens = tokens[:self.left]
        n = 0
        for t in tokens:
            if not self._take(t):
                break
            self.draft.add(t, None if probs is None else probs[n])
            self.sources.append((self.source, self.run))
            self.run += 1
            n += 1
            if t in self.eos:   # nothing follows an end of sequence
                self.ended = True
                break
        if n < len(tokens):
            self.ended = True
        return n

    def _take(self, token: int) -> bool:
        """Advance the draft's constraint by ``token`` if it allows it (one walk for a
        matcher, whose ``advance`` refuses; ``check`` first for other constraints)."""
        if getattr(self.constraint, "matcher", None) is not None:
            try:
                self.constraint.advance(token)
            except TokenRejected:
                return False
            return True
        if not self.constraint.check(token):
            return False
        self.constraint.advance(token)
        return True


class _Acceptance:
    """Running (decayed) counts, per position in a drafter's run of tokens, of the drafted
    tokens verification reached and kept. Positions are told apart because whether a token
    is kept depends on the ones before it: a copied name is right to its end or wrong from
    its start."""

    __slots__ = ("kept", "tried", "seen")

    def __init__(self, rates) -> None:
        self.kept = 2.0 * np.asarray(rates, dtype=np.float64)   # a prior worth two drafts
        self.tried = np.full(self.kept.shape[0], 2.0)
        self.seen = np.zeros(self.kept.shape[0], dtype=bool)

    def add(self, index: int, hit: bool) -> None:
        if index < self.kept.shape[0]:
            self.kept[index] = _DECAY * self.kept[index] + hit
            self.tried[index] = _DECAY * self.tried[index] + 1
            self.seen[index] = True

    @property
    def rates(self) -> np.ndarray:
        """The chance that the i-th token of a run is kept when the ones before it were. A
        place never reached takes the rate of the one before it when that one was
        measured: otherwise a drafter kept short by its prior would never learn that
        longer drafts are kept too."""
        rates = np.minimum(self.kept / self.tried, 0.99)
        known = bool(self.seen[0])
        for i in range(1, rates.shape[0]):
            if self.seen[i]:
                known = True
            elif known:
                rates[i] = rates[i - 1]
        return rates

    def expected(self, length: int) -> float:
        """Tokens a step emits on average when ``length`` tokens are drafted: the kept run
        and the one drawn after it."""
        return 1.0 + float(np.cumprod(self.rates[:length]).sum())


class StepCosts:
    """What speculation costs, measured as it runs, relative to a step of the target model
    without drafts (forward pass, verification and masks): a step that verified ``g``
    drafted positions, per ``g``, and one forward pass of a draft model.

    Kept per count, not as a line: on a CPU the first drafted position costs most of a
    step (the matrix products switch from vector to matrix kernels) and the next ones
    little, so a line through the counts seen mistakes a short draft for a cheap one. Each
    step is measured against the median of the recent steps without drafts, and the
    estimate is the median of the recent ratios, because a machine's load comes and goes: a
    stall, or a busy minute, says nothing about what drafting costs, and an estimate spoilt
    by one would stop drafting for good."""

    def __init__(self, most: int = 16) -> None:
        self._plain: deque = deque(maxlen=_RECENT)   # seconds of steps without drafts
        self._ratios: list[deque] = [deque(maxlen=_RECENT) for _ in range(most + 1)]
        self._draft_seconds: deque = deque(maxlen=_RECENT)   # of a draft-model forward
        self._drafted: deque = deque(maxlen=_RECENT)   # seconds of steps with drafts

    @property
    def plain_seconds(self) -> float | None:
        return float(np.median(self._plain)) if self._plain else None

    def observe(self, seconds: float, extra_positions: int) -> None:
        k = min(int(extra_positions), len(self._ratios) - 1)
        if k == 0:
            self._plain.append(float(seconds))
            return
        self._drafted.append(float(seconds))
        if self._plain:
            self._ratios[k].append(float(seconds) / self.plain_seconds)

    def observe_draft(self, seconds: float) -> None:
        self._draft_seconds.append(float(seconds))

    def ratio(self, extra_positions: int) -> float | None:
        """A step verifying ``extra_positions`` drafted tokens, in steps without drafts; for
        a count not measured yet, the nearest one measured (the larger on a tie); None
        before any."""
        k = min(int(extra_positions), len(self._ratios) - 1)
        seen = [i for i, d in enumerate(self._ratios) if d]
        if not seen:
            return None
        near = min(seen, key=lambda i: (abs(i - k), -i))
        return float(np.median(self._ratios[near]))

    def relative(self, extra_positions: int, model: bool) -> float:
        """The cost of a step with ``extra_positions`` drafted tokens relative to a step
        without: its verification, plus that many draft-model forwards when ``model``.
        Until measured, a prior: each drafted position costs a tenth of a step (a draft-model
        forward three tenths)."""
        g = int(extra_positions)
        if g == 0:
            return 1.0
        measured = self.ratio(g)
        cost = 1.0 + _PRIOR_POSITION_COST * g if measured is None else min(measured, 1.0 + 2.0 * g)
        if model:
            cost += g * self.draft_ratio()
        return cost

    def draft_ratio(self) -> float:
        """A draft-model forward in steps without drafts; while no such step was measured
        (every step drafted), in steps with drafts, which cost at least as much: an
        estimate that errs towards drafting, the regime the steps seen are in."""
        if not self._draft_seconds:
            return _PRIOR_DRAFT_COST
        base = self.plain_seconds or (float(np.median(self._drafted)) if self._drafted else None)
        if not base:
            return _PRIOR_DRAFT_COST
        return float(np.median(self._draft_seconds)) / base


def best_length(acceptance: _Acceptance, cost: Callable[[int], float], most: int) -> int:
    """The draft length (0 to ``most``) with the most expected tokens per unit of time: a
    step with ``g`` drafted tokens emits ``acceptance.expected(g)`` tokens and costs
    ``cost(g)`` steps without drafts."""
    best, value = 0, 1.0
    for g in range(1, most + 1):
        v = acceptance.expected(g) / cost(g)
        if v > value:
            best, value = g, v
    return best


#: per target model: its step costs, and per (draft model, γ) each drafter's acceptance
_LEARNED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _learned(target: LanguageModel, spec: Speculation) -> tuple[StepCosts, dict[str, _Acceptance], dict[str, int]]:
    """What speculation on ``target`` learned in earlier calls: the step costs, and per
    drafter its call-level acceptance and the steps a drafter that does not pay waits
    before it probes (new ones for a first call, or a target that cannot be weakly
    referenced)."""
    try:
        memory = _LEARNED.get(target)
        if memory is None:
            memory = _LEARNED[target] = (StepCosts(), {})
    except TypeError:
        return StepCosts(), {}, {}
    draft = spec.model
    key = (None if draft is None else id(draft), spec.num_draft_tokens)
    rates, waits = memory[1].setdefault(key, ({}, {}))
    return memory[0], rates, waits


class Speculator:
    """The drafter of one generation call (see the module docstring); :meth:`close` ends
    the draft model's session."""

    def __init__(self, spec: Speculation, target: LanguageModel, policy: DraftPolicy | None = None):
        if not isinstance(spec, Speculation):
            raise ConfigurationError(f"speculative= takes a gramgen.Speculation, not {type(spec).__name__}")
        model = spec.model
        if model is not None:
            if model is target:
                raise ConfigurationError("the draft model is the target model itself: give a smaller "
                                         "model sharing its tokenizer (or 'prompt_lookup' / 'forced')")
            if model.vocab.size != target.vocab.size or model.vocab.tokens != target.vocab.tokens:
                raise ConfigurationError(
                    f"the draft model's vocabulary ({model.vocab.size} tokens) is not the target's "
                    f"({target.vocab.size} tokens, same ids and bytes needed): speculative decoding "
                    "needs a draft model with the same tokenizer")
        self.spec = spec
        self.target = target
        self.policy = policy or DraftPolicy()
        self.eos = frozenset(target.vocab.eos_token_ids)
        #: step costs and acceptance per drafter carry over from the target's earlier calls
        #: (with the same drafters and γ): they are the machine's and the models', not the call's
        self.costs, self._rates, self._waits = _learned(target, spec)
        self._seq_rates: dict[tuple[Sequence, str], _Acceptance] = {}
        #: per sequence: (drafted and kept counts seen, (drafter, place) of each token of its last draft)
        self._last: dict[Sequence, tuple[int, int, list[tuple[str, int]]]] = {}
        self._idle: dict[tuple[Sequence, str], tuple[int, int]] = {}   # (steps idle, steps to wait)
        self._step_end: float | None = None
        self._step_positions = 0
        self._steps_seen = 0
        self._prompt_bytes: dict[Sequence, tuple[int, bytes]] = {}
        self._session = None
        self._tokenizer = getattr(target, "tokenizer", None)
        self._words = np.zeros((1, bitmask.n_words(target.vocab.size)), dtype=np.int32)

    def close(self) -> None:
        session, self._session = self._session, None
        close = getattr(session, "close", None)
        if close is not None:
            close()

    # -- one step --------------------------------------------------------------------------

    def propose(self, seqs: list[Sequence], max_new_tokens: int) -> None:
        start = time.perf_counter()
        if self._step_end is not None:
            self._steps_seen += 1
            if self._steps_seen > 1:   # the first step after drafting holds the prefill
                self.costs.observe(start - self._step_end, self._step_positions)
        items = []
        for seq in seqs:
            self._learn(seq)
            room = max_new_tokens - len(seq.tokens) - 1
            if room >= 1 and seq.constraint is not None:
                items.append(_Drafting(seq, room, seq.constraint.fork(), self.eos))
        for part in self.spec.parts:
            source = part if isinstance(part, str) else "model"
            active = []
            for it in items:
                cap = self._length(it.seq, source)
                if cap and not it.ended:   # γ bounds the whole draft, whichever drafters fill it
                    it.source, it.run = source, 0
                    it.limit = min(len(it.draft) + cap, self.spec.num_draft_tokens)
                    active.append(it)
            if not active:
                continue
            if source == "prompt_lookup":
                for it in active:
                    self._lookup(it)
            elif source == "forced":
                for it in active:
                    self._forced(it)
            else:
                self._model_draft(part, active)
        longest = 0
        for it in items:
            self._last[it.seq] = (it.seq.stats.drafted, it.seq.stats.accepted, it.sources)
            if it.draft.tokens:
                it.seq.draft = it.draft
                longest = max(longest, len(it.draft))
        self._step_positions = longest
        self._step_end = time.perf_counter()

    def _learn(self, seq: Sequence) -> None:
        """Count what the last verification of ``seq`` kept, per drafter: the first
        ``kept`` drafted tokens were kept, the next one was tried and refused."""
        last = self._last.pop(seq, None)
        if last is None or seq.stats.drafted <= last[0]:
            return
        kept = seq.stats.accepted - last[1]
        for i, (source, index) in enumerate(last[2]):
            if i > kept:
                break
            self._rate(seq, source).add(index, i < kept)
            self._rates[source].add(index, i < kept)

    def _rate(self, seq: Sequence, source: str) -> _Acceptance:
        found = self._seq_rates.get((seq, source))
        if found is None:
            first, later = _PRIOR_ACCEPTANCE.get(source.split(":")[0], (0.5, 0.5))
            prior = [first] + [later] * (self.spec.num_draft_tokens - 1)
            call = self._rates.setdefault(source, _Acceptance(prior))
            found = self._seq_rates[(seq, source)] = _Acceptance(call.rates)
        return found

    def _length(self, seq: Sequence, source: str) -> int:
        """How many tokens ``source`` may draft for ``seq`` this step (see the module
        docstring); γ when not adaptive."""
        gamma = self.spec.num_draft_tokens
        if not self.spec.adaptive:
            return gamma
        model = source == "model"
        length = max(best_length(self._rate(seq, kind), lambda g: self.costs.relative(g, model), gamma)
                     for kind in self._kinds(source))
        if length:
            self._idle.pop((seq, source), None)
            self._waits[source] = _PROBE_EVERY
            return length
        idle, wait = self._idle.get((seq, source), (0, self._waits.get(source, _PROBE_EVERY)))
        idle += 1
        if idle < wait:
            self._idle[(seq, source)] = (idle, wait)
            return 0
        wait = self._waits[source] = min(2 * wait, _PROBE_MAX)   # probe; the next waits longer
        self._idle[(seq, source)] = (0, wait)
        # beyond its first, a drafted position costs a step little: probe with all γ (a
        # draft model's forwards do cost, so it probes with two)
        return min(2, gamma) if model else gamma

    def _kinds(self, source: str) -> list[str]:
        """The kinds of proposal a drafter makes, each with its own acceptance: prompt
        lookup's by how much of the context its match covers (a 3-token match is right
        more often than a 1-token one)."""
        if source != "prompt_lookup":
            return [source]
        return [f"prompt_lookup:{n}" for n in range(1, self.spec.max_ngram + 1)] + ["prompt_lookup:text"]

    # -- the drafters ----------------------------------------------------------------------

    def _lookup(self, it: _Drafting) -> None:
        """Prompt lookup: continue the latest earlier occurrence of the last n tokens
        (n from ``max_ngram`` down to 1) whose continuation the constraint accepts longest."""
        context = np.asarray(it.context(), dtype=np.int64)
        size = context.shape[0]
        for n in range(min(self.spec.max_ngram, size - 1), 0, -1):
            pattern = context[size - n:]
            starts = np.flatnonzero(context[:size - n] == pattern[0])
            best: list[int] = []
            tried = 0
            for i in starts[::-1].tolist():
                if not np.array_equal(context[i:i + n], pattern):
                    continue
                follow = context[i + n:i + n + it.left].tolist()
                if not follow:
                    continue
                tried += 1
                matcher = getattr(it.constraint, "matcher", None)
                k = matcher.validate(follow) if matcher is not None else len(follow)
                if k > len(best):
                    best = follow[:k]
                if k == len(follow) or tried >= _LOOKUP_CANDIDATES:
                    break
            if best:
                it.source = f"prompt_lookup:{n}"
                it.extend(best)
                return
        self._text_lookup(it)

    def _text_lookup(self, it: _Drafting) -> None:
        """Prompt lookup on text: the longest suffix of the generated text (12 bytes down to
        2) found earlier in the prompt or the text, and the text after it, tokenised."""
        vocab = self.target.vocab
        seq = it.seq
        prompt = self._prompt_bytes.get(seq)
        if prompt is None or prompt[0] != len(seq.prompt):
            prompt = (len(seq.prompt), b"".join(vocab.token_bytes(t) for t in seq.prompt
                                                 if t not in self.eos))
            self._prompt_bytes[seq] = prompt
        generated = b"".join(vocab.token_bytes(t) for t in seq.tokens + it.draft.tokens)
        if len(generated) < _TEXT_SUFFIX[1]:
            return
        text = prompt[1] + generated
        for size in range(min(_TEXT_SUFFIX[0], len(generated)), _TEXT_SUFFIX[1] - 1, -1):
            at = text.rfind(generated[-size:], 0, len(text) - 1)
            if at < 0:
                continue
            start = at + size
            follow = text[start:start + _BYTES_PER_TOKEN * it.left]
            if not follow:
                continue
            tokens = self._tokenize(follow)
            if len(tokens) > 1:
                tokens = tokens[:-1]   # the last may be a word cut short
            if tokens:
                it.source = "prompt_lookup:text"
                it.extend(tokens)
            return

    def _tokenize(self, data: bytes) -> list[int]:
        """``data`` tokenised canonically (the tokenizer's own, when it reproduces the
        bytes), else longest token first; as far as whole tokens reach."""
        found = self._canonical(data)
        if found is not None:
            return found
        table = token_table_for(self.target.vocab)
        out, pos = [], 0
        while pos < len(data):
            match = table.longest_prefix_token(data[pos:])
            if match is None:
                break
            out.append(match[0])
            pos += match[1]
        return out

    def _forced(self, it: _Drafting) -> None:
        """The text the grammar forces next, in the tokenizer's canonical tokenisation when
        it reproduces the bytes exactly (else the longest-token-first one)."""
        matcher = getattr(it.constraint, "matcher", None)
        if matcher is None:
            return
        data = matcher.forced_bytes(limit=256)
        if not data:
            return
        tokens = self._canonical(data)
        if tokens is None:
            tokens = matcher.forced_tokens(limit=256)
        if tokens:
            it.extend(tokens)

    def _canonical(self, data: bytes) -> list[int] | None:
        tok = self._tokenizer
        if tok is None:
            return None
        try:
            text = data.decode("utf-8")
            ids = [int(t) for t in tok.encode(text, add_special_tokens=False)]
        except Exception:   # mid-character bytes, or a tokenizer that cannot say
            return None
        vocab = self.target.vocab
        if not ids or any(not 0 <= t < vocab.size for t in ids):
            return None
        if b"".join(vocab.token_bytes(t) for t in ids) != data:
            return None   # e.g. SentencePiece adds a word-start marker to a fragment
        return ids

    def _model_draft(self, model: LanguageModel, items: list[_Drafting]) -> None:
        """Token by token with the draft model, every sequence in one batch per position."""
        if self._session is None:
            self._session = model.session()
        session = self._session
        while active := [it for it in items if it.left > 0]:
            start = time.perf_counter()
            logits = session.logits([it.context() for it in active])[:, -1]
            self.costs.observe_draft(time.perf_counter() - start)
            if getattr(session, "forwarded", True):
                for it in active:
                    it.seq.stats.draft_forward_passes += 1
            for it, row in zip(active, logits):
                token, q = self._pick(it, row)
                if token is None:
                    it.ended = True
                else:
                    it.extend([token], None if q is None else [q])

    def _pick(self, it: _Drafting, row) -> tuple[int | None, Any]:
        """The draft model's token at this position (None: stop drafting) and the
        distribution it was drawn from (None: a point mass)."""
        import torch

        policy, vocab = self.policy, self.target.vocab
        row = row[None, :vocab.size].float() if row.shape[-1] >= vocab.size else row[None].float()
        if policy.kind == "checked":
            top = torch.topk(row[0], min(_CHECKED_CANDIDATES, row.shape[-1])).indices.tolist()
            for t in top:
                if it.constraint.check(int(t)):
                    return int(t), None
            return None, None
        fill_bitmask(it.constraint, self._words, 0)
        scores = mask_row(row, self._words[0])
        if not torch.isfinite(scores).any():
            return None, None
        if policy.kind == "greedy":
            return int(torch.argmax(scores[0])), None
        scores = warp(scores, policy.temperature, policy.top_k, policy.top_p)
        q = torch.softmax(scores[0], dim=-1)
        generator = policy.generator(q.device) if policy.generator is not None else None
        token = int(torch.multinomial(q, 1, generator=generator)[0])
        return token, q
