"""gramgen: exact, fast grammar-constrained generation for language models.

The public surface (see the README): a :class:`Grammar` from any source, compiled against a
:class:`Vocabulary` into a :class:`CompiledGrammar`, whose :class:`Matcher` masks the
tokens of one sequence; :func:`generate` runs a model under it; :class:`LogitsProcessor`
plugs it into transformers' own ``generate``.
"""

from .automata.bitmask import allocate_token_bitmask
from .automata.vocabulary import Vocabulary
from .errors import (CompileLimitError, ConfigurationError, GramgenError, GrammarError, SchemaError,
                     TextRejected, TokenizerError, TokenRejected, UnknownKeywordWarning)
from .generation import (ASAp, DiffusionResult, FillResult, GenerationResult, GenerationStats, Speculation, fill,
                         generate, generate_diffusion)
from .grammar import Grammar
from .hf import LogitsProcessor, Model, load_model
from .runtime import CompiledGrammar, CompileOptions, Document, Hole, Infiller, InfillResult, Matcher, compile

__version__ = "0.1.0"

__all__ = [
    "ASAp", "CompileLimitError", "DiffusionResult", "FillResult", "CompileOptions", "CompiledGrammar", "ConfigurationError", "Document",
    "GenerationResult", "GenerationStats", "GramgenError", "Grammar", "GrammarError", "Hole", "InfillResult",
    "Infiller",
    "LogitsProcessor", "Matcher", "Model", "SchemaError", "Speculation", "TextRejected", "TokenRejected",
    "TokenizerError",
    "UnknownKeywordWarning", "Vocabulary", "__version__", "allocate_token_bitmask", "compile", "fill", "generate", "generate_diffusion", "load_model",
]
