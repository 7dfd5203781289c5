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
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Literal

import numpy as np

from .._lru import LRU
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError
from ..grammar import Grammar
from ..grammar.json_schema.compiler import DEFAULT_WHITESPACE
from ..grammar.sources import read_schema
from ..monitors.base import Monitor, check_monitors
from ..monitors.constraint import Unconstrained, monitored, prompt_document
from ..runtime import CompiledGrammar, compile as compile_grammar
from .constraint import Constraint, MatcherConstraint, require_masks
from .lm import LanguageModel, context_length
from .loop import Sequence, run
from .result import GenerationResult, GenerationStats
from .samplers import (AWRS, SMC, ASAp, ASApSampling, ASApTrie, AWRSSampler, Constrained,
                       MaskedSampler, SamplerOptions, sampler_options, shared_state, smc)
from .speculation import DraftPolicy, Speculation, Speculator

__all__ = ["Target", "generate", "target_for"]

Whitespace = Literal["compact", "standard", "flexible"]


@dataclass(frozen=True)
class Target:
    """What generation is constrained to: a compiled grammar or any :class:`Constraint`,
    and how a complete output is read back (JSON, a pydantic model, or text)."""

    compiled: CompiledGrammar | None
    constraint: Constraint | None = None
    is_json: bool = False
    model: type | None = None
    #: with ``prefix=``: per prompt, the matcher advanced over its document's start
    starts: tuple = ()
    #: the states made so far: the i-th belongs to the i-th prompt (every sampler makes
    #: one per prompt, in order)
    made: list = field(default_factory=list, compare=False, hash=False)

    def new_state(self) -> Constraint:
        """A fresh constraint state for one sequence."""
        state = self._state(len(self.made))
        self.made.append(state)
        return state

    def _state(self, i: int) -> Constraint:
        """The fresh state of the ``i``-th sequence made."""
        if self.starts:
            return MatcherConstraint(self.starts[min(i, len(self.starts) - 1)].fork())
        if self.compiled is not None:
            return MatcherConstraint(self.compiled.matcher())
        return self.constraint.fork()


@dataclass(frozen=True)
class _Monitored(Target):
    """A target whose every sequence's constraint is conjoined with ``monitors=``, each
    starting from its prompt's document."""

    monitors: tuple[Monitor, ...] = ()
    vocab: Vocabulary | None = None
    documents: tuple[str, ...] = ()

    def _state(self, i: int) -> Constraint:
        document = self.documents[i] if i < len(self.documents) else ""
        return monitored(super()._state(i), self.monitors, self.vocab, document)


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
               constraint: Constraint | None = None, whitespace: Whitespace = DEFAULT_WHITESPACE,
               separators: tuple[str, str] | None = None, indent: int | str | None = None,
               strict: bool = True) -> Target:
    """The one constraint given, compiled for ``vocab`` (cached per constraint, layout and
    vocabulary: a second call with an equal schema or grammar text reuses the compile).

    ``whitespace``, ``separators``, ``indent`` and ``strict`` go to
    :meth:`Grammar.from_json_schema` for ``schema=``; ``strict=True`` (the default here,
    unlike the compiler's) allows no object key a schema does not declare unless it says
    so with ``additionalProperties`` or ``unevaluatedProperties``."""
    given = {k: v for k, v in dict(schema=schema, grammar=grammar, lark=lark, gbnf=gbnf,
                                   regex=regex, constraint=constraint).items() if v is not None}
    if len(given) != 1:
        names = ", ".join(given) if given else "none"
        raise ConfigurationError("give exactly one of schema=, grammar=, lark=, gbnf=, regex=, "
                                 f"constraint= (got {names})")
    (kind, value), = given.items()
    if not isinstance(strict, bool):
        raise ConfigurationError(f"strict must be True or False, not {strict!r}")
    if kind != "schema" and (separators is not None or indent is not None):
        raise ConfigurationError(f"separators= and indent= lay out the JSON of a schema=, not "
                                 f"a {kind}= (build the Grammar with Grammar.from_json_schema "
                                 "to lay it out)")
    fp = vocab.fingerprint
    if kind == "schema":
        source = read_schema(value)
        layout = dict(whitespace=whitespace, strict=strict)
        if separators is not None:
            layout["separators"] = separators
        if indent is not None:
            layout["indent"] = indent
        key = ("schema", source.key, whitespace, repr(separators), repr(indent), strict, fp)
        cg = _cached(key, lambda: compile_grammar(
            Grammar.from_json_schema(source.value, **layout), vocab))
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
             constraint: Constraint | None = None, monitors: SequenceOf[Monitor] | None = None,
             prefix: str | SequenceOf[str] | None = None,
             sampler: str | SamplerOptions | ASAp = "constrained", num_particles: int | None = None,
             speculative: Speculation | None = None, max_new_tokens: int = 512, temperature: float = 0.0,
             top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
             chat: bool = True, whitespace: Whitespace = DEFAULT_WHITESPACE,
             separators: tuple[str, str] | None = None, indent: int | str | None = None,
             strict: bool = True,
             jump_forward: bool = True) -> GenerationResult | list[GenerationResult]:
    """Generate text that the given constraint accepts.

    Give exactly one constraint: ``schema`` (dict, JSON text, file path or pydantic model
    class), ``grammar`` (a :class:`~gramgen.Grammar` or :class:`~gramgen.CompiledGrammar`),
    ``lark``, ``gbnf`` or ``regex`` (grammar text), or ``constraint`` (any object with
    ``check``, ``advance``, ``fork`` and ``is_complete``; masked sampling also needs
    ``mask``). Compiled grammars are cached per constraint and vocabulary.

    ``prompt``: a string (wrapped in the tokenizer's chat template unless ``chat=False``),
    token ids, or a list of either (generated as one batch; returns a list; an empty list
    is an empty batch). A prompt must come to at least one token (a tokenizer that adds
    no BOS gives none for ``""`` with ``chat=False``: that is an error), and when the model
    states its ``context_length``, prompt plus ``max_new_tokens`` must fit in it.
    ``sampler``: ``"constrained"`` (masked; greedy at ``temperature=0``, else sampled with
    ``top_k`` / ``top_p``; ``jump_forward`` emits forced tokens without a draw), ``"awrs"``,
    ``"smc"`` (``num_particles``), ``"asap"`` (learns across calls with the same model,
    grammar, prompt and ``max_new_tokens``, in a per-model :class:`~gramgen.ASAp` kept in
    the process), a :class:`~gramgen.ASAp` of your own to learn in (keep it, save it), or
    an options object (:class:`~gramgen.generation.Constrained`, ``AWRS``, ``SMC``,
    ``ASApSampling``). ``seed`` (an int >= 0) makes sampling reproducible.
    ``whitespace``, ``separators``, ``indent`` (as in ``json.dumps``) and ``strict`` go to
    the JSON Schema compiler; ``strict=True`` (default) allows no undeclared object keys
    unless the schema allows them explicitly (``additionalProperties`` /
    ``unevaluatedProperties``); ``strict=False`` reads the schema as the specification does.
    ``speculative``: a :class:`~gramgen.Speculation` (drafts verified so that every
    sampler's output distribution is exactly the one without it; greedy outputs are the
    same tokens); ``result.stats`` counts ``forward_passes``, ``drafted`` and ``accepted``.
    ``monitors``: static analysis in the loop (e.g. ``[gramgen.monitors.JediMonitor()]``):
    at each trigger (``obj.``) the next tokens must continue into a name the analyser
    knows; ANDed with the constraint given, or the only constraint when none is (every
    token then allowed, EOS anywhere). A monitor reads the document from the prompt when it
    is a string with ``chat=False`` or token ids (a chat message gives it none).
    ``result.stats`` counts ``monitor_triggers``, ``monitor_queries``,
    ``monitor_query_seconds``, ``monitor_failures`` and ``monitor_fallbacks``; every
    sampler but ``"asap"`` takes monitors.
    ``prefix``: the start of the document the output continues, e.g. the code before the
    cursor (one string, or one per prompt): the grammar's matcher is advanced over it
    first, so every output is a valid continuation of it, and monitors read it as the
    document. A prefix no word of the grammar starts with raises
    :class:`~gramgen.TextRejected` (its line and column) before any model work. Matchers
    after recent prefixes are kept per compiled grammar: the same file after an edit is
    advanced only from the last line start the two share (see :class:`~gramgen.Document`).
    The prompt is still what the model reads (it may hold more than the prefix).
    Every bad argument raises :class:`~gramgen.ConfigurationError` before any work.
    """
    options = sampler_options(sampler, temperature=temperature, top_k=top_k, top_p=top_p,
                              num_particles=num_particles, jump_forward=jump_forward)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral) or max_new_tokens < 1:
        raise ConfigurationError(f"max_new_tokens must be a positive int, not {max_new_tokens!r}")
    max_new_tokens = int(max_new_tokens)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral)
                             or not 0 <= seed < 2**63):
        raise ConfigurationError(f"seed must be an int from 0 to 2**63 - 1, or None, not {seed!r}")
    if not isinstance(chat, bool):
        raise ConfigurationError(f"chat must be True or False, not {chat!r}")
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(f"model must be a gramgen.Model (see gramgen.load_model) or another "
                                 f"gramgen LanguageModel, not {type(model).__name__}")
    monitors = check_monitors(monitors)
    if monitors and isinstance(options, ASApSampling):
        raise ConfigurationError("sampler 'asap' cannot take monitors=: it learns one trie of masks "
                                 "shared by every sample of a prompt, and a monitor's masks depend "
                                 "on static analysis of each sample's text (use 'constrained', "
                                 "'awrs' or 'smc')")
    prefixes = _prefixes(prefix)
    if prefixes is not None and isinstance(options, ASApSampling):
        raise ConfigurationError("sampler 'asap' cannot take prefix=: its trie starts at the grammar's "
                                 "start (use 'constrained', 'awrs' or 'smc')")
    if prefixes is not None and constraint is not None:
        raise ConfigurationError("prefix= advances a grammar over text; a constraint= object only "
                                 "advances over tokens: give a grammar (or advance it yourself)")
    unconstrained = all(v is None for v in (schema, grammar, lark, gbnf, regex, constraint))
    if unconstrained and prefixes is not None and not monitors:
        raise ConfigurationError("prefix= needs a grammar or schema to advance, or monitors= to read it")
    if monitors and unconstrained:
        constraint = Unconstrained(model.vocab)
    speculator = None if speculative is None else Speculator(speculative, model)
    single, prompts = _prompt_ids(model, prompt, chat)
    _check_room(model, prompts, max_new_tokens)
    target = target_for(model.vocab, schema=schema, grammar=grammar, lark=lark, gbnf=gbnf,
                        regex=regex, constraint=constraint, whitespace=whitespace,
                        separators=separators, indent=indent, strict=strict)
    if target.compiled is None:
        if isinstance(options, ASApSampling):
            raise ConfigurationError("sampler 'asap' needs a grammar or schema, not a constraint=")
        if isinstance(options, Constrained):
            require_masks(target.constraint)
    if not prompts:
        return []
    if prefixes is not None:
        if len(prefixes) == 1 and len(prompts) > 1:
            prefixes = prefixes * len(prompts)
        if len(prefixes) != len(prompts):
            raise ConfigurationError(f"prefix= gives {len(prefixes)} texts for {len(prompts)} prompts: "
                                     "give one, or one per prompt")
        if target.compiled is not None:
            target = Target(target.compiled, None, target.is_json, target.model,
                            starts=tuple(target.compiled.matcher_after(p) for p in prefixes))
    if monitors:
        given = [prompt] if single else list(prompt)
        target = _Monitored(target.compiled, target.constraint, target.is_json, target.model,
                            monitors=monitors, vocab=model.vocab,
                            documents=tuple(prefixes) if prefixes is not None else
                            tuple(prompt_document(p, ids, model.vocab, chat) for p, ids in zip(given, prompts)),
                            starts=target.starts)
    try:
        results = _generate_ids(model, prompts, target, options, max_new_tokens, seed, speculator)
        if monitors:
            for res, state in zip(results, target.made):
                state.stats.report(res.stats)
    finally:
        if speculator is not None:
            speculator.close()
    return results[0] if single else results


def _prefixes(prefix) -> list[str] | None:
    """``prefix=`` as a list of strings (None when not given)."""
    if prefix is None:
        return None
    if isinstance(prefix, str):
        return [prefix]
    if isinstance(prefix, (list, tuple)) and prefix and all(isinstance(p, str) for p in prefix):
        return list(prefix)
    raise ConfigurationError(f"prefix= takes the text before the cursor (a str, or a list of str "
                             f"with one per prompt), not {type(prefix).__name__}")


def _is_ids(p) -> bool:
    return (isinstance(p, (list, tuple)) and len(p) > 0
            and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in p))


def _prompt_ids(model, prompt, chat: bool) -> tuple[bool, list[list[int]]]:
    """(whether ``prompt`` was one prompt, the token ids of each); every prompt has at
    least one token, each a valid id of the model's vocabulary."""
    size = model.vocab.size

    def ids_of(p, where: str) -> list[int]:
        if isinstance(p, str):
            tokenize = getattr(model, "prompt_ids", None)
            if tokenize is None:
                raise ConfigurationError(f"a {type(model).__name__} has no tokenizer: give the "
                                         "prompt as token ids")
            ids = [int(t) for t in tokenize(p, chat=chat)]
            if not ids:
                raise ConfigurationError(
                    f"{where} {p!r} comes to no tokens (this tokenizer adds no BOS and "
                    f"{'the model has no chat template' if chat else 'chat=False'}): a model needs "
                    "at least one token to continue; give a non-empty prompt")
            return ids
        if _is_ids(p):
            bad = [int(t) for t in p if not 0 <= int(t) < size]
            if bad:
                raise ConfigurationError(f"{where} holds token id {bad[0]}, outside the model's "
                                         f"vocabulary [0, {size})")
            return [int(t) for t in p]
        if isinstance(p, (list, tuple)) and not p:
            raise ConfigurationError(f"{where} is an empty list of token ids: a model needs at "
                                     "least one token to continue")
        raise ConfigurationError(f"{where} must be a string or a list of token ids, not "
                                 f"{type(p).__name__}")

    if isinstance(prompt, str) or _is_ids(prompt):
        return True, [ids_of(prompt, "prompt")]
    if not isinstance(prompt, (list, tuple)):
        raise ConfigurationError(f"prompt must be a string, token ids, or a list of either, not "
                                 f"{type(prompt).__name__}")
    return False, [ids_of(p, f"prompt[{i}]") for i, p in enumerate(prompt)]


def _check_room(model, prompts: list[list[int]], max_new_tokens: int) -> None:
    """Refuse prompts that, with ``max_new_tokens``, do not fit the model's context (when
    the model states one as ``context_length``)."""
    context = context_length(model)
    if context is None:
        return
    for i, ids in enumerate(prompts):
        where = "the prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if len(ids) >= context:
            raise ConfigurationError(f"{where} is {len(ids)} tokens, but the model's context "
                                     f"holds {context}: shorten the prompt")
        if len(ids) + max_new_tokens > context:
            raise ConfigurationError(
                f"{where} ({len(ids)} tokens) plus max_new_tokens={max_new_tokens} exceeds the "
                f"model's context of {context} tokens: use max_new_tokens <= {context - len(ids)} "
                "or a shorter prompt")


def _generate_ids(model, prompts: list[list[int]], target: Target, options, max_new_tokens: int,
                  seed: int | None, speculator: Speculator | None = None) -> list[GenerationResult]:
    vocab = model.vocab
    if speculator is not None:
        speculator.policy = DraftPolicy("checked")   # samplers that never compute full masks
    if isinstance(options, (Constrained, AWRS)):
        population = [Sequence(p, target.new_state()) for p in prompts]
        if isinstance(options, Constrained):
            sampler = MaskedSampler(options, vocab, seed)
            if speculator is not None:
                speculator.policy = (DraftPolicy("greedy") if options.temperature == 0 else DraftPolicy(
                    "sample", options.temperature, options.top_k, options.top_p, sampler.generator))
        else:
            sampler = AWRSSampler(vocab, np.random.default_rng(seed))
        before = [seq.constraint.counter.count for seq in population]
        population = run(model, population, sampler, max_new_tokens=max_new_tokens, drafter=speculator)
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
            results.append(_smc(model, prompt, target, options, max_new_tokens, one_seed, speculator))
        else:
            results.append(_asap(model, prompt, target, options, max_new_tokens, one_seed, speculator))
    return results


def _smc(model, prompt, target: Target, options: SMC, max_new_tokens: int, seed,
         speculator: Speculator | None) -> GenerationResult:
    rng = np.random.default_rng(seed)
    twist = options.twist
    if isinstance(twist, ASApTrie):
        if twist.prompt_ids != prompt or twist.max_new_tokens != max_new_tokens:
            raise ConfigurationError("an ASAp twist must be built for the same prompt and "
                                     "max_new_tokens as the SMC run")
        twist = twist.twist
    res = smc(model, target.new_state(), prompt, num_particles=options.num_particles,
              max_new_tokens=max_new_tokens, rng=rng, ess_threshold=options.ess_threshold,
              resampling=options.resampling, twist=twist, drafter=speculator)
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


def _asap(model, prompt, target: Target, options: ASApSampling, max_new_tokens: int, seed,
          speculator: Speculator | None) -> GenerationResult:
    state, trie = options.state, options.trie
    if trie is None:
        state = state if state is not None else shared_state(model)
        with state._lock:   # one draw at a time per ASAp: a trie is not shared by threads
            trie = state.trie(model, target.compiled, prompt, max_new_tokens=max_new_tokens)
            try:
                return _asap_draw(model, prompt, target, trie, options.warmup, seed, speculator)
            finally:
                state._release(trie)
    if trie.lm is None:
        raise ConfigurationError("this ASApTrie belongs to a gramgen.ASAp: pass the ASAp as "
                                 "sampler= instead")
    if trie.lm is not model:
        raise ConfigurationError("the ASApTrie passed was built for another model")
    if (trie.prompt_ids != prompt or trie.max_new_tokens != max_new_tokens
            or not trie.same_grammar(target.compiled)):
        raise ConfigurationError("the ASApTrie passed was built for another prompt, grammar or "
                                 "max_new_tokens")
    return _asap_draw(model, prompt, target, trie, options.warmup, seed, speculator)


def _asap_draw(model, prompt, target: Target, trie: ASApTrie, warmup: int, seed,
               speculator: Speculator | None = None) -> GenerationResult:
    """``warmup`` samples to refine ``trie``, then the one returned."""
    if seed is not None:
        trie.rng = np.random.default_rng(seed)
    masks_before = trie.mask_evaluations
    for _ in range(warmup):
        trie.sample(drafter=speculator)
    s = trie.sample(drafter=speculator)
    masks = trie.mask_evaluations - masks_before
    seq = Sequence(prompt, None, tokens=s.tokens[:-1], logprob=s.logprob, finish="eos",
                   eos_token=s.tokens[-1])
    if trie.last_stats is not None:   # the run that gave the sample
        seq.stats = GenerationStats(**vars(trie.last_stats))
    seq.stats.sampled_tokens = len(s.tokens)
    seq.stats.prompt_tokens = len(prompt)
    result = _result(model.vocab, seq, target)
    result.extras.update(constraint_evaluations=masks * model.vocab.size, masks=masks,
                         trie_nodes=trie.num_nodes, trie_bytes=trie.nbytes,
                         samples_drawn=trie.samples_drawn, steps=len(s.tokens))
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
