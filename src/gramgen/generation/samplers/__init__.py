"""The samplers: strategies of one step of the generation loop.

=============  =====================================================================
sampler        draws from / costs
=============  =====================================================================
constrained    masked sampling (GCD; greedy at temperature 0): each token from ``p``
               restricted to the allowed tokens. One full mask per token; biased
               towards prefixes the model likes but rarely completes.
awrs           the same local distribution as ``constrained`` at temperature 1, exactly,
               checking only the tokens it draws (a few per step when the model mostly
               agrees with the constraint); also an importance weight per sequence.
smc            ``num_particles`` AWRS sequences, weighted and resampled: consistent
               for the model conditioned on the constraint, with an unbiased estimate
               of the probability that the model's output is accepted.
asap           exact conditional in the limit: an :class:`ASApTrie` per prompt and
               grammar learns how likely each prefix is to end grammatically; the
               tries live in a :class:`~gramgen.ASAp` kept across calls (one per
               model in process by default, or one you hold, save and load).
=============  =====================================================================

Each has a small frozen options class (:class:`Constrained`, :class:`AWRS`, :class:`SMC`,
:class:`ASApSampling`); :func:`sampler_options` turns ``generate``'s ``sampler=`` and its
keyword arguments into one, validated once. ``sampler=`` may also be a :class:`~gramgen.ASAp`
(or one :class:`ASApTrie`): ASAp sampling that learns in it.
"""

from __future__ import annotations

from typing import Union

from ...errors import ConfigurationError
from .asap import ASAp, ASApSample, ASApSampling, ASApTrie, shared_state
from .awrs import AWRS, AWRSSampler, AWRSStep, WithoutReplacement, awrs_step
from .masked import Constrained, MaskedSampler, check_sampling_arguments
from .smc import SMC, SMCResult, SMCSampler, smc

__all__ = ["ASAp", "ASApSample", "ASApSampling", "ASApTrie", "AWRS", "AWRSSampler", "AWRSStep", "Constrained",
           "MaskedSampler", "SAMPLERS", "SMC", "SMCResult", "SMCSampler", "SamplerOptions",
           "WithoutReplacement", "awrs_step", "check_sampling_arguments", "sampler_options",
           "shared_state", "smc"]

SAMPLERS = ("constrained", "awrs", "smc", "asap")

SamplerOptions = Union[Constrained, AWRS, SMC, ASApSampling]


def sampler_options(sampler: str | SamplerOptions | ASAp | ASApTrie, *, temperature: float = 0.0,
                    top_k: int | None = None, top_p: float | None = None,
                    num_particles: int | None = None, jump_forward: bool = True) -> SamplerOptions:
    """The options object for ``sampler`` (a name, an options object, or the ASAp state to
    learn in) and the loose keyword arguments of :func:`gramgen.generate`; every value or
    combination that cannot apply raises :class:`~gramgen.ConfigurationError`."""
    check_sampling_arguments(temperature, top_k, top_p, num_particles)
    temperature = float(temperature)
    top_k = None if top_k is None else int(top_k)
    top_p = None if top_p is None else float(top_p)
    num_particles = None if num_particles is None else int(num_particles)
    if isinstance(sampler, ASAp):
        sampler = ASApSampling(state=sampler)
    elif isinstance(sampler, ASApTrie):
        sampler = ASApSampling(trie=sampler)
    if isinstance(sampler, str):
        if sampler not in SAMPLERS:
            raise ConfigurationError(f"sampler {sampler!r} is unknown (choose from "
                                     + ", ".join(repr(s) for s in SAMPLERS) + ")")
    elif not isinstance(sampler, (Constrained, AWRS, SMC, ASApSampling)):
        raise ConfigurationError(f"sampler must be a name ({', '.join(SAMPLERS)}), an options "
                                 f"object (Constrained, AWRS, SMC, ASApSampling) or a gramgen.ASAp, "
                                 f"not {type(sampler).__name__}")
    if not isinstance(jump_forward, bool):
        raise ConfigurationError(f"jump_forward must be True or False, not {jump_forward!r}")
    name = sampler if isinstance(sampler, str) else type(sampler).__name__
    if num_particles is not None and sampler != "smc":
        raise ConfigurationError("num_particles applies to sampler='smc' only"
                                 + ("" if isinstance(sampler, str) else " (set it on the SMC options)"))
    if sampler == "constrained":
        return Constrained(temperature, top_k, top_p, jump_forward)
    loose = temperature != 0.0 or top_p is not None or top_k is not None
    if isinstance(sampler, Constrained):
        if loose:
            raise ConfigurationError("give temperature, top_k and top_p on the Constrained "
                                     "options or as arguments, not both")
        return sampler
    if temperature not in (0.0, 1.0) or top_p is not None or top_k is not None:
        raise ConfigurationError(f"sampler {name!r} samples the model at temperature 1: "
                                 "temperature, top_p and top_k apply to sampler='constrained' only")
    if sampler == "awrs":
        return AWRS()
    if sampler == "smc":
        return SMC() if num_particles is None else SMC(num_particles=num_particles)
    if sampler == "asap":
        return ASApSampling()
    return sampler
