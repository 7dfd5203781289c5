"""Compiled grammars and matchers: the per-sequence runtime."""

from .compile import CompileOptions, compile
from .compiled import CompiledGrammar
from .matcher import Matcher

__all__ = ["CompileOptions", "CompiledGrammar", "Matcher", "compile"]
