"""Grammar-constrained generation with a Hugging Face model: :func:`generate`.

One decoding loop serves a single prompt and a batch alike:

* the prompt (chat template applied) is prefilled once and the KV cache is reused;
* before each forward pass every row's matcher emits, without sampling, the tokens that
  are the *only* token its mask allows (jump-forward). That is exact: the constrained
  distribution puts all its mass on such a token whatever the logits. A run of forced
  tokens is fed to the model in the same forward pass as the sampled token before it;
* each step then samples one token per row from the masked logits (greedy when
  ``temperature == 0``);
* a batch is left-padded; rows that feed fewer tokens in a step are padded inside the
  step (masked out by the attention mask); finished rows leave the batch and its KV cache.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GramgenError
from ..grammar import Grammar
from ..runtime import CompiledGrammar, compile as compile_grammar
from ..runtime import bitmask as packed
from .model import Model

__all__ = ["GenerationResult", "GenerationStats", "generate", "compiled_constraint"]

FINISH_REASONS = ("grammar", "eos", "max_new_tokens")
_SAMPLERS = ("asap", "awrs", "smc")


@dataclass
class GenerationStats:
    """Where the work went for one output."""

    prompt_tokens: int = 0
    #: forward passes that fed this row new tokens (the prefill included)
    forward_passes: int = 0
    #: tokens emitted without sampling because they were the only token allowed
    forced_tokens: int = 0
    #: tokens chosen from the model's distribution (an EOS choice included)
    sampled_tokens: int = 0
    seconds: float = 0.0


@dataclass
class GenerationResult:
    """One generated output.

    ``text`` is exactly the bytes the grammar saw, decoded as UTF-8. ``value`` is the parsed
    JSON (or the pydantic instance) for ``schema=`` when the output is complete, else None.
    ``tokens`` are the emitted token ids, EOS excluded. ``logprob`` is the sum, over every
    emitted token and the final EOS when the model chose it, of its log-probability under
    the distribution decoding drew from: the model's softmax at ``temperature`` (1 for
    greedy), restricted to the grammar's allowed tokens and renormalised, then truncated by
    ``top_k`` / ``top_p`` when given. A forced token has probability 1 there (log 0).

    ``finish_reason``: ``"grammar"`` when the grammar allowed nothing but ending (or no
    token at all), ``"eos"`` when the model chose EOS where the grammar also allowed more,
    ``"max_new_tokens"`` when the budget ran out first: then ``complete`` is False and
    ``value`` is None, whatever the text looks like.
    """

    text: str
    value: Any
    tokens: list[int]
    logprob: float
    finish_reason: str
    complete: bool
    stats: GenerationStats = field(default_factory=GenerationStats)
    #: why a complete output has no ``value`` (it failed to parse / validate), else None
    error: str | None = None
    #: sampler details for asap / awrs / smc (weights, log marginal likelihood, particles)
    extras: dict = field(default_factory=dict)


# -- constraints -------------------------------------------------------------------------

_cache_lock = threading.Lock()
_text_cache: OrderedDict[tuple, CompiledGrammar] = OrderedDict()
_grammar_cache: "weakref.WeakKeyDictionary[Grammar, dict[str, CompiledGrammar]]" = weakref.WeakKeyDictionary()
_CACHE_SIZE = 64


def _schema_source(schema: Any) -> tuple[Any, str, type | None]:
    """(what from_json_schema gets, a cache key text, the pydantic class or None)."""
    if isinstance(schema, type):
        dump = getattr(schema, "model_json_schema", None)
        if dump is None:
            raise GramgenError(f"schema={schema.__name__} is a class but not a pydantic model")
        return schema, json.dumps(dump(), sort_keys=True), schema
    if isinstance(schema, dict):
        return schema, json.dumps(schema, sort_keys=True), None
    if isinstance(schema, os.PathLike) or (isinstance(schema, str) and not schema.lstrip().startswith(("{", "true", "false"))):
        path = Path(schema)
        if not path.is_file():
            raise GramgenError(f"schema {str(schema)!r} is neither JSON text nor an existing file")
        schema = path.read_text(encoding="utf-8")
    if isinstance(schema, str):
        try:
            parsed = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise GramgenError(f"schema is not valid JSON: {exc}") from None
        return parsed, json.dumps(parsed, sort_keys=True), None
    raise GramgenError(f"schema must be a dict, JSON text, a path or a pydantic model class, "
                       f"not {type(schema).__name__}")


def _cached(key: tuple, build) -> CompiledGrammar:
    with _cache_lock:
        found = _text_cache.get(key)
        if found is not None:
            _text_cache.move_to_end(key)
            return found
    cg = build()
    with _cache_lock:
        _text_cache[key] = cg
        while len(_text_cache) > _CACHE_SIZE:
            _text_cache.popitem(last=False)
    return cg


def compiled_constraint(vocab, *, schema=None, grammar=None, lark=None, gbnf=None, regex=None,
                        whitespace: str = "compact") -> tuple[CompiledGrammar, bool, type | None]:
    """Compile the one constraint given (cached per constraint and vocabulary).

    Returns (compiled grammar, whether the output is JSON to parse, pydantic class or None).
    """
    given = {k: v for k, v in dict(schema=schema, grammar=grammar, lark=lark, gbnf=gbnf,
                                   regex=regex).items() if v is not None}
    if len(given) != 1:
        names = ", ".join(given) if given else "none"
        raise GramgenError("give exactly one of schema=, grammar=, lark=, gbnf=, regex= "
                           f"(got {names})")
    (kind, value), = given.items()
    fp = vocab.fingerprint
    if kind == "schema":
        source, key, cls = _schema_source(value)
        cg = _cached(("schema", key, whitespace, fp),
                     lambda: compile_grammar(Grammar.from_json_schema(source, whitespace=whitespace), vocab))
        return cg, True, cls
    if kind == "grammar":
        if isinstance(value, CompiledGrammar):
            if value.vocab.fingerprint != fp:
                raise GramgenError("grammar= was compiled for another vocabulary than the model's")
            return value, False, None
        if not isinstance(value, Grammar):
            raise GramgenError(f"grammar= takes a gramgen.Grammar or CompiledGrammar, "
                               f"not {type(value).__name__} (use lark=, gbnf= or regex= for text)")
        with _cache_lock:
            per_vocab = _grammar_cache.setdefault(value, {})
            found = per_vocab.get(fp)
        if found is None:
            found = compile_grammar(value, vocab)
            with _cache_lock:
                per_vocab[fp] = found
        return found, False, None
    if not isinstance(value, str):
        raise GramgenError(f"{kind}= takes the grammar text, not {type(value).__name__}")
    build = {"lark": Grammar.from_lark, "gbnf": Grammar.from_gbnf, "regex": Grammar.from_regex}[kind]
    return _cached((kind, value, fp), lambda: compile_grammar(build(value), vocab)), False, None


# -- the decoding loop -------------------------------------------------------------------

@dataclass
class _Row:
    matcher: Any                      # Matcher, or None when decoding without a grammar
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)   # tokens to feed at the next forward
    logprob: float = 0.0
    finish: str | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)


def _single_allowed(words: np.ndarray) -> int | None:
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


def _force(row: _Row, mask_row: np.ndarray, eos: frozenset[int], max_new_tokens: int,
           jump_forward: bool) -> None:
    """Emit the tokens that are the only one allowed, leaving the next sampling mask in
    ``mask_row``; set ``row.finish`` if the row is done."""
    m = row.matcher
    while True:
        m.fill_bitmask(mask_row[None, :], 0)
        single = _single_allowed(mask_row)
        if single == -1 or single in eos:   # nothing, or only EOS, can follow
            row.finish = "grammar"
            return
        if len(row.tokens) >= max_new_tokens:
            row.finish = "max_new_tokens"
            return
        if single is None or not jump_forward:
            return
        m.advance(single)
        row.tokens.append(single)
        row.pending.append(single)
        row.stats.forced_tokens += 1


class _Sampler:
    """Picks a token per row from masked logits, and its log-probability."""

    def __init__(self, temperature: float, top_p: float | None, top_k: int | None,
                 seed: int | None, device):
        import torch

        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.generator = None
        if temperature > 0 and seed is not None:
            self.generator = torch.Generator(device=device).manual_seed(int(seed))

    def __call__(self, scores):
        import torch

        if self.temperature == 0:
            logp = torch.log_softmax(scores, dim=-1)
            picked = torch.argmax(scores, dim=-1)
            return picked, logp.gather(-1, picked[:, None])[:, 0]
        scores = scores / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = torch.topk(scores, self.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1.0:
            ordered, order = torch.sort(scores, dim=-1, descending=True)
            probs = torch.softmax(ordered, dim=-1)
            before = torch.cumsum(probs, dim=-1) - probs   # mass strictly above each token
            drop = before >= self.top_p                      # keeps at least the top token
            scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
        logp = torch.log_softmax(scores, dim=-1)
        picked = torch.multinomial(logp.exp(), 1, generator=self.generator)[:, 0]
        return picked, logp.gather(-1, picked[:, None])[:, 0]


def _unpack_bits(bitmask, width: int):
    """int32 [B, W/32] torch bitmask -> bool [B, width] on the same device."""
    import torch

    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :width].bool()


def _forward(model: Model, ids, attention, positions, cache, use_keep: bool):
    import torch

    kwargs = dict(input_ids=ids, attention_mask=attention, position_ids=positions,
                  past_key_values=cache, use_cache=True)
    if use_keep:
        kwargs["logits_to_keep"] = 1
    with torch.inference_mode():
        out = model.hf_model(**kwargs)
    return out.logits[:, -1, :].float(), out.past_key_values


def _select_rows(cache, keep: list[int], device):
    """Keep only batch rows ``keep`` of a KV cache (a transformers Cache or legacy tuples)."""
    import torch

    index = torch.tensor(keep, dtype=torch.long, device=device)
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(index)
        return cache
    if isinstance(cache, (tuple, list)):
        return type(cache)(tuple(t.index_select(0, index) for t in layer) for layer in cache)
    raise GramgenError(f"cannot drop finished rows from a {type(cache).__name__}; "
                       "generate one prompt at a time with this model")


def _accepts_logits_to_keep(hf_model) -> bool:
    import inspect

    try:
        return "logits_to_keep" in inspect.signature(hf_model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return False


def decode(model: Model, prompts: list[list[int]],
           compiled: CompiledGrammar | list[CompiledGrammar | None] | None, *,
           max_new_tokens: int, temperature: float = 0.0, top_p: float | None = None,
           top_k: int | None = None, seed: int | None = None,
           jump_forward: bool = True) -> list[_Row]:
    """Run the decoding loop on token-id prompts.

    ``compiled`` is one grammar for every row, or a list with one per row (rows of a batch
    may follow different grammars); ``None`` decodes without a grammar (the benchmark's
    baseline; ``finish`` is then "eos" or "max_new_tokens")."""
    import torch

    t0 = time.perf_counter()
    device = model.device
    vocab = model.vocab
    eos = frozenset(vocab.eos_token_ids)
    width = model.vocab_width
    n_words = packed.n_words(max(width, vocab.size))
    batch = len(prompts)
    per_row = compiled if isinstance(compiled, (list, tuple)) else [compiled] * batch
    if len(per_row) != batch:
        raise GramgenError(f"{len(per_row)} grammars for {batch} prompts")
    rows = [_Row(cg.matcher() if cg is not None else None, list(p)) for cg, p in zip(per_row, prompts)]
    constrained = any(row.matcher is not None for row in rows)
    masks = np.full((batch, n_words), -1, dtype=np.int32)   # rows without a grammar: all ones
    sampler = _Sampler(temperature, top_p, top_k, seed, device)
    use_keep = _accepts_logits_to_keep(model.hf_model)
    pad_id = model.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = vocab.eos_token_ids[0] if vocab.eos_token_ids else 0

    for r, row in enumerate(rows):
        row.stats.prompt_tokens = len(row.prompt)
        row.pending = list(row.prompt)
        if row.matcher is not None:
            _force(row, masks[r], eos, max_new_tokens, jump_forward)

    # the batch holds only the rows still generating: ``live[b]`` is the row at position b
    live = [r for r, row in enumerate(rows) if row.finish is None]
    attention = cache = None
    next_pos = [0] * batch
    while live:
        k = max(len(rows[r].pending) for r in live)
        ids = torch.full((len(live), k), pad_id, dtype=torch.long)
        att = torch.zeros((len(live), k), dtype=torch.long)
        pos = torch.zeros((len(live), k), dtype=torch.long)
        for b, r in enumerate(live):   # right-aligned: the last position gives the logits
            row = rows[r]
            n = len(row.pending)
            ids[b, k - n:] = torch.tensor(row.pending)
            att[b, k - n:] = 1
            pos[b, :] = max(next_pos[r] - 1, 0)
            pos[b, k - n:] = torch.arange(next_pos[r], next_pos[r] + n)
            next_pos[r] += n
            row.stats.forward_passes += 1
            row.pending = []
        att = att.to(device)
        attention = att if attention is None else torch.cat([attention, att], dim=1)
        logits, cache = _forward(model, ids.to(device), attention, pos.to(device), cache, use_keep)

        scores = logits
        if constrained:
            words = torch.from_numpy(masks[live]).to(device, non_blocking=True)
            scores = logits.masked_fill(~_unpack_bits(words, logits.shape[-1]), float("-inf"))
        picked, logps = sampler(scores)
        picked, logps = picked.tolist(), logps.tolist()
        for b, r in enumerate(live):
            row = rows[r]
            token = int(picked[b])
            row.logprob += float(logps[b])
            row.stats.sampled_tokens += 1
            if row.matcher is not None:
                row.matcher.advance(token)
            if token in eos:
                row.finish = "eos"
                continue
            row.tokens.append(token)
            row.pending.append(token)
            if row.matcher is not None:
                _force(row, masks[r], eos, max_new_tokens, jump_forward)
            elif len(row.tokens) >= max_new_tokens:
                row.finish = "max_new_tokens"
        keep = [b for b, r in enumerate(live) if rows[r].finish is None]
        if keep and len(keep) < len(live):   # finished rows leave the batch and the cache
            cache = _select_rows(cache, keep, device)
            attention = attention[keep]
        live = [live[b] for b in keep]
    seconds = time.perf_counter() - t0
    for row in rows:
        row.stats.seconds = seconds
    return rows


# -- the public call ---------------------------------------------------------------------

def to_result(model: Model, row: _Row, is_json: bool, cls: type | None) -> GenerationResult:
    data = b"".join(model.vocab.token_bytes(t) for t in row.tokens)
    text = data.decode("utf-8", errors="replace")
    complete = row.finish in ("grammar", "eos") and (row.matcher is None or row.matcher.is_accepting())
    value, error = None, None
    if complete and is_json:
        try:
            value = json.loads(data.decode("utf-8"))
            if cls is not None:
                value = cls.model_validate(value)
        except Exception as exc:  # the grammar and the parser disagree: report, never hide
            complete, error = False, f"{type(exc).__name__}: {exc}"
    return GenerationResult(text=text, value=value, tokens=list(row.tokens), logprob=row.logprob,
                            finish_reason=row.finish or "max_new_tokens", complete=complete,
                            stats=row.stats, error=error)


def _check_options(sampler: str, num_particles, speculative, max_new_tokens: int,
                   temperature: float, top_p, top_k) -> None:
    if sampler not in ("constrained", *_SAMPLERS):
        raise GramgenError(f"sampler {sampler!r} is unknown (choose from 'constrained', "
                           + ", ".join(repr(s) for s in _SAMPLERS) + ")")
    if num_particles is not None and sampler != "smc":
        raise GramgenError("num_particles applies to sampler='smc' only")
    if sampler != "constrained" and (temperature not in (0.0, 1.0) or top_p is not None or top_k is not None):
        raise GramgenError(f"sampler {sampler!r} samples the model at temperature 1: "
                           "temperature, top_p and top_k apply to sampler='constrained' only")
    if speculative is not None:
        raise GramgenError("speculative decoding is not available in generate() in this build")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise GramgenError(f"max_new_tokens must be a positive int, not {max_new_tokens!r}")
    if temperature < 0:
        raise GramgenError(f"temperature must be >= 0 (0 = greedy), not {temperature}")
    if top_p is not None and not 0 < top_p <= 1:
        raise GramgenError(f"top_p must be in (0, 1], not {top_p}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise GramgenError(f"top_k must be a positive int, not {top_k!r}")


def _with_sampler(model: Model, ids: list[list[int]], compiled: CompiledGrammar, sampler: str, *,
                  max_new_tokens: int, seed: int | None, num_particles: int | None,
                  is_json: bool, cls: type | None) -> list[GenerationResult]:
    """asap / awrs / smc through :func:`gramgen.decoding.run_sampler`, one prompt at a time."""
    import time

    from ..decoding.samplers import run_sampler

    lm = model.as_lm()
    eos = set(model.vocab.eos_token_ids)
    out = []
    for i, prompt_ids in enumerate(ids):
        t0 = time.perf_counter()
        options = {"num_particles": num_particles} if sampler == "smc" else {}
        res = run_sampler(sampler, lm, compiled, prompt_ids, max_new_tokens=max_new_tokens,
                          seed=None if seed is None else seed + i, **options)
        tokens = [t for t in res.tokens if t not in eos]
        row = _Row(matcher=None, prompt=list(prompt_ids))
        row.tokens, row.logprob = tokens, res.logprob
        row.finish = "max_new_tokens" if res.finish_reason == "max_new_tokens" else (
            "eos" if res.complete else "grammar")
        row.stats.prompt_tokens = len(prompt_ids)
        row.stats.sampled_tokens = len(res.tokens)
        row.stats.seconds = time.perf_counter() - t0
        result = to_result(model, row, is_json, cls)
        if not res.complete:
            result.complete, result.value = False, None
        result.extras = res.extras
        out.append(result)
    return out


def generate(model: Model, prompt: str | list[str], *, schema: Any = None,
             grammar: Grammar | CompiledGrammar | None = None, lark: str | None = None,
             gbnf: str | None = None, regex: str | None = None, sampler: str = "constrained",
             num_particles: int | None = None, speculative: Any = None,
             max_new_tokens: int = 512, temperature: float = 0.0, top_p: float | None = None,
             top_k: int | None = None, seed: int | None = None, chat: bool = True,
             whitespace: str = "compact") -> GenerationResult | list[GenerationResult]:
    """Generate text that the given constraint accepts.

    Give exactly one of ``schema`` (dict, JSON text, file path or pydantic model class),
    ``grammar`` (a :class:`~gramgen.Grammar` or :class:`~gramgen.CompiledGrammar`),
    ``lark``, ``gbnf`` or ``regex`` (grammar text). Compiled grammars are cached per
    constraint and vocabulary. ``prompt`` is wrapped in the tokenizer's chat template unless
    ``chat=False``; a list of prompts is generated as one batch and returns a list.
    ``temperature=0`` is greedy; otherwise sampling (``top_k``, ``top_p``, ``seed``).
    ``whitespace`` is passed to the JSON Schema compiler (``"compact"`` or ``"flexible"``).
    """
    _check_options(sampler, num_particles, speculative, max_new_tokens, temperature, top_p, top_k)
    if not isinstance(model, Model):
        raise GramgenError(f"model must be a gramgen.Model (see gramgen.load_model), "
                           f"not {type(model).__name__}")
    compiled, is_json, cls = compiled_constraint(model.vocab, schema=schema, grammar=grammar,
                                                 lark=lark, gbnf=gbnf, regex=regex,
                                                 whitespace=whitespace)
    single = isinstance(prompt, str)
    prompts = [prompt] if single else list(prompt)
    if not all(isinstance(p, str) for p in prompts):
        raise GramgenError("prompt must be a string or a list of strings")
    if not prompts:
        return []
    ids = [model.prompt_ids(p, chat=chat) for p in prompts]
    if sampler != "constrained":
        results = _with_sampler(model, ids, compiled, sampler, max_new_tokens=max_new_tokens, seed=seed,
                                num_particles=num_particles, is_json=is_json, cls=cls)
        return results[0] if single else results
    rows = decode(model, ids, compiled, max_new_tokens=max_new_tokens, temperature=temperature,
                  top_p=top_p, top_k=top_k, seed=seed)
    results = [to_result(model, row, is_json, cls) for row in rows]
    return results[0] if single else results
