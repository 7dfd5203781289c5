"""Compiled grammars and matchers: the per-sequence runtime."""

from .compile import CompileOptions, compile
from .compiled import CompiledGrammar
from .document import Document
from .indenter import IndentedMatcher
from .infiller import Hole, Infiller, InfillResult
from .matcher import Matcher

__all__ = ["CompileOptions", "CompiledGrammar", "Document", "Hole", "IndentedMatcher", "InfillResult", "Infiller",
           "Matcher", "compile"]
