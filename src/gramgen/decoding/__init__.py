"""Sampling from a language model under a constraint: masked (GCD), AWRS, SMC and ASAp.

See :mod:`gramgen.decoding.samplers` for which one to use and what each costs.
"""

from .asap import ASAp, ASApSample
from .awrs import AWRSStep, awrs_step
from .constraint import (Constraint, EvaluationCounter, MatcherConstraint, PredicateConstraint,
                         as_constraint)
from .lm import LanguageModel, SyntheticLM, TransformersLM, load_smollm2
from .samplers import SAMPLERS, SamplerResult, run_sampler
from .smc import Particle, SMCResult, smc

__all__ = [
    "ASAp", "ASApSample", "AWRSStep", "Constraint", "EvaluationCounter", "LanguageModel",
    "MatcherConstraint", "Particle", "PredicateConstraint", "SAMPLERS", "SMCResult",
    "SamplerResult", "SyntheticLM", "TransformersLM", "as_constraint", "awrs_step",
    "load_smollm2", "run_sampler", "smc",
]
