"""The public :class:`Grammar`: one object whatever the source format."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import GrammarError
from .gbnf import gbnf_to_ir
from .ir import GrammarIR, Rule
from .json_schema.compiler import json_schema_to_ir
from .lark import lark_to_ir
from .regex import parse_regex


class Grammar:
    """A set of byte strings, defined by a Lark / GBNF grammar, a regex or a JSON Schema.

    Build one with the ``from_*`` constructors; compile it against a tokenizer's
    vocabulary with :func:`gramgen.compile`.
    """

    def __init__(self, ir: GrammarIR):
        ir.validate()
        self.ir = ir

    def __repr__(self) -> str:
        return (f"Grammar({self.ir.source!r}, {len(self.ir.rules)} rules, "
                f"{len(self.ir.lexemes)} lexemes)")

    @classmethod
    def from_lark(cls, text: str, start: str = "start", *, source: str = "<lark>",
                  import_paths: tuple[str, ...] = ()) -> "Grammar":
        """A grammar in Lark's EBNF, as lark accepts it (see README for the semantics).

        ``import_paths``: folders searched by ``%import`` of grammar files."""
        return cls(lark_to_ir(text, start=start, source=source, import_paths=list(import_paths)))

    @classmethod
    def from_gbnf(cls, text: str, start: str = "root", *, source: str = "<gbnf>") -> "Grammar":
        """A grammar in llama.cpp's GBNF."""
        return cls(gbnf_to_ir(text, start=start, source=source))

    @classmethod
    def from_regex(cls, pattern: str, flags: int = 0, *, source: str = "<regex>") -> "Grammar":
        """The strings that fully match a Python regular expression."""
        rx = parse_regex(pattern, flags, source=source)
        ir = GrammarIR(rules=[Rule("start", ("REGEX",))], lexemes={"REGEX": rx},
                       start="start", source=source)
        return cls(ir)

    @classmethod
    def from_json_schema(cls, schema, **options) -> "Grammar":
        """A JSON Schema (dict, JSON text, file path or pydantic model class)."""
        return cls(json_schema_to_ir(schema, **options))

    @classmethod
    def from_file(cls, path: str | os.PathLike, **options) -> "Grammar":
        """Load by suffix: ``.lark``, ``.gbnf`` / ``.ebnf``, ``.json`` (a JSON Schema)."""
        p = Path(path)
        suffix = p.suffix.lower()
        text = p.read_text(encoding="utf-8")
        if suffix == ".lark":
            return cls.from_lark(text, source=str(p), **options)
        if suffix in (".gbnf", ".ebnf"):
            return cls.from_gbnf(text, source=str(p), **options)
        if suffix == ".json":
            return cls.from_json_schema(text, **options)
        raise GrammarError(f"unknown grammar file suffix {suffix!r} (expected .lark, .gbnf, .ebnf, .json)",
                           source=str(p))
