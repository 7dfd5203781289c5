"""Masked-diffusion decoding under a grammar: every committed canvas stays completable.

A masked diffusion LM (LLaDA, Dream, a BERT-style masked LM) starts from a canvas of
``length`` mask slots after the prompt and, over ``steps`` forward passes, commits tokens at
any position. :func:`generate_diffusion` runs that loop with an :class:`~gramgen.Infiller`
in it: a proposed (position, token) is committed only if the canvas, with the token there
and holes where slots are still masked, can still be completed to a word of the grammar.
Proposals are checked lazily (the model's best or sampled token first, the next one only
when it is refused), so a step costs a few checks per committed token, not a scan of the
vocabulary.

How a run of ``m`` masked slots becomes a hole (``canvas=``):

* ``"exact"``: ``Hole(tokens=m)`` (exactly ``m`` vocabulary tokens); the run at the end of
  the text is ``Hole(max_tokens=m)``, since its trailing slots may become EOS padding.
  Exact, so no dead ends; costly on big vocabularies (the default up to
  :data:`EXACT_VOCAB_LIMIT` tokens).
* ``"bytes"``: ``Hole(min_bytes=m)`` (every token spells at least one byte); the end run is
  ``Hole()``. A sound over-approximation of the slots (the default for real vocabularies).
  With ``fit=True`` (the default) a candidate is also refused when no witness at hand
  (the check's own, else a shortest one), spelled in the fewest tokens, fits in the slots
  of every run: byte holes cannot see that ten slots will not hold
  ``", "age": 0, "color": "red"}``.
* ``"additive"``: ``Hole()`` for every run (the paper's semantics: a gap is any string,
  and the canvas grows where it must).

EOS: a committed EOS at slot ``j`` ends the text there; every slot after it becomes EOS
padding (an end anchor). EOS is proposable only in the run at the end of the text (nothing
committed after it). The masked run before it stays the end run (``Hole(max_tokens=)``
exact, ``Hole()`` otherwise), so EOS may still come earlier.

A fixed canvas (exact or bytes) may still reach a slot where no token fits: the budget
ran out (exact), or the bytes over-approximation admitted a canvas its slots cannot spell
(one slot left where ``", "age": 0`` must go). Such a *dead end* never yields invalid
text: the run is completed from the Infiller's witness (its filling, spelled in the
fewest vocabulary tokens), so the canvas grows or shrinks there. ``stats.dead_ends``,
``stats.grown`` and ``stats.shrunk`` count them (with additive holes the same completion is
the semantics, counted in ``stats.completions`` only).
"""

from __future__ import annotations

import json
import math
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, GramgenError
from ..grammar import Grammar
from ..runtime import CompiledGrammar
from ..runtime.infiller import Hole, Infiller
from .api import target_for
from .lm import _config_context_length, context_length, never_ids

__all__ = ["CallableDiffusionLM", "DiffusionLM", "DiffusionResult", "DiffusionStats",
           "TransformersDiffusionLM", "generate_diffusion"]

Schedule = Literal["confidence", "random", "blocks"]
CanvasMode = Literal["exact", "bytes", "additive"]
DiffusionFinish = Literal["eos", "length", "dead_end"]

#: ``canvas=None`` decodes exactly (token-count holes) for vocabularies up to this size
EXACT_VOCAB_LIMIT = 1024
#: with ``fit``, candidates of one slot that may be feasible but not fit before the slot
#: waits (each costs a witness, far dearer than a check)
FIT_TRIES = 3
#: block size of ``schedule="blocks"`` when none is given (LLaDA's default)
DEFAULT_BLOCK_SIZE = 32

_MASKED = -1     # a slot not committed yet
_END = -2        # a slot after (or at) a committed EOS


# -- models ---------------------------------------------------------------------------------

@runtime_checkable
class DiffusionLM(Protocol):
    """A masked diffusion LM: logits for every position of whole canvases.

    ``mask_token_id`` is the id the model reads at masked slots; ``context_length`` (int or
    None) the most positions it attends to. ``logits`` returns ``[len(canvases), len,
    width]`` (numpy or torch; ``width`` may differ from ``vocab.size``: extra columns are
    dropped, missing ones never proposed). Canvases of one call have equal lengths. A model
    may also have ``prompt_ids(text) -> list[int]`` to take string prompts.
    """

    vocab: Vocabulary
    mask_token_id: int
    context_length: int | None

    def logits(self, canvases: Sequence[Sequence[int]]) -> Any: ...


class CallableDiffusionLM:
    """A diffusion LM from a plain function ``fn(canvas_ids) -> logits [len, width]``
    (numpy or torch): scripted and random models for tests and benchmarks.

    ``calls`` counts the canvases scored.
    """

    def __init__(self, fn: Callable[[list[int]], Any], vocab: Vocabulary, mask_token_id: int, *,
                 context_length: int | None = None):
        if not callable(fn):
            raise ConfigurationError(f"fn must be callable, not {type(fn).__name__}")
        _check_mask_id(mask_token_id, vocab)
        self.fn = fn
        self.vocab = vocab
        self.mask_token_id = int(mask_token_id)
        self.context_length = context_length
        self.calls = 0

    def logits(self, canvases: Sequence[Sequence[int]]) -> Any:
        rows = [self.fn(list(c)) for c in canvases]
        self.calls += len(rows)
        if rows and hasattr(rows[0], "detach"):
            import torch

            return torch.stack(rows)
        return np.stack([np.asarray(r) for r in rows])


class TransformersDiffusionLM:
    """A transformers model whose forward gives per-position logits over its input:
    an ``AutoModelForMaskedLM`` (BERT, ModernBERT, ...) or a LLaDA-style model
    (``model(input_ids).logits``, bidirectional attention, no cache).

    ``shifted=True`` is for Dream-style models, trained so that position ``i`` is predicted
    at ``i - 1`` (the logits are shifted right by one, the first row repeated, as Dream's
    own sampler does). ``vocab`` defaults to the tokenizer's; ``mask_token_id`` to the
    tokenizer's ``mask_token_id``, then the config's. Inputs go to the device of the
    model's weights (CPU or CUDA), logits stay there. ``forward_passes`` counts the passes.
    """

    def __init__(self, hf_model: Any, vocab: Vocabulary | None = None, *, tokenizer: Any = None,
                 mask_token_id: int | None = None, shifted: bool = False,
                 context_length: int | None = None):
        if vocab is None:
            if tokenizer is None:
                raise ConfigurationError("give vocab= or tokenizer= (the vocabulary is read from it)")
            vocab = Vocabulary.from_huggingface(tokenizer)
        if mask_token_id is None:
            mask_token_id = getattr(tokenizer, "mask_token_id", None)
        if mask_token_id is None:
            mask_token_id = getattr(getattr(hf_model, "config", None), "mask_token_id", None)
        if mask_token_id is None:
            raise ConfigurationError("no mask token: the tokenizer and the model's config name none; "
                                     "give mask_token_id= (the id the model was trained to read as "
                                     "a masked slot)")
        _check_mask_id(mask_token_id, vocab)
        if not isinstance(shifted, bool):
            raise ConfigurationError(f"shifted must be True or False, not {shifted!r}")
        self.hf_model = hf_model
        hf_model.eval()
        self.vocab = vocab
        self.tokenizer = tokenizer
        self.mask_token_id = int(mask_token_id)
        self.shifted = shifted
        self.context_length = (context_length if context_length is not None
                               else _config_context_length(getattr(hf_model, "config", None)))
        self.forward_passes = 0

    @property
    def device(self):
        """The device of the model's weights; canvases are put there."""
        return next(self.hf_model.parameters()).device

    def prompt_ids(self, text: str) -> list[int]:
        """``text`` tokenized with the tokenizer's own special tokens (give ids to control it)."""
        if self.tokenizer is None:
            raise ConfigurationError("this TransformersDiffusionLM has no tokenizer: give the prompt "
                                     "as token ids, or tokenizer= when wrapping the model")
        return [int(t) for t in self.tokenizer(text)["input_ids"]]

    def logits(self, canvases: Sequence[Sequence[int]]) -> Any:
        import torch

        lengths = {len(c) for c in canvases}
        if len(lengths) > 1:
            return torch.cat([self.logits([c]) for c in canvases])
        ids = torch.tensor([list(c) for c in canvases], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            out = self.hf_model(input_ids=ids)
        self.forward_passes += 1
        logits = out.logits if hasattr(out, "logits") else out[0]
        if self.shifted:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits


def _check_mask_id(mask_token_id, vocab: Vocabulary) -> None:
    if not isinstance(vocab, Vocabulary):
        raise ConfigurationError(f"vocab must be a gramgen.Vocabulary, not {type(vocab).__name__}")
    if (isinstance(mask_token_id, bool) or not isinstance(mask_token_id, Integral)
            or not 0 <= int(mask_token_id) < vocab.size):
        raise ConfigurationError(f"mask_token_id must be a token id in [0, {vocab.size}), "
                                 f"not {mask_token_id!r}")


# -- results ----------------------------------------------------------------------------------

@dataclass
class DiffusionStats:
    """Where the work of one diffusion decode went."""

    prompt_tokens: int = 0
    #: denoising steps run (one forward pass each; fewer than ``steps=`` when EOS padding
    #: filled the canvas early)
    steps: int = 0
    forward_passes: int = 0
    #: tokens the model committed (EOS included; padding after it and witness tokens not)
    committed: int = 0
    #: feasibility questions asked of the Infiller (one per candidate checked)
    checks: int = 0
    #: Infiller masks computed (exact canvases, after ``max_tries`` refusals)
    masks: int = 0
    #: candidates refused because they left the canvas infeasible
    rejections: int = 0
    #: of the rejections, candidates a byte canvas admits but whose witness did not fit
    #: the slots (``canvas="bytes"``: see the module docstring)
    unfit: int = 0
    #: runs filled from a witness because no token fitted their next slot
    completions: int = 0
    #: of them, those on a fixed canvas (``"exact"`` and ``"bytes"``): the slots could not
    #: hold a completion (with ``"additive"`` holes a run may take any number of tokens,
    #: so filling it from a witness is the semantics, not a dead end)
    dead_ends: int = 0
    #: slots the completions added to / removed from the canvas
    grown: int = 0
    shrunk: int = 0
    #: wall-clock seconds of the call, and of them the constraint's (segments and checks)
    seconds: float = 0.0
    constraint_seconds: float = 0.0
    #: per committed token, the constraint seconds spent to commit it (its checks)
    token_check_seconds: list[float] = field(default_factory=list)


@dataclass
class DiffusionResult:
    """One diffusion output.

    ``text`` is the canvas's bytes up to the first EOS, decoded as UTF-8; ``tokens`` the
    canvas's token ids without EOS padding; ``value`` the parsed JSON (or pydantic
    instance) for ``schema=``. ``finish_reason``: ``"eos"`` (the model committed EOS
    before the canvas's end), ``"length"`` (the text fills the canvas), ``"dead_end"``
    (some run was completed from a witness: still a valid output). ``trace`` (with
    ``trace=True``) holds the canvas after every commit: token ids, None for a masked
    slot, the EOS id for padding.
    """

    text: str
    tokens: list[int]
    value: Any
    finish_reason: DiffusionFinish
    stats: DiffusionStats
    eos_token: int | None = None
    #: why a schema output has no ``value`` (the JSON parser disagreed), else None
    error: str | None = None
    trace: list[tuple[int | None, ...]] | None = None


# -- canvases as segments ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Run:
    start: int      # first slot of the masked run
    end: int        # one past its last slot
    segment: int    # index of its hole in the segments
    tail: bool      # whether it ends the text (its trailing slots may become EOS)


def _end_of(slots: list[int]) -> int:
    """Where the text ends: the first EOS slot, or the canvas's length."""
    try:
        return slots.index(_END)
    except ValueError:
        return len(slots)


def _segments(slots: list[int], tokens: tuple[bytes, ...], mode: str, Hole) -> tuple[list, list[_Run]]:
    """The canvas as Infiller segments (committed runs as bytes, masked runs as holes),
    and the masked runs in order."""
    end = _end_of(slots)
    segments: list = []
    runs: list[_Run] = []
    text = bytearray()
    i = 0
    while i < end:
        t = slots[i]
        if t != _MASKED:
            text += tokens[t]
            i += 1
            continue
        j = i
        while j < end and slots[j] == _MASKED:
            j += 1
        if text:
            segments.append(bytes(text))
            text.clear()
        tail = j == end
        m = j - i
        if mode == "exact":
            hole = Hole(max_tokens=m) if tail else Hole(tokens=m)
        elif mode == "bytes" and not tail:
            hole = Hole(min_bytes=m)
        else:
            hole = Hole()
        runs.append(_Run(i, j, len(segments), tail))
        segments.append(hole)
        i = j
    if text or not segments:
        segments.append(bytes(text))
    return segments, runs


def _placed(slots: list[int], pos: int, token: int, eos: bool) -> list[int]:
    """The canvas after committing ``token`` at ``pos`` (an EOS ends the text there)."""
    after = list(slots)
    if eos:
        for k in range(pos, len(after)):
            after[k] = _END
    else:
        after[pos] = token
    return after


def _run_at(runs: list[_Run], pos: int) -> _Run | None:
    for run in runs:
        if run.start <= pos < run.end:
            return run
    return None


# -- spelling a witness's filling in tokens ----------------------------------------------------

class _Speller:
    """Spells bytes in the fewest non-special vocabulary tokens (a shortest-path split)."""

    def __init__(self, vocab: Vocabulary):
        self.ids: dict[bytes, int] = {}
        for i, b in enumerate(vocab.tokens):
            if b and i not in vocab.special_ids and b not in self.ids:
                self.ids[b] = i
        self.longest = max((len(b) for b in self.ids), default=0)

    def spell(self, data: bytes) -> list[int] | None:
        """The token ids, or None when some byte has no token."""
        n = len(data)
        best = [0] + [math.inf] * n
        back = [0] * (n + 1)
        for i in range(n):
            if best[i] == math.inf:
                continue
            for k in range(1, min(self.longest, n - i) + 1):
                if best[i] + 1 < best[i + k] and data[i:i + k] in self.ids:
                    best[i + k] = best[i] + 1
                    back[i + k] = k
        if best[n] == math.inf:
            return None
        out = []
        while n:
            k = back[n]
            out.append(self.ids[data[n - k:n]])
            n -= k
        return out[::-1]


_spellers: "weakref.WeakKeyDictionary[Vocabulary, _Speller]" = weakref.WeakKeyDictionary()


def _speller(vocab: Vocabulary) -> _Speller:
    found = _spellers.get(vocab)
    if found is None:
        found = _spellers[vocab] = _Speller(vocab)
    return found


# -- proposals: the model's candidates per masked slot, best first -----------------------------

class _Proposals:
    """For one forward pass: per masked row, up to ``tries`` candidate ids best first (by
    logit when greedy; by logit / T + Gumbel noise when sampling, i.e. sampling without
    replacement, which is "zero the refused token, renormalise, draw again"), their
    confidence, and the full row on demand (for the mask fallback)."""

    def __init__(self, logits, rows: list[int], keys: list[int], vocab: Vocabulary,
                 never: np.ndarray, temperature: float, tries: int, rng: np.random.Generator):
        """``rows``: the rows of ``logits[0]`` to read; ``keys``: the slot each stands for."""
        self.rows = {key: k for k, key in enumerate(keys)}
        self.temperature = temperature
        self.rng = rng
        size = vocab.size
        tries = max(1, min(tries, size))
        if hasattr(logits, "detach"):
            import torch

            x = logits[0, rows].float()
            width = x.shape[-1]
            if width >= size:
                x = x[:, :size].clone()
            else:
                x = torch.cat([x, x.new_full((x.shape[0], size - width), -math.inf)], dim=1)
            if len(never):
                x[:, torch.as_tensor(never, device=x.device)] = -math.inf
            if temperature > 0:
                g = torch.Generator(device=x.device).manual_seed(int(rng.integers(2**62)))
                u = torch.rand(x.shape, generator=g, device=x.device).clamp_(1e-20, 1.0)
                scores = x / temperature - torch.log(-torch.log(u))
            else:
                scores = x
            top = torch.topk(scores, tries, dim=1)
            probs = torch.softmax(x, dim=1)
            self.confidence = np.nan_to_num(probs.gather(1, top.indices[:, :1])[:, 0].cpu().numpy())
            self.ids = top.indices.cpu().numpy()
            self.ok = torch.isfinite(top.values).cpu().numpy()
            self._x = x
        else:
            x = np.asarray(logits)[0, rows].astype(np.float64)
            width = x.shape[-1]
            if width >= size:
                x = x[:, :size].copy()
            else:
                x = np.concatenate([x, np.full((x.shape[0], size - width), -np.inf)], axis=1)
            if len(never):
                x[:, never] = -np.inf
            if temperature > 0:
                scores = x / temperature + rng.gumbel(size=x.shape)
            else:
                scores = x
            part = np.argpartition(-scores, tries - 1, axis=1)[:, :tries] if tries < size else \
                np.tile(np.arange(size), (len(rows), 1))
            order = np.take_along_axis(scores, part, 1)
            sort = np.argsort(-order, axis=1, kind="stable")
            self.ids = np.take_along_axis(part, sort, 1)
            self.ok = np.isfinite(np.take_along_axis(order, sort, 1))
            top = np.max(x, axis=1, keepdims=True)
            with np.errstate(invalid="ignore"):
                e = np.exp(x - np.where(np.isfinite(top), top, 0.0))
                conf = np.take_along_axis(e, self.ids[:, :1], 1)[:, 0] / e.sum(axis=1)
            self.confidence = np.nan_to_num(conf)
            self._x = x

    def candidates(self, row: int) -> list[int]:
        """The best ``tries`` candidates of the slot scored at ``row`` (finite logits only)."""
        k = self.rows[row]
        return [int(t) for t, ok in zip(self.ids[k], self.ok[k]) if ok]

    def ranked(self, row: int | None, allowed: np.ndarray) -> list[int]:
        """The allowed ids of ``row``, best first (finite logits first; a fresh draw when
        sampling). ``row`` None (a slot made after the forward pass): allowed ids in order."""
        ids = np.flatnonzero(allowed)
        if row is None or len(ids) == 0:
            return [int(t) for t in ids]
        x = self._x[self.rows[row]]
        x = x.float().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
        s = x[ids].astype(np.float64)
        if self.temperature > 0:
            s = s / self.temperature + self.rng.gumbel(size=s.shape)
        s = np.where(np.isfinite(s), s, -1e300)
        return [int(t) for t in ids[np.argsort(-s, kind="stable")]]


# -- the loop ---------------------------------------------------------------------------------

class _Decoder:
    """One canvas being denoised: the slots, the constraint, the counters."""

    def __init__(self, model: DiffusionLM, prompt: list[int], length: int, infiller,
                 mode: str, tries: int, temperature: float, rng: np.random.Generator,
                 trace: bool, fit: bool = False):

        self.Hole = Hole
        self.model = model
        self.vocab = model.vocab
        self.tokens = self.vocab.tokens
        self.eos = frozenset(self.vocab.eos_token_ids)
        self.eos_id = self.vocab.eos_token_ids[0] if self.vocab.eos_token_ids else None
        self.prompt = prompt
        self.slots = [_MASKED] * length
        self.infiller = infiller
        self.mode = mode
        self.fit = fit and mode == "bytes" and infiller is not None
        self.tries = tries
        self.temperature = temperature
        self.rng = rng
        self.never = np.union1d(never_ids(self.vocab), [model.mask_token_id]).astype(np.int64)
        self.stats = DiffusionStats(prompt_tokens=len(prompt))
        self.trace: list | None = [] if trace else None
        #: per slot, its row in the last forward pass (None: made by a completion since)
        self.row_of: list[int | None] = list(range(length))
        #: (slot, token) pairs refused since the last completion: the canvas only ever
        #: narrows (each commit is a subset of the texts before), so they stay refused
        self.refused: set[tuple[int, int]] = set()
        self.proposals: _Proposals | None = None
        self._matcher: tuple[list[int], Any] | None = None

    # -- the canvas

    def masked(self) -> list[int]:
        return [i for i, t in enumerate(self.slots) if t == _MASKED]

    def position(self, row: int) -> int | None:
        """Where the slot scored at ``row`` of the last forward pass is now (None: gone)."""
        if row < len(self.row_of) and self.row_of[row] == row:
            return row
        try:
            return self.row_of.index(row)
        except ValueError:
            return None

    def fits_context(self) -> bool:
        limit = context_length(self.model)
        return limit is None or len(self.prompt) + len(self.slots) <= limit

    def forward(self) -> None:
        fill = self.eos_id if self.eos_id is not None else self.model.mask_token_id
        mask = self.model.mask_token_id
        canvas = [*self.prompt, *(mask if t == _MASKED else fill if t == _END else t for t in self.slots)]
        logits = self.model.logits([canvas])
        masked = self.masked()
        self.proposals = _Proposals(logits, [len(self.prompt) + p for p in masked], masked,
                                    self.vocab, self.never, self.temperature, self.tries, self.rng)
        self.row_of = list(range(len(self.slots)))
        self.stats.forward_passes += 1
        self.stats.steps += 1

    def _record(self) -> None:
        if self.trace is not None:
            self.trace.append(tuple(None if t == _MASKED else self.eos_id if t == _END else t
                                    for t in self.slots))

    def _commit(self, pos: int, token: int, seconds: float) -> None:
        self.slots = _placed(self.slots, pos, token, token in self.eos)
        self.stats.committed += 1
        self.stats.token_check_seconds.append(seconds)
        self._record()

    def _in_tail(self, pos: int) -> bool:
        end = _end_of(self.slots)
        return all(t == _MASKED for t in self.slots[pos:end])

    # -- committing one slot

    def place(self, pos: int, final: bool) -> None:
        """Commit a token at masked slot ``pos``, or leave it masked for a later step.

        The model's best candidates first, each checked (lazy rejection). If all are
        refused and ``pos`` is the leftmost masked slot (always so at the last step, which
        settles slots left to right), the candidates are the tokens the grammar allows
        after the committed text before it (a left-to-right matcher's mask: cheap, and a
        superset), best first, each checked, then the first token of a witness's filling;
        on an exact canvas (small vocabularies), the Infiller's own mask, at any slot. At
        the last step a slot where nothing fits is a dead end: its run is completed from a
        witness."""
        row = self.row_of[pos]
        first = self.proposals.candidates(row) if row is not None else []
        t0 = time.perf_counter()
        if self.infiller is None:
            tried = self._unconstrained(pos, first) or self._unconstrained(
                pos, self.proposals.ranked(row, self._any()))
            if not tried:
                raise GramgenError("no token can be committed: every id is special")
            return
        leftmost = _MASKED not in self.slots[:pos]
        allowed = self._prefix_mask(pos) if leftmost else None
        if allowed is not None:
            # with only committed text before it, a left-to-right matcher refuses most bad
            # candidates in microseconds (what it allows is still checked)
            kept = [t for t in first if allowed[t]]
            self.stats.rejections += len(first) - len(kept)
            first = kept
        if self._try(pos, first, t0):
            return
        if not (leftmost or self.mode == "exact"):
            self.stats.constraint_seconds += time.perf_counter() - t0
            return
        cap = 4 * self.tries
        if allowed is not None:
            if not allowed.any():      # nothing continues the text before: dead
                return self._dead(pos, t0)
            if self._try(pos, self.proposals.ranked(row, allowed)[:cap], t0):
                return
        segments, runs = _segments(self.slots, self.tokens, self.mode, self.Hole)
        run = _run_at(runs, pos)
        if leftmost and self._try(pos, self._witness_first(segments, run), t0):
            return
        if self.mode != "exact":
            # the Infiller's own mask parses the rest of the canvas once per token that can
            # start there: on a real vocabulary (what byte canvases are for) that can take
            # minutes, so these stop here: a dead end at the last step, else a later step
            if final:
                return self._dead(pos, t0)
            self.stats.constraint_seconds += time.perf_counter() - t0
            return
        try:
            allowed = np.asarray(self.infiller.mask(segments, run.segment, at=pos - run.start),
                                 dtype=bool).copy()
            self.stats.masks += 1
        except ConfigurationError:   # a canvas the mask does not take: check candidates
            allowed = None
        if allowed is None:
            ranked = self.proposals.ranked(row, self._any())[:4 * cap]
        else:
            allowed[self.never] = False
            ranked = self.proposals.ranked(row, allowed)
        if self._try(pos, ranked, t0):
            return
        if final or (allowed is not None and not allowed.any()):
            return self._dead(pos, t0)
        self.stats.constraint_seconds += time.perf_counter() - t0

    def _witness_first(self, segments: list, run: _Run) -> list[int]:
        """The first token of a witness's filling of ``run`` (EOS for an empty end run):
        one candidate that often fits where the model's all failed."""
        found = self.infiller.check(segments)
        self.stats.checks += 1
        if not found.feasible:
            return []
        k = sum(1 for s in segments[:run.segment] if isinstance(s, self.Hole))
        spelled = _speller(self.vocab).spell(found.fillings[k])
        if spelled:
            return spelled[:1]
        return [self.eos_id] if run.tail and spelled == [] and self.eos_id is not None else []

    def _dead(self, pos: int, t0: float) -> None:
        self.stats.constraint_seconds += time.perf_counter() - t0
        segments, runs = _segments(self.slots, self.tokens, self.mode, self.Hole)
        self.complete(_run_at(runs, pos), segments)

    def _prefix_mask(self, pos: int) -> np.ndarray | None:
        """What the grammar allows after the committed slots before ``pos`` (all committed),
        from a left-to-right matcher kept across calls (that text only ever grows)."""
        tokens = self.slots[:pos]
        held, matcher = self._matcher if self._matcher is not None else ([], None)
        try:
            if matcher is None or tokens[:len(held)] != held:
                held, matcher = [], self.infiller.compiled.matcher()
            matcher.advance_many(tokens[len(held):])
        except GramgenError:   # (cannot happen for a feasible canvas; be safe)
            self._matcher = None
            return None
        self._matcher = (tokens, matcher)
        allowed = matcher.mask()
        allowed[self.never] = False
        return allowed

    def _any(self) -> np.ndarray:
        allowed = np.ones(self.vocab.size, dtype=bool)
        allowed[self.never] = False
        return allowed

    def _try(self, pos: int, candidates: list[int], t0: float) -> bool:
        """Commit the first candidate that keeps the canvas feasible (lazy rejection); with
        ``fit``, give up after FIT_TRIES candidates that are feasible but do not fit (each
        costs a witness: the slot waits for a later step or the next fallback)."""
        in_tail = None
        unfit = 0
        for token in candidates:
            if (pos, token) in self.refused:
                continue
            is_eos = token in self.eos
            if is_eos:
                if in_tail is None:
                    in_tail = self._in_tail(pos)
                if not in_tail:
                    continue      # committed text after it: it cannot end the text
            segments, runs = _segments(_placed(self.slots, pos, token, is_eos), self.tokens,
                                       self.mode, self.Hole)
            self.stats.checks += 1
            found = self.infiller.check(segments)
            if found.feasible:
                if not self.fit or self._fits(runs, found):
                    spent = time.perf_counter() - t0
                    self.stats.constraint_seconds += spent
                    self._commit(pos, token, spent)
                    return True
                self.stats.unfit += 1
                unfit += 1
            self.refused.add((pos, token))
            self.stats.rejections += 1
            if unfit >= FIT_TRIES:
                break
        return False

    def _fits(self, runs: list[_Run], found) -> bool:
        """Whether some witness's filling of every run, spelled in the fewest tokens, takes
        no more slots than the run has: a cheap sign that the fixed canvas can still hold
        a completion, where byte holes only know that each slot holds a byte or more. The
        check's own witness first (free), then a shortest one (a second parse)."""
        speller = _speller(self.vocab)

        def fit(fillings) -> bool:
            for run, filling in zip(runs, fillings):
                if len(filling) > run.end - run.start:   # (a filling no longer than its run fits)
                    spelled = speller.spell(filling)
                    if spelled is None or len(spelled) > run.end - run.start:
                        return False
            return True

        return fit(found.any_fillings()) or fit(found.fillings)

    def _unconstrained(self, pos: int, candidates: list[int]) -> bool:
        in_tail = None
        for token in candidates:
            if token in self.eos:
                if in_tail is None:
                    in_tail = self._in_tail(pos)
                if not in_tail:
                    continue
            self._commit(pos, token, 0.0)
            return True
        return False

    def complete(self, run: _Run, segments: list) -> None:
        """A dead end: put the witness's filling of ``run`` in its slots, spelled in tokens."""
        t0 = time.perf_counter()
        found = self.infiller.check(segments, budget=None)   # a witness exists: find it
        self.stats.checks += 1
        if not found.feasible:
            raise GramgenError("internal error: a committed canvas has no witness")
        k = sum(1 for s in segments[:run.segment] if isinstance(s, self.Hole))
        found_bytes = found.fillings[k]
        spelled = _speller(self.vocab).spell(found_bytes)
        if spelled is None:
            # a byte the vocabulary cannot spell (a vocabulary without every byte): ask
            # for a filling of whole tokens instead, with room for ever more of them
            bound = 2 * (run.end - run.start) + 8
            while spelled is None:
                if bound > 4096:
                    raise GramgenError(
                        f"a dead end cannot be completed: the witness fills the run with "
                        f"{found_bytes!r}, which this vocabulary cannot spell, and no filling of "
                        "whole tokens was found (canvas='bytes' and 'additive' need a vocabulary "
                        "that spells every byte the grammar uses; use canvas='exact')")
                tokens_only = list(segments)
                tokens_only[run.segment] = self.Hole(max_tokens=bound)
                found = self.infiller.check(tokens_only, budget=None)
                self.stats.checks += 1
                if found.feasible:
                    spelled = _speller(self.vocab).spell(found.fillings[k])
                bound *= 2
        m = run.end - run.start
        new = spelled
        if run.tail and len(spelled) < m:
            new = spelled + [_END] * (m - len(spelled))
        self.slots[run.start:run.end] = new
        self.row_of[run.start:run.end] = [None] * len(new)
        self.refused.clear()     # slots moved
        self.stats.completions += 1
        if self.mode != "additive":
            self.stats.dead_ends += 1
        self.stats.grown += max(0, len(new) - m)
        self.stats.shrunk += max(0, m - len(new))
        self.stats.constraint_seconds += time.perf_counter() - t0
        self._record()


def generate_diffusion(model: DiffusionLM, prompt: str | Sequence[int] = (), *, schema: Any = None,
                       grammar: Grammar | CompiledGrammar | None = None, lark: str | None = None,
                       gbnf: str | None = None, regex: str | None = None, length: int = 64,
                       steps: int | None = None, schedule: Schedule = "confidence",
                       block_size: int | None = None, temperature: float = 0.0,
                       seed: int | None = None, canvas: CanvasMode | None = None,
                       budget: int | None = None, max_tries: int = 16, fit: bool = True,
                       trace: bool = False) -> DiffusionResult:
    """Decode ``length`` masked slots after ``prompt`` with a masked diffusion LM, every
    committed state completable to a word of the constraint (give at most one of
    ``schema``, ``grammar``, ``lark``, ``gbnf``, ``regex``; none: the unconstrained loop).

    ``prompt``: token ids, or a string when the model has ``prompt_ids`` (a
    :class:`TransformersDiffusionLM` with its tokenizer); it is read, never constrained.
    ``steps`` (default ``length``): forward passes; each commits about ``masked / steps
    left`` slots, chosen by ``schedule``: ``"confidence"`` (highest top probability first,
    LLaDA's low-confidence remasking), ``"random"``, or ``"blocks"`` (left-to-right blocks
    of ``block_size`` slots, by confidence within a block; semi-autoregressive).
    ``temperature`` 0 is greedy; above 0 each slot samples from the model's softmax at
    that temperature (``seed`` makes it reproducible). A refused candidate is dropped and
    the next best (or the next draw) is checked, up to ``max_tries``; a slot with none
    stays masked for a later step. At the last step the slots left are settled left to
    right from the Infiller's mask. ``canvas`` (see the module docstring) picks the hole
    semantics: ``"exact"``, ``"bytes"`` or ``"additive"``; default exact for vocabularies
    up to 1,024 tokens, else bytes. ``fit`` (byte canvases): also refuse a candidate when
    neither the check's own witness nor a shortest one, spelled in the fewest tokens, fits
    in the slots of every run (a second parse for most commits; far fewer dead ends). ``budget``: the Infiller's work budget
    per check (exceeded: the candidate is refused). ``trace=True`` keeps every committed
    canvas.
    Bad arguments raise :class:`~gramgen.ConfigurationError` before any model work.
    """

    started = time.perf_counter()
    if not isinstance(model, DiffusionLM):
        raise ConfigurationError(f"model must be a diffusion LM (vocab, mask_token_id, context_length, "
                                 f"logits(canvases)); wrap a transformers model in "
                                 f"TransformersDiffusionLM or a function in CallableDiffusionLM, not "
                                 f"{type(model).__name__}")
    vocab = model.vocab
    length = _positive_int(length, "length")
    steps = length if steps is None else _positive_int(steps, "steps")
    if steps > length:
        raise ConfigurationError(f"steps={steps} exceeds length={length}: each step commits at "
                                 "least one slot (use steps <= length)")
    if schedule not in ("confidence", "random", "blocks"):
        raise ConfigurationError(f"schedule must be 'confidence', 'random' or 'blocks', not {schedule!r}")
    if block_size is not None:
        if schedule != "blocks":
            raise ConfigurationError("block_size= is for schedule='blocks'")
        block_size = _positive_int(block_size, "block_size")
    if schedule == "blocks" and block_size is None:
        block_size = min(DEFAULT_BLOCK_SIZE, length)
    if isinstance(temperature, bool) or not isinstance(temperature, Real) or not temperature >= 0 \
            or not math.isfinite(temperature):
        raise ConfigurationError(f"temperature must be a finite number >= 0, not {temperature!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral)
                             or not 0 <= seed < 2**63):
        raise ConfigurationError(f"seed must be an int from 0 to 2**63 - 1, or None, not {seed!r}")
    if canvas is None:
        canvas = "exact" if vocab.size <= EXACT_VOCAB_LIMIT else "bytes"
    if canvas not in ("exact", "bytes", "additive"):
        raise ConfigurationError(f"canvas must be 'exact', 'bytes' or 'additive', not {canvas!r}")
    max_tries = _positive_int(max_tries, "max_tries")
    if not isinstance(trace, bool):
        raise ConfigurationError(f"trace must be True or False, not {trace!r}")
    if not isinstance(fit, bool):
        raise ConfigurationError(f"fit must be True or False, not {fit!r}")
    prompt_ids = _prompt_ids(model, prompt)
    context = context_length(model)
    if context is not None and len(prompt_ids) + length > context:
        raise ConfigurationError(f"the prompt ({len(prompt_ids)} tokens) plus length={length} exceeds "
                                 f"the model's context of {context} positions: use length <= "
                                 f"{max(context - len(prompt_ids), 0)} or a shorter prompt")
    given = {k: v for k, v in dict(schema=schema, grammar=grammar, lark=lark, gbnf=gbnf,
                                   regex=regex).items() if v is not None}
    target = None
    infiller = None
    if given:
        target = target_for(vocab, **given)
        infiller = _infiller(target.compiled, budget)
    rng = np.random.default_rng(seed)
    dec = _Decoder(model, prompt_ids, length, infiller, canvas, max_tries,
                   float(temperature), rng, trace, fit)
    if infiller is not None:
        t0 = time.perf_counter()
        segments, runs = _segments(dec.slots, dec.tokens, canvas, dec.Hole)
        dec.stats.checks += 1
        found = infiller.check(segments)
        ok = found.feasible and (not dec.fit or dec._fits(runs, found))
        dec.stats.constraint_seconds += time.perf_counter() - t0
        if not ok:
            # the canvas is too short for any word (or, with fit, for the shortest one), or
            # the budget ran out: the whole canvas comes from a witness, before any model work
            if not infiller.check([dec.Hole()], budget=None).feasible:
                raise ConfigurationError("the constraint accepts no text at all")
            dec.complete(_Run(0, length, 0, True), [dec.Hole()])
    _denoise(dec, steps, schedule, block_size)
    dec.stats.seconds = time.perf_counter() - started
    return _result(dec, target)


def _denoise(dec: _Decoder, steps: int, schedule: str, block_size: int | None) -> None:
    for step in range(steps):
        masked = dec.masked()
        if not masked:
            return
        if not dec.fits_context():
            break         # a completion grew the canvas past the model: settle with what we have
        left = steps - step
        count = -(-len(masked) // left)
        dec.forward()
        chosen = _choose(masked, dec.proposals, count, schedule, block_size, dec.rng)
        for row in chosen:
            pos = dec.position(row)
            if pos is not None and dec.slots[pos] == _MASKED:   # (not padding of a new EOS)
                dec.place(pos, final=False)
    while True:          # the last step: settle what is left, left to right
        masked = dec.masked()
        if not masked:
            return
        dec.place(masked[0], final=True)


def _choose(masked: list[int], proposals: _Proposals, count: int, schedule: str,
            block_size: int | None, rng: np.random.Generator) -> list[int]:
    """Which masked slots this step tries to commit, in the order to try them."""
    if schedule == "random":
        return [masked[i] for i in rng.permutation(len(masked))[:count]]
    conf = proposals.confidence
    if schedule == "confidence":
        order = np.argsort(-conf, kind="stable")
    else:
        blocks = np.array([p // block_size for p in masked])
        order = np.lexsort((-conf, blocks))
    return [masked[i] for i in order[:count]]


def _result(dec: _Decoder, target) -> DiffusionResult:
    end = _end_of(dec.slots)
    ids = dec.slots[:end]
    data = b"".join(dec.tokens[t] for t in ids)
    text = data.decode("utf-8", errors="replace")
    if dec.stats.dead_ends:
        finish = "dead_end"
    elif end < len(dec.slots):
        finish = "eos"
    else:
        finish = "length"
    value, error = None, None
    if target is not None and target.is_json:
        try:
            value = json.loads(data.decode("utf-8"))
            if target.model is not None:
                value = target.model.model_validate(value)
        except Exception as exc:  # the grammar and the parser disagree: report, never hide
            error = f"{type(exc).__name__}: {exc}"
    return DiffusionResult(text=text, tokens=list(ids), value=value, finish_reason=finish,
                           stats=dec.stats, eos_token=dec.eos_id if end < len(dec.slots) else None,
                           error=error, trace=dec.trace)


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
    return int(value)


def _prompt_ids(model, prompt) -> list[int]:
    if isinstance(prompt, str):
        tokenize = getattr(model, "prompt_ids", None)
        if tokenize is None:
            raise ConfigurationError(f"a {type(model).__name__} has no tokenizer: give the prompt as "
                                     "token ids")
        return [int(t) for t in tokenize(prompt)]
    if not isinstance(prompt, (list, tuple)) or not all(
            isinstance(t, (Integral, np.integer)) and not isinstance(t, bool) for t in prompt):
        raise ConfigurationError(f"prompt must be a string or a list of token ids, not "
                                 f"{type(prompt).__name__}")
    bad = [int(t) for t in prompt if not 0 <= int(t) < model.vocab.size]
    if bad:
        raise ConfigurationError(f"the prompt holds token id {bad[0]}, outside the model's "
                                 f"vocabulary [0, {model.vocab.size})")
    return [int(t) for t in prompt]


_infiller_cache: "weakref.WeakKeyDictionary[CompiledGrammar, dict]" = weakref.WeakKeyDictionary()


def _infiller(cg: CompiledGrammar, budget: int | None):
    """The Infiller that checks candidates with ``budget``, kept per compiled grammar so its
    kept parses serve later calls too."""

    found = _infiller_cache.setdefault(cg, {})
    if budget not in found:
        found[budget] = Infiller(cg) if budget is None else Infiller(cg, budget=budget)
    return found[budget]
