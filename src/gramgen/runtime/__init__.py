"""Compiled grammars and matchers: the per-sequence runtime."""

from .compiled import CompiledGrammar, compile
from .matcher import Matcher

__all__ = ["CompiledGrammar", "Matcher", "compile"]
