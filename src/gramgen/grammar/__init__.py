"""Grammar frontends (Lark, GBNF, regex, JSON Schema) lowering to one IR."""

from .grammar import Grammar
from .ir import GrammarIR, Rule
from .sources import SchemaSource, builtin_grammars, read_schema

__all__ = ["Grammar", "GrammarIR", "Rule", "SchemaSource", "builtin_grammars", "read_schema"]
