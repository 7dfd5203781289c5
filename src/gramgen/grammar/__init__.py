"""Grammar frontends (Lark, GBNF, regex, JSON Schema) lowering to one IR."""

from .grammar import Grammar
from .ir import GrammarIR, Rule

__all__ = ["Grammar", "GrammarIR", "Rule"]
