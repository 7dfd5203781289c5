"""One entry point for every sampler: :func:`run_sampler`.

=============  =====================================================================
sampler        draws from / costs
=============  =====================================================================
constrained    masked sampling (GCD): each token from ``p`` restricted to the allowed
               tokens. One full mask per token; biased towards prefixes the model
               likes but rarely completes.
awrs           the same local distribution as ``constrained``, exactly, checking only
               the tokens it draws (a few per step when the model mostly agrees with
               the constraint); also returns the sequence's importance weight.
smc            ``num_particles`` AWRS sequences, weighted and resampled: consistent
               for the model conditioned on the grammar, with an unbiased estimate of
               the probability that the model's output is accepted.
asap           exact conditional in the limit: an :class:`~gramgen.ASAp` trie learns
               how likely each prefix is to end grammatically (pass ``asap=`` to keep
               learning across calls, ``warmup=n`` to refine before sampling).
=============  =====================================================================

``finish_reason``: ``"eos"`` when the output ended with EOS (a complete word),
``"grammar"`` when no allowed token had model probability left (a dead end), and
``"max_new_tokens"`` when the budget ran out first (``complete`` then says whether the
text happens to be a complete word).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GramgenError
from .asap import ASAp
from .awrs import awrs_step
from .constraint import Constraint, as_constraint, known_mask
from .lm import LanguageModel, log_softmax
from .smc import smc

__all__ = ["SamplerResult", "run_sampler", "SAMPLERS"]

SAMPLERS = ("constrained", "asap", "awrs", "smc")


@dataclass
class SamplerResult:
    """Generated token ids (EOS included when drawn), their model log-probability at
    temperature 1, why generation stopped, whether the text is a complete word, and
    sampler-specific details in ``extras``."""

    tokens: list[int]
    logprob: float
    finish_reason: str
    complete: bool
    extras: dict[str, Any] = field(default_factory=dict)


def run_sampler(sampler: str, lm: LanguageModel, compiled, prompt_ids: list[int], *,
                max_new_tokens: int, seed: int | None, num_particles: int | None = None,
                **options) -> SamplerResult:
    """Generate one output after ``prompt_ids`` under ``compiled`` with ``sampler``.

    ``compiled`` is a :class:`~gramgen.CompiledGrammar`; ``awrs`` and ``smc`` also take any
    :class:`~gramgen.decoding.constraint.Constraint` (e.g. a predicate over the text).
    Options: ``temperature`` (constrained); ``ess_threshold``, ``resampling``, ``twist``
    (smc; ``twist`` may be an :class:`ASAp` whose bounds guide resampling); ``asap``,
    ``warmup`` (asap).
    """
    if sampler not in SAMPLERS:
        raise GramgenError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    rng = np.random.default_rng(seed)
    allowed_opts = {"constrained": {"temperature"}, "awrs": set(),
                    "smc": {"ess_threshold", "resampling", "twist"},
                    "asap": {"asap", "warmup"}}[sampler]
    unknown = set(options) - allowed_opts
    if unknown:
        raise GramgenError(f"sampler {sampler!r} does not take {', '.join(sorted(unknown))}")
    if num_particles is not None and sampler != "smc":
        raise GramgenError("num_particles only applies to sampler='smc'")
    start = time.perf_counter()
    prompt = [int(t) for t in prompt_ids]
    if sampler == "constrained":
        out = _constrained(lm, _compiled(compiled, sampler), prompt, max_new_tokens, rng,
                           float(options.get("temperature", 1.0)))
    elif sampler == "awrs":
        out = _awrs(lm, as_constraint(compiled), prompt, max_new_tokens, rng)
    elif sampler == "smc":
        out = _smc(lm, as_constraint(compiled), prompt, max_new_tokens, rng,
                   num_particles or 8, options)
    else:
        out = _asap(lm, _compiled(compiled, sampler), prompt, max_new_tokens, seed, options)
    out.extras["seconds"] = time.perf_counter() - start
    return out


def _compiled(compiled, sampler: str):
    from ..runtime.compiled import CompiledGrammar

    if not isinstance(compiled, CompiledGrammar):
        raise GramgenError(f"sampler {sampler!r} needs full masks: pass a CompiledGrammar "
                           "(use 'awrs' or 'smc' for other constraints)")
    return compiled


def _finish(tokens: list[int], eos: set[int], dead: bool, complete_now: bool) -> tuple[str, bool]:
    if tokens and tokens[-1] in eos:
        return "eos", True
    if dead:
        return "grammar", False
    return "max_new_tokens", complete_now


def _constrained(lm, compiled, prompt, max_new_tokens, rng, temperature) -> SamplerResult:
    if temperature <= 0:
        raise ValueError("temperature must be positive (use a tiny value for near-greedy)")
    matcher = compiled.matcher()
    eos = set(lm.vocab.eos_token_ids)
    tokens: list[int] = []
    logprob = 0.0
    dead = False
    masks = 0
    for _ in range(max_new_tokens):
        logp = lm.next_logprobs([prompt + tokens])[0]
        mask = matcher.mask()
        masks += 1
        scores = np.where(mask, logp / temperature, -np.inf)
        if not np.isfinite(scores).any():
            dead = True
            break
        probs = np.exp(log_softmax(scores))
        t = int(rng.choice(probs.shape[0], p=probs / probs.sum()))
        logprob += float(logp[t])
        matcher.advance(t)
        tokens.append(t)
        if t in eos:
            break
    reason, complete = _finish(tokens, eos, dead, matcher.is_accepting())
    return SamplerResult(tokens, logprob, reason, complete, {
        "constraint_evaluations": masks * lm.vocab.size, "masks": masks, "steps": len(tokens)})


def _awrs(lm, constraint: Constraint, prompt, max_new_tokens, rng) -> SamplerResult:
    state = constraint.fork()
    before = constraint.counter.count
    eos = set(lm.vocab.eos_token_ids)
    tokens: list[int] = []
    logprob = 0.0
    log_weight = 0.0
    rejections = 0
    dead = False
    for _ in range(max_new_tokens):
        logp = lm.next_logprobs([prompt + tokens])[0]
        draw = awrs_step(logp, state.check, rng, getattr(state, "mask", None),
                         known=known_mask(state))
        rejections += draw.rejections
        if draw.token is None:
            dead = True
            log_weight = -np.inf
            break
        state.advance(draw.token)
        tokens.append(draw.token)
        logprob += float(logp[draw.token])
        log_weight += draw.log_weight
        if draw.token in eos:
            break
    reason, complete = _finish(tokens, eos, dead, state.is_complete())
    return SamplerResult(tokens, logprob, reason, complete, {
        "constraint_evaluations": constraint.counter.count - before, "rejections": rejections,
        "log_weight": log_weight, "steps": len(tokens)})


def _smc(lm, constraint: Constraint, prompt, max_new_tokens, rng, k, options) -> SamplerResult:
    twist = options.get("twist")
    if isinstance(twist, ASAp):
        if twist.prompt_ids != prompt or twist.max_new_tokens != max_new_tokens:
            raise GramgenError("an ASAp twist must be built for the same prompt and "
                               "max_new_tokens as the SMC run")
        twist = twist.twist
    res = smc(lm, constraint, prompt, num_particles=k, max_new_tokens=max_new_tokens, rng=rng,
              ess_threshold=float(options.get("ess_threshold", 0.5)),
              resampling=options.get("resampling", "multinomial"), twist=twist)
    eos = set(lm.vocab.eos_token_ids)
    lw = res.log_weights
    if np.isfinite(lw).any():
        w = np.exp(lw - np.max(lw))
        pick = res.particles[int(rng.choice(len(w), p=w / w.sum()))]
    else:  # nothing finished: report an unfinished particle (alive ones first)
        alive = [p for p in res.particles if not p.dead]
        pick = alive[0] if alive else res.particles[0]
    reason, complete = _finish(pick.tokens, eos, pick.dead, pick.constraint.is_complete())
    particles = [{"tokens": list(p.tokens), "log_weight": float(w), "logprob": p.logprob,
                  "finished": p.finished} for p, w in zip(res.particles, lw)]
    return SamplerResult(list(pick.tokens), pick.logprob, reason, complete, {
        "log_ml": res.log_ml, "particles": particles, "constraint_evaluations": res.evaluations,
        "resample_steps": res.resample_steps, "ess": res.ess, "steps": res.steps,
        "tokens_proposed": res.tokens_proposed})


def _asap(lm, compiled, prompt, max_new_tokens, seed, options) -> SamplerResult:
    asap = options.get("asap")
    if asap is None:
        asap = ASAp(lm, compiled, prompt, max_new_tokens=max_new_tokens, seed=seed)
    elif asap.prompt_ids != prompt or not asap.same_grammar(compiled):
        raise GramgenError("the ASAp trie passed was built for another prompt or grammar")
    masks_before = asap.mask_evaluations
    for _ in range(int(options.get("warmup", 0))):
        asap.sample()
    s = asap.sample()
    masks = asap.mask_evaluations - masks_before
    return SamplerResult(s.tokens, s.logprob, "eos", True, {
        "constraint_evaluations": masks * lm.vocab.size, "masks": masks,
        "trie_nodes": asap.num_nodes, "samples_drawn": asap.samples_drawn,
        "steps": len(s.tokens)})
