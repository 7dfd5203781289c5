"""``generate()``: validate the arguments once, compile the constraint (cached), run the loop.

A thin function in the manner of httpx's ``request()``: everything it does is done by the
layers below (:mod:`.samplers` for the options, :mod:`gramgen.runtime` for the compile,
:mod:`.loop` for generation, :mod:`.result` for what comes back).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._lru import LRU
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError
from ..grammar import Grammar
from ..grammar.sources import read_schema
from ..runtime import CompiledGrammar, compile as compile_grammar
from .constraint import Constraint, MatcherConstraint, require_masks
from .lm import LanguageModel
from .loop import Sequence, run
from .result import GenerationResult
from .samplers import (AWRS, SMC, ASAp, ASApSampling, AWRSSampler, Constrained, MaskedSampler,
                       SamplerOptions, sampler_options, smc)

__all__ = ["Target", "generate", "target_for"]

Whitespace = Literal["compact", "flexible"]


@dataclass(frozen=True)
class Target:
    """What generation is constrained to: a compiled grammar or any :class:`Constraint`,
    and how a complete output is read back (JSON, a pydantic model, or text)."""

    compiled: CompiledGrammar | None
    constraint: Constraint | None = None
    is_json: bool = False
    model: type | None = None

    def new_state(self) -> Constraint:
        """A fresh constraint state for one sequence."""
        if self.compiled is not None:
            return MatcherConstraint(self.compiled.matcher())
        return self.constraint.fork()


_compiled_by_text: LRU[tuple, CompiledGrammar] = LRU(64)
_compiled_by_grammar: "weakref.WeakKeyDictionary[Grammar, dict[str, CompiledGrammar]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _cached(key: tuple, build) -> CompiledGrammar:
    found = _compiled_by_text.get(key)
    if found is None:
        found = build()
        _compiled_by_text.put(key, found)
    return found


def target_for(vocab: Vocabulary, *, schema: Any = None, grammar: Grammar | CompiledGrammar | None = None,
               lark: str | None = None, gbnf: str | None = None, regex: str | None = None,
               constraint: Constraint | None = None, whitespace: Whitespace = "compact") -> Target:
    """The one constraint given, compiled for ``vocab`` (cached per constraint and
    vocabulary: a second call with an equal schema or grammar text reuses the compile)."""
    given = {k: v for k, v in dict(schema=schema, grammar=grammar, lark=lark, gbnf=gbnf,
                                   regex=regex, constraint=constraint).items() if v is not None}
    if len(given) != 1:
        names = ", ".join(given) if given else "none"
        raise ConfigurationError("give exactly one of schema=, grammar=, lark=, gbnf=, regex=, "
                                 f"constraint= (got {names})")
    (kind, value), = given.items()
    fp = vocab.fingerprint
    if kind == "schema":
        source = read_schema(value)
        cg = _cached(("schema", source.key, whitespace, fp), lambda: compile_grammar(
            Grammar.from_json_schema(source.value, whitespace=whitespace), vocab))
        return Target(cg, is_json=True, model=source.model)
    if kind == "constraint":
        if not all(callable(getattr(value, m, None)) for m in ("check", "advance", "fork", "is_complete")):
            raise ConfigurationError(f"constraint= takes an object with check(token), advance(token), "
                                     f"fork() and is_complete(), not {type(value).__name__}")
        return Target(None, value)
    if kind == "grammar":
        if isinstance(value, CompiledGrammar):
            if value.vocab.fingerprint != fp:
                raise ConfigurationError("grammar= was compiled for another vocabulary than the model's")
            return Target(value)
        if not isinstance(value, Grammar):
            raise ConfigurationError(f"grammar= takes a gramgen.Grammar or CompiledGrammar, not "
                                     f"{type(value).__name__} (use lark=, gbnf= or regex= for text)")
        with _lock:
            found = _compiled_by_grammar.setdefault(value, {}).get(fp)
        if found is None:
            found = compile_grammar(value, vocab)
            with _lock:
                _compiled_by_grammar[value][fp] = found
        return Target(found)
    if not isinstance(value, str):
        raise ConfigurationError(f"{kind}= takes the grammar text, not {type(value).__name__}")
    build = {"lark": Grammar.from_lark, "gbnf": Grammar.from_gbnf, "regex": Grammar.from_regex}[kind]
    return Target(_cached((kind, value, fp), lambda: compile_grammar(build(value), vocab)))


def generate(model: LanguageModel, prompt: str | SequenceOf[str] | SequenceOf[int] | SequenceOf[SequenceOf[int]], *,
             schema: Any = None, grammar: Grammar | CompiledGrammar | None = None,
             lark: str | None = None, gbnf: str | None = None, regex: str | None = None,
             constraint: Constraint | None = None,
             sampler: str | SamplerOptions = "constrained", num_particles: int | None = None,
             speculative: Any = None, max_new_tokens: int = 512, temperature: float = 0.0,
             top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
             chat: bool = True, whitespace: Whitespace = "compact",
             jump_forward: bool = True) -> GenerationResult | list[GenerationResult]:
    """Generate text that the given constraint accepts.

    Give exactly one constraint: ``schema`` (dict, JSON text, file path or pydantic model
    class), ``grammar`` (a :class:`~gramgen.Grammar` or :class:`~gramgen.CompiledGrammar`),
    ``lark``, ``gbnf`` or ``regex`` (grammar text), or ``constraint`` (any object with
    ``check``, ``advance``, ``fork`` and ``is_complete``; masked sampling also needs
    ``mask``). Compiled grammars are cached per constraint and vocabulary.

    ``prompt``: a string (wrapped in the tokenizer's chat template unless ``chat=False``),
    token ids, or a list of either (generated as one batch; returns a list).
    ``sampler``: ``"constrained"`` (masked; greedy at ``temperature=0``, else sampled with
    ``top_k`` / ``top_p``; ``jump_forward`` emits forced tokens without a draw), ``"awrs"``,
    ``"smc"`` (``num_particles``), ``"asap"``, or an options object
    (:class:`~gramgen.generation.Constrained`, ``AWRS``, ``SMC``, ``ASApSampling``).
    ``seed`` makes sampling reproducible. ``whitespace`` goes to the JSON Schema compiler.
    Every bad argument raises :class:`~gramgen.ConfigurationError` before any work.
    """
    if speculative is not None:
        raise ConfigurationError("speculative decoding is not available in generate() yet")
    options = sampler_options(sampler, temperature=temperature, top_k=top_k, top_p=top_p,
                              num_particles=num_particles, jump_forward=jump_forward)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigurationError(f"max_new_tokens must be a positive int, not {max_new_tokens!r}")
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(f"model must be a gramgen.Model (see gramgen.load_model) or another "
                                 f"gramgen LanguageModel, not {type(model).__name__}")
    target = target_for(model.vocab, schema=schema, grammar=grammar, lark=lark, gbnf=gbnf,
                        regex=regex, constraint=constraint, whitespace=whitespace)
    single, prompts = _prompt_ids(model, prompt, chat)
    if target.compiled is None:
        if isinstance(options, ASApSampling):
            raise ConfigurationError("sampler 'asap' needs a grammar or schema, not a constraint=")
        if isinstance(options, Constrained):
            require_masks(target.constraint)
    if not prompts:
        return []
    results = _generate_ids(model, prompts, target, options, max_new_tokens, seed)
    return results[0] if single else results


def _prompt_ids(model, prompt, chat: bool) -> tuple[bool, list[list[int]]]:
    """(whether ``prompt`` was one prompt, the token ids of each)."""
    def ids_of(p) -> list[int]:
        if isinstance(p, str):
            tokenize = getattr(model, "prompt_ids", None)
            if tokenize is None:
                raise ConfigurationError(f"a {type(model).__name__} has no tokenizer: give the "
                                         "prompt as token ids")
            return list(tokenize(p, chat=chat))
        if isinstance(p, (list, tuple)) and p and all(isinstance(t, (int, np.integer)) for t in p):
            return [int(t) for t in p]
        raise ConfigurationError("prompt must be a string, token ids, or a list of either")

    if isinstance(prompt, str) or (isinstance(prompt, (list, tuple)) and prompt
                                   and all(isinstance(t, (int, np.integer)) for t in prompt)):
        return True, [ids_of(prompt)]
    if not isinstance(prompt, (list, tuple)):
        raise ConfigurationError("prompt must be a string, token ids, or a list of either")
    return False, [ids_of(p) for p in prompt]


def _generate_ids(model, prompts: list[list[int]], target: Target, options, max_new_tokens: int,
                  seed: int | None) -> list[GenerationResult]:
    vocab = model.vocab
    if isinstance(options, (Constrained, AWRS)):
        population = [Sequence(p, target.new_state()) for p in prompts]
        if isinstance(options, Constrained):
            sampler = MaskedSampler(options, vocab, seed)
        else:
            sampler = AWRSSampler(vocab, np.random.default_rng(seed))
        before = [seq.constraint.counter.count for seq in population]
        population = run(model, population, sampler, max_new_tokens=max_new_tokens)
        results = [_result(vocab, seq, target) for seq in population]
        for seq, res, count in zip(population, results, before):
            # (forks of a constraint= share one counter: then every row reports the batch's)
            res.extras.update(constraint_evaluations=seq.constraint.counter.count - count,
                              steps=seq.stats.sampled_tokens)
            if isinstance(options, AWRS):
                res.extras.update(log_weight=seq.log_weight, rejections=seq.state or 0)
        return results
    results = []
    for i, prompt in enumerate(prompts):
        one_seed = None if seed is None else seed + i
        if isinstance(options, SMC):
            results.append(_smc(model, prompt, target, options, max_new_tokens, one_seed))
        else:
            results.append(_asap(model, prompt, target, options, max_new_tokens, one_seed))
    return results


def _smc(model, prompt, target: Target, options: SMC, max_new_tokens: int, seed) -> GenerationResult:
    rng = np.random.default_rng(seed)
    twist = options.twist
    if isinstance(twist, ASAp):
        if twist.prompt_ids != prompt or twist.max_new_tokens != max_new_tokens:
            raise ConfigurationError("an ASAp twist must be built for the same prompt and "
                                     "max_new_tokens as the SMC run")
        twist = twist.twist
    res = smc(model, target.new_state(), prompt, num_particles=options.num_particles,
              max_new_tokens=max_new_tokens, rng=rng, ess_threshold=options.ess_threshold,
              resampling=options.resampling, twist=twist)
    lw = res.log_weights
    if np.isfinite(lw).any():
        w = np.exp(lw - np.max(lw))
        pick = res.particles[int(rng.choice(len(w), p=w / w.sum()))]
    else:  # nothing finished: report an unfinished particle (alive ones first)
        alive = [p for p in res.particles if p.finish != "dead_end"]
        pick = alive[0] if alive else res.particles[0]
    result = _result(model.vocab, pick, target)
    result.extras.update(
        log_ml=res.log_ml, constraint_evaluations=res.evaluations, resample_steps=res.resample_steps,
        ess=res.ess, steps=res.steps, tokens_proposed=res.tokens_proposed,
        particles=[{"tokens": list(p.tokens), "log_weight": float(w), "logprob": p.logprob,
                    "finished": p.finish == "eos"} for p, w in zip(res.particles, lw)])
    return result


def _asap(model, prompt, target: Target, options: ASApSampling, max_new_tokens: int, seed) -> GenerationResult:
    asap = options.trie
    if asap is None:
        asap = ASAp(model, target.compiled, prompt, max_new_tokens=max_new_tokens, seed=seed)
    elif (asap.prompt_ids != prompt or asap.max_new_tokens != max_new_tokens
          or not asap.same_grammar(target.compiled)):
        raise ConfigurationError("the ASAp trie passed was built for another prompt, grammar or "
                                 "max_new_tokens")
    masks_before = asap.mask_evaluations
    for _ in range(options.warmup):
        asap.sample()
    s = asap.sample()
    masks = asap.mask_evaluations - masks_before
    seq = Sequence(prompt, None, tokens=s.tokens[:-1], logprob=s.logprob, finish="eos",
                   eos_token=s.tokens[-1])
    seq.stats.sampled_tokens = len(s.tokens)
    seq.stats.prompt_tokens = len(prompt)
    result = _result(model.vocab, seq, target)
    result.extras.update(constraint_evaluations=masks * model.vocab.size, masks=masks,
                         trie_nodes=asap.num_nodes, samples_drawn=asap.samples_drawn,
                         steps=len(s.tokens))
    return result


def _result(vocab: Vocabulary, seq: Sequence, target: Target) -> GenerationResult:
    data = b"".join(vocab.token_bytes(t) for t in seq.tokens)
    text = data.decode("utf-8", errors="replace")
    complete = seq.finish in ("eos", "grammar")
    value, error = None, None
    if complete and target.is_json:
        try:
            value = json.loads(data.decode("utf-8"))
            if target.model is not None:
                value = target.model.model_validate(value)
        except Exception as exc:  # the grammar and the parser disagree: report, never hide
            complete, error = False, f"{type(exc).__name__}: {exc}"
    return GenerationResult(text=text, value=value, tokens=list(seq.tokens), logprob=seq.logprob,
                            finish_reason=seq.finish or "max_new_tokens", complete=complete,
                            stats=seq.stats, eos_token=seq.eos_token, error=error)
