"""Language models as generation sees them: contexts in, next-token logits out.

A :class:`LanguageModel` opens a :class:`Session`; a session scores a batch of *contexts*
(full token-id sequences: prompt followed by what was generated) and returns the logits of
their last positions. What a session keeps between calls is its business: the
transformers one (:class:`TransformersLM`) keeps the key/value cache of the rows it scored
last and, for each new context, feeds only the tokens after the longest prefix it holds
(a sequence grown by one sampled token and a run of forced ones, a particle copied by
resampling, a rollback to an earlier point). Nothing else in gramgen calls a transformers
model.

:class:`SyntheticLM` has explicit, cheap logits, so tests can enumerate its exact
distributions.
"""

from __future__ import annotations

import hashlib
import inspect
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._lru import LRU
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError

__all__ = ["LanguageModel", "Session", "SyntheticLM", "TransformersLM", "context_length",
           "log_softmax", "normalised_logprobs"]


@runtime_checkable
class Session(Protocol):
    """Scores contexts; may reuse work across calls of one generation."""

    def logits(self, contexts: Sequence[Sequence[int]], last: int = 1) -> Any:
        """Float tensor ``[len(contexts), last, width]``: the logits after each of the last
        ``last`` positions of every context (a torch tensor on the model's device)."""
        ...


@runtime_checkable
class LanguageModel(Protocol):
    """A causal LM: a vocabulary and sessions that score contexts.

    A model may also have ``context_length`` (int, or None when unknown): the most tokens
    (prompt and generated together) it can attend to. It is optional, so models written
    before it still satisfy the protocol; read it with :func:`context_length`.
    """

    vocab: Vocabulary

    def session(self) -> Session: ...


def context_length(lm: Any) -> int | None:
    """The model's ``context_length`` attribute, or None when it has none (or an unusable one)."""
    found = getattr(lm, "context_length", None)
    if isinstance(found, bool) or not isinstance(found, int) or found <= 0:
        return None
    return found


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64; rows of all ``-inf`` stay ``-inf``."""
    x = np.asarray(logits, dtype=np.float64)
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))


def never_ids(vocab: Vocabulary) -> np.ndarray:
    """Special ids other than EOS: never part of constrained text, and given probability
    0 by every model distribution gramgen samples from."""
    return np.array(sorted(set(vocab.special_ids) - set(vocab.eos_token_ids)), dtype=np.int64)


def normalised_logprobs(logits, vocab: Vocabulary, never: np.ndarray | None = None) -> np.ndarray:
    """float64 ``[rows, vocab.size]`` log-probabilities from ``[rows, width]`` logits
    (a torch tensor or an array): columns beyond the vocabulary dropped, missing ones
    ``-inf``, special ids other than EOS ``-inf``, then normalised."""
    if hasattr(logits, "detach"):
        logits = logits.detach().double().cpu().numpy()
    x = np.array(logits, dtype=np.float64, copy=True)
    width = x.shape[-1]
    if width > vocab.size:
        x = x[..., :vocab.size]
    elif width < vocab.size:
        x = np.concatenate([x, np.full(x.shape[:-1] + (vocab.size - width,), -np.inf)], axis=-1)
    x[..., never_ids(vocab) if never is None else never] = -np.inf
    return log_softmax(x)


class _NextLogprobs:
    """``next_logprobs(contexts)``: normalised float64 rows, through one long-lived session
    (so a context that extends one scored before only runs its new tokens)."""

    vocab: Vocabulary

    def next_logprobs(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """float64 ``[len(contexts), vocab.size]``: log P(next token | context), normalised,
        temperature 1, special ids other than EOS at ``-inf``."""
        if getattr(self, "_shared", None) is None:
            self._shared = self.session()
        if not contexts:
            return np.zeros((0, self.vocab.size))
        return normalised_logprobs(self._shared.logits(contexts)[:, -1], self.vocab)


# -- a model with explicit logits ---------------------------------------------------------

class SyntheticLM(_NextLogprobs):
    """An LM with explicit logits: ``logits_fn(context) -> logits[vocab.size]``.

    Cheap and exact, so tests can enumerate the model's distribution over a finite
    language. ``calls`` and ``contexts`` count batched calls and contexts scored.
    ``context_length`` is what the model claims to attend to (None: unlimited); its logits
    do not depend on it.
    """

    def __init__(self, vocab: Vocabulary, logits_fn: Callable[[tuple[int, ...]], np.ndarray], *,
                 context_length: int | None = None):
        self.vocab = vocab
        self._fn = logits_fn
        self.context_length = context_length
        self.calls = 0
        self.contexts = 0

    @classmethod
    def hashed(cls, vocab: Vocabulary, seed: int = 0, scale: float = 2.0,
               bias: dict[int, float] | None = None, *,
               context_length: int | None = None) -> SyntheticLM:
        """Logits drawn i.i.d. N(0, scale²) from a seeded hash of the context (plus a fixed
        per-token ``bias``): an arbitrary but reproducible context-dependent model."""
        bias_vec = np.zeros(vocab.size)
        for t, b in (bias or {}).items():
            bias_vec[t] = b

        def fn(context: tuple[int, ...]) -> np.ndarray:
            digest = hashlib.blake2b(struct.pack(f"<q{len(context)}q", seed, *context),
                                     digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            return scale * rng.standard_normal(vocab.size) + bias_vec

        return cls(vocab, fn, context_length=context_length)

    def session(self) -> _SyntheticSession:
        return _SyntheticSession(self)


class _SyntheticSession:
    forwarded = True

    def __init__(self, lm: SyntheticLM):
        self.lm = lm

    def logits(self, contexts: Sequence[Sequence[int]], last: int = 1):
        import torch

        lm = self.lm
        lm.calls += 1
        lm.contexts += len(contexts)
        out = np.empty((len(contexts), last, lm.vocab.size), dtype=np.float64)
        for i, ctx in enumerate(contexts):
            ctx = tuple(int(t) for t in ctx)
            if len(ctx) < last:
                raise ConfigurationError(f"logits for the last {last} positions of a context "
                                         f"of {len(ctx)} tokens")
            for j in range(last):
                row = np.array(lm._fn(ctx[:len(ctx) - last + 1 + j]), dtype=np.float64)
                if row.shape != (lm.vocab.size,):
                    raise ConfigurationError(f"logits_fn returned shape {row.shape}, "
                                             f"expected ({lm.vocab.size},)")
                out[i, j] = row
        return torch.from_numpy(out)


# -- transformers -------------------------------------------------------------------------

class TransformersLM(_NextLogprobs):
    """A Hugging Face causal LM. :meth:`forward` is the only place gramgen runs one.

    ``forward_passes`` and ``tokens_run`` count the forward passes made and the tokens fed
    to them (padding not counted). Logits stay on the model's device. The logits of the
    last ``memo_size`` contexts scored are kept (:attr:`memo`). ``context_length`` is the
    model's maximum number of positions from its config (None when the config names none).
    """

    def __init__(self, hf_model: Any, vocab: Vocabulary, *, memo_size: int = 64):
        self.hf_model = hf_model
        self.vocab = vocab
        hf_model.eval()
        self.forward_passes = 0
        self.tokens_run = 0
        #: context -> the logits after it, shared by this model's sessions: sampling the
        #: same prompt again (AWRS runs, SMC particles, repeated samples) reaches contexts
        #: scored before, which then need no forward pass; ``memo_size=0`` keeps none
        self.memo: LRU[tuple[int, ...], Any] = LRU(memo_size)
        #: the rows and cache a finished session left (see :meth:`session`)
        self._parked: tuple | None = None
        self._lock = threading.Lock()
        self._shared: KVSession | None = None
        params = _forward_parameters(hf_model)
        #: transformers 5 renamed ``past_key_values`` to ``cache``
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keeps_logits = "logits_to_keep" in params
        self.context_length = _config_context_length(getattr(hf_model, "config", None))

    @property
    def device(self):
        """The device of the model's weights; inputs are put there."""
        return next(self.hf_model.parameters()).device

    @property
    def vocab_width(self) -> int:
        """Number of logits the model produces per position (may exceed ``vocab.size``)."""
        head = self.hf_model.get_output_embeddings()
        if head is not None and getattr(head, "weight", None) is not None:
            return int(head.weight.shape[0])
        return int(self.hf_model.config.vocab_size)

    def session(self) -> KVSession:
        """A session that starts from the rows the last closed session left, if no other
        session took them: a new call on the same prompt feeds only what it adds."""
        with self._lock:
            parked, self._parked = self._parked, None
        return KVSession(self, parked)

    def forget(self) -> None:
        """Drop what this model keeps across calls (the memo of scored contexts and the rows
        a finished session left), so the next call pays for every forward pass it needs,
        as a call on a new prompt would (e.g. to time it)."""
        self.memo.clear()
        with self._lock:
            self._parked = None

    def _park(self, state: tuple) -> None:
        with self._lock:
            self._parked = state

    def forward(self, ids, attention, positions, cache, last: int):
        """Run the model on new token ids ``[B, k]`` after ``cache`` (None: nothing before),
        with the attention mask over cache and new columns and explicit positions.
        Returns (float logits ``[B, last, width]`` of the last positions, the cache)."""
        import torch

        if cache is None:   # a cache object, never None: no legacy tuples come back
            cache = _new_cache()
        kwargs: dict[str, Any] = dict(input_ids=ids, attention_mask=attention,
                                      position_ids=positions, use_cache=True)
        kwargs[self._cache_arg] = cache
        if self._keeps_logits:
            kwargs["logits_to_keep"] = last
        with torch.inference_mode():
            out = self.hf_model(**kwargs)
        self.forward_passes += 1
        self.tokens_run += int(attention[:, -ids.shape[1]:].sum())   # padding not counted
        new_cache = out["cache"] if "cache" in out else out["past_key_values"]
        return out.logits[:, -last:, :].float(), new_cache


#: config fields naming the most positions a model attends to, in the order tried
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length",
                   "seq_length", "n_ctx")


def _config_context_length(config) -> int | None:
    """The context length a transformers config declares (its text config's, for
    multimodal models), or None."""
    if config is None:
        return None
    try:
        config = config.get_text_config(decoder=True)
    except (AttributeError, TypeError):
        pass
    for field in _CONTEXT_FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _new_cache():
    """An empty cache of the class transformers' models expect (``DynamicCache``); passing
    it on the first call keeps models from returning the deprecated tuples of tensors."""
    from transformers import DynamicCache

    return DynamicCache()


def _forward_parameters(hf_model) -> set[str]:
    try:
        return set(inspect.signature(hf_model.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return set()


class KVSession:
    """The rows a :class:`TransformersLM` scored last, with their key/value cache.

    Each new context is matched to the row holding its longest prefix. The cache is
    reduced to those rows (a row may serve several contexts: particles copied by
    resampling; rows no context extends are dropped), the attention mask hides what a
    context does not share with its row (a rollback leaves a masked gap), and only the
    tokens after the shared prefix are fed, right-aligned, with explicit positions. When
    gaps fill more than half the cache it is compacted. The logits equal a fresh forward
    over each whole context up to floating-point reordering. :meth:`close` hands the rows
    to the model's next session.
    """

    #: compact the cache when it has this many columns and more than half are hidden
    COMPACT_AFTER = 256

    def __init__(self, lm: TransformersLM, state: tuple | None = None):
        self.lm = lm
        #: whether the last call ran the model (False: every context was in the memo)
        self.forwarded = False
        self._keys: list[tuple[int, ...]] = []
        self._columns: list[list[int]] = []   # per row: the cache column of each token
        self._cache = None
        self._attention = None                # long [rows, columns] on the device
        if state is not None:
            self._keys, self._columns, self._cache, self._attention = state
        vocab = lm.vocab
        self._pad = int(vocab.eos_token_ids[0]) if vocab.eos_token_ids else 0

    def logits(self, contexts: Sequence[Sequence[int]], last: int = 1):
        import torch

        keys = [tuple(int(t) for t in c) for c in contexts]
        if not keys:
            raise ConfigurationError("a session scores at least one context")
        if last < 1 or any(len(k) < last for k in keys):
            raise ConfigurationError(f"logits for the last {last} positions need contexts of "
                                     f"at least {max(last, 1)} tokens")
        memo = self.lm.memo
        if last == 1 and memo.maxsize:
            found = [memo.get(k) for k in keys]
            if all(row is not None for row in found):
                self.forwarded = False
                return torch.stack(found)[:, None, :]
        self.forwarded = True
        try:
            return self._forward(keys, last, memo)
        except BaseException:   # the cache may be half updated: start afresh next time
            self._keys, self._columns, self._cache, self._attention = [], [], None, None
            raise

    def _forward(self, keys, last: int, memo):
        import torch

        device = self.lm.device
        with torch.inference_mode():
            parents, shared = self._match(keys, last)
            width = max(len(k) - c for k, c in zip(keys, shared))
            fresh = all(p < 0 for p in parents)   # nothing to keep: the cache starts anew
            before = 0 if fresh else int(self._attention.shape[1])
            ids = torch.full((len(keys), width), self._pad, dtype=torch.long)
            att = torch.zeros((len(keys), width), dtype=torch.long)
            pos = torch.zeros((len(keys), width), dtype=torch.long)
            columns = []
            for b, (key, c, p) in enumerate(zip(keys, shared, parents)):
                n = len(key) - c
                ids[b, width - n:] = torch.tensor(key[c:], dtype=torch.long)
                att[b, width - n:] = 1
                pos[b, :] = max(c - 1, 0)
                pos[b, width - n:] = torch.arange(c, c + n)
                kept = self._columns[p][:c] if p >= 0 else []
                columns.append(kept + list(range(before + width - n, before + width)))
            cache, attention = None, att.to(device)
            if not fresh:
                cache, past = self._select(parents, shared)
                attention = torch.cat([past, attention], dim=1)
            logits, cache = self.lm.forward(ids.to(device), attention, pos.to(device), cache, last)
            self._keys, self._columns, self._cache, self._attention = keys, columns, cache, attention
            if attention.shape[1] >= self.COMPACT_AFTER and 2 * max(map(len, columns)) < attention.shape[1]:
                self._compact()
            if memo.maxsize:
                for key, row in zip(keys, logits[:, -1]):
                    memo.put(key, row.clone())   # not a view: the batch may be large
        return logits

    def close(self) -> None:
        """Hand the rows and their cache back to the model for its next session."""
        if self._cache is not None:
            self.lm._park((self._keys, self._columns, self._cache, self._attention))
        self._keys, self._columns, self._cache, self._attention = [], [], None, None

    def _match(self, keys, last: int) -> tuple[list[int], list[int]]:
        """Per context: the row holding its longest prefix (-1: none) and how many of its
        tokens that row already holds (at least ``last`` tokens are left to feed)."""
        parents, shared = [], []
        for i, key in enumerate(keys):
            best, depth = -1, 0
            same = self._keys[i] if i < len(self._keys) else None
            if same is not None and len(same) <= len(key) and key[:len(same)] == same:
                best, depth = i, len(same)   # the usual case: the same row, grown
            else:
                for j, old in enumerate(self._keys):
                    n = _common_prefix(key, old)
                    if n > depth:
                        best, depth = j, n
            depth = min(depth, len(key) - last)
            parents.append(best if depth > 0 else -1)
            shared.append(max(depth, 0))
        return parents, shared

    def _select(self, parents: list[int], shared: list[int]):
        """The cache reduced to the parent rows (in context order) and their attention
        mask, hiding every column past what each context shares with its row."""
        import torch

        index = [max(p, 0) for p in parents]
        past = self._attention
        if index != list(range(past.shape[0])):
            where = torch.tensor(index, dtype=torch.long, device=past.device)
            past = past.index_select(0, where)
            _select_rows(self._cache, where)
        else:
            past = past.clone()
        for b, (p, c) in enumerate(zip(parents, shared)):
            hidden = self._columns[p][c:] if p >= 0 else None
            if p < 0:
                past[b] = 0
            elif hidden:
                past[b, torch.tensor(hidden, dtype=torch.long, device=past.device)] = 0
        return self._cache, past

    def _compact(self) -> None:
        """Rebuild the cache with only each row's own columns, left-padded."""
        import torch

        width = max(map(len, self._columns))
        device = self._attention.device
        index = torch.zeros((len(self._columns), width), dtype=torch.long)
        attention = torch.zeros((len(self._columns), width), dtype=torch.long)
        for b, cols in enumerate(self._columns):
            index[b, width - len(cols):] = torch.tensor(cols, dtype=torch.long)
            attention[b, width - len(cols):] = 1
        index = index.to(device)
        layers = []
        for keys, values in _cache_layers(self._cache):
            gather = index[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
            layers.append((keys.gather(2, gather), values.gather(2, gather)))
        self._cache = _new_cache()
        for i, (keys, values) in enumerate(layers):
            self._cache.update(keys, values, i)
        self._attention = attention.to(device)
        self._columns = [list(range(width - len(cols), width)) for cols in self._columns]


def _common_prefix(a: tuple, b: tuple) -> int:
    """Length of the longest common prefix (binary search on slice equality, which runs
    in C)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:   # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _select_rows(cache, index) -> None:
    """Keep the batch rows ``index`` (repeats allowed) of a transformers cache, in place."""
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(index)
        return
    raise ConfigurationError(f"cannot select rows of a {type(cache).__name__} cache; "
                             "generate one sequence at a time with this model")


def _cache_layers(cache) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a DynamicCache, ``[rows, heads, columns, dim]`` each."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # transformers < 4.54
