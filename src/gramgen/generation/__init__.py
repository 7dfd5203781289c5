"""Generation: one model adapter, one loop, samplers as strategies of its step, one result.

Data flows one way: a constraint (:class:`~gramgen.CompiledGrammar` or any
:class:`Constraint`) and a :class:`LanguageModel` go into :func:`loop.run` with a sampler;
:func:`generate` is the thin function over it. See :mod:`.samplers` for which sampler to
use and what each costs.
"""

from .api import Target, generate, target_for
from .diffusion import (CallableDiffusionLM, DiffusionLM, DiffusionResult, DiffusionStats, TransformersDiffusionLM,
                        generate_diffusion)
from .fill import FillResult, FillStats, FimFormat, fill, fim_format
from .constraint import (Constraint, EvaluationCounter, MatcherConstraint, PredicateConstraint,
                         as_constraint)
from .lm import LanguageModel, Session, SyntheticLM, TransformersLM
from .loop import Choice, Draft, Sequence, run
from .result import FinishReason, GenerationResult, GenerationStats
from .samplers import (AWRS, SAMPLERS, SMC, ASAp, ASApSample, ASApSampling, ASApTrie, AWRSStep,
                       Constrained, SamplerOptions, SMCResult, awrs_step, smc)
from .speculation import Speculation, Speculator

__all__ = [
    "ASAp", "ASApSample", "ASApSampling", "ASApTrie", "AWRS", "AWRSStep", "CallableDiffusionLM", "Choice", "Constrained",
    "Constraint", "DiffusionLM", "DiffusionResult", "DiffusionStats", "Draft",
    "EvaluationCounter", "FillResult", "FillStats", "FimFormat", "FinishReason", "GenerationResult", "GenerationStats", "LanguageModel",
    "MatcherConstraint", "PredicateConstraint", "SAMPLERS", "SMC", "SMCResult", "SamplerOptions",
    "Sequence", "Session", "Speculation", "Speculator", "SyntheticLM", "Target", "TransformersDiffusionLM", "TransformersLM", "as_constraint", "awrs_step",
    "fill", "fim_format", "generate", "generate_diffusion", "run", "smc", "target_for",
]
