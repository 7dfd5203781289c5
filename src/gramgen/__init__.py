"""gramgen: exact, fast grammar-constrained generation for language models."""

from .automata.vocabulary import Vocabulary
from .decoding import ASAp
from .errors import (CompileLimitError, GramgenError, GrammarError, SchemaError, TokenizerError,
                     TokenRejected)
from .grammar import Grammar
from .integrations import GenerationResult, LogitsProcessor, Model, generate, load_model
from .runtime import CompiledGrammar, Matcher, compile
from .runtime.bitmask import allocate_token_bitmask

__version__ = "0.1.0"

__all__ = [
    "ASAp", "CompileLimitError", "CompiledGrammar", "GramgenError", "Grammar", "GrammarError",
    "Matcher", "SchemaError", "TokenRejected", "TokenizerError", "Vocabulary",
    "allocate_token_bitmask", "compile", "__version__",
]
# generation with Hugging Face models (issue 5)
__all__ += ["GenerationResult", "LogitsProcessor", "Model", "generate", "load_model"]
