"""The public :class:`Grammar`: one object whatever the source format."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigurationError
from .gbnf import gbnf_to_ir
from .ir import GrammarIR, Rule
from .json_schema.compiler import DEFAULT_WHITESPACE, json_schema_to_ir
from .lark import lark_to_ir
from .regex import parse_ecma_regex, parse_regex
from .sources import SchemaLike, builtin_grammar_start, builtin_grammar_text, grammar_format, read_grammar_file, read_schema


class Grammar:
    """A set of byte strings, defined by a Lark / GBNF grammar, a regex or a JSON Schema.

    Build one with the ``from_*`` constructors or :meth:`builtin`; compile it against a
    tokenizer's vocabulary with :func:`gramgen.compile`.
    """

    def __init__(self, ir: GrammarIR):
        ir.validate()
        self.ir = ir

    def __repr__(self) -> str:
        return (f"Grammar({self.ir.source!r}, {len(self.ir.rules)} rules, "
                f"{len(self.ir.lexemes)} lexemes)")

    @classmethod
    def from_lark(cls, text: str, start: str = "start", *, source: str = "<lark>",
                  import_paths: tuple[str, ...] = ()) -> Grammar:
        """A grammar in Lark's EBNF, as lark accepts it (see README for the semantics).

        ``import_paths``: folders searched by ``%import`` of grammar files."""
        if not isinstance(start, str):
            raise ConfigurationError(f"from_lark(start=) takes a rule name (str), not {type(start).__name__}")
        return cls(lark_to_ir(text, start=start, source=source, import_paths=list(import_paths)))

    @classmethod
    def from_gbnf(cls, text: str, start: str = "root", *, source: str = "<gbnf>") -> Grammar:
        """A grammar in llama.cpp's GBNF."""
        if not isinstance(text, str):
            raise ConfigurationError(f"from_gbnf() takes the grammar as a str, not {type(text).__name__}")
        if not isinstance(start, str):
            raise ConfigurationError(f"from_gbnf(start=) takes a rule name (str), not {type(start).__name__}")
        return cls(gbnf_to_ir(text, start=start, source=source))

    @classmethod
    def from_regex(cls, pattern: str, flags: int | str = 0, *,
                   flavor: Literal["python", "ecma"] = "python", source: str = "<regex>") -> Grammar:
        """The strings that the whole regular expression matches.

        ``flavor="python"``: Python ``re`` syntax and meaning (``re.fullmatch(pattern, s,
        flags)``); ``flags`` is an ``re`` flag int or letters ``"imsxua"``.
        ``flavor="ecma"``: ECMA-262 (JavaScript with the ``u`` flag, as JSON Schema's
        ``pattern`` and the peers read regexes), matched from end to end; ``flags`` is
        letters of ``"ims"`` (``d g u y`` change nothing) or ``re.I`` / ``re.M`` / ``re.S``.

        Raises :class:`~gramgen.errors.GrammarError` (line and column in the pattern) for
        a malformed pattern or a construct that is not regular (backreferences,
        lookarounds, ``\\b``), :class:`~gramgen.errors.ConfigurationError` for a bad
        ``flavor`` or ``flags``."""
        if not isinstance(pattern, str):
            raise ConfigurationError(f"pattern must be a str, not {type(pattern).__name__}")
        if flavor == "ecma":
            rx = parse_ecma_regex(pattern, flags, source=source)
        elif flavor == "python":
            if isinstance(flags, bool) or not isinstance(flags, (int, str)):
                raise ConfigurationError(f"flags must be an re flag int or a string of flag letters, "
                                         f"not {type(flags).__name__}")
            rx = parse_regex(pattern, flags, source=source, max_expanded=None)
        else:
            raise ConfigurationError(f"flavor must be 'python' or 'ecma', not {flavor!r}")
        ir = GrammarIR(rules=[Rule("start", ("REGEX",))], lexemes={"REGEX": rx},
                       start="start", source=source)
        return cls(ir)

    @classmethod
    def from_json_schema(cls, schema: SchemaLike, *,
                         whitespace: Literal["compact", "standard", "flexible"] = DEFAULT_WHITESPACE,
                         separators: tuple[str, str] | None = None,
                         indent: int | str | None = None,
                         max_whitespace: int = 20,
                         property_order: Literal["schema", "any"] = "schema",
                         strict: bool = False,
                         refs: Mapping[str, Any] | None = None,
                         draft: Literal[4, 6, 7, 2019, 2020] | None = None,
                         lenient: bool = False,
                         lenient_formats: bool = False,
                         unknown_keywords: Literal["warn", "error", "ignore"] = "warn",
                         max_lexeme_nodes: int = 0) -> Grammar:
        """The JSON texts valid under a JSON Schema.

        Parameters
        ----------
        schema
            A dict or bool, JSON text (str or bytes), a path to a JSON file (str or
            os.PathLike) or a pydantic model class; read by
            :func:`gramgen.grammar.sources.read_schema`.
        whitespace : {"compact", "standard", "flexible"}
            The layout, as ``json.dumps`` writes it: "compact" ``{"a":1,"b":[1,2]}``;
            "standard" ``{"a": 1, "b": [1, 2]}`` (json.dumps' default); "flexible" any JSON
            whitespace between tokens, at most ``max_whitespace`` characters per gap.
        separators : (str, str), optional
            ``(item_separator, key_separator)`` as in ``json.dumps``, overriding the mode's:
            "," and ":" with optional JSON whitespace around them. Not with "flexible".
        indent : int or str, optional
            As in ``json.dumps(indent=...)``: each item on its own line, indented by that
            many spaces (or that string) per level; ``{}`` and ``[]`` stay empty; the
            separators default to ``(",", ": ")``. Containers then nest at most
            16 deep (deeper ones are left out of the grammar). Not with "flexible".
        max_whitespace : int
            The most whitespace characters in one gap (flexible whitespace), so that a
            model cannot loop on spaces.
        property_order : {"schema", "any"}
            "schema": declared properties in the order of the schema; "any": in every
            order (up to 8 per object).
        strict : bool
            True: an object may hold only the names its schema declares (``properties``,
            ``required``, names matching ``patternProperties``, across ``allOf`` / ``$ref`` /
            ``anyOf`` parts) unless the schema explicitly sets ``additionalProperties`` or
            ``unevaluatedProperties``, which keep their meaning; a schema with no assertions
            (``{}``) stays any value. False: the specification (absent means true).
        refs : mapping of str to schema, optional
            Documents for remote ``$ref`` URIs; references are never fetched.
        draft : {4, 6, 7, 2019, 2020}, optional
            The draft to read the schema by; None: from ``$schema``, else 2020-12.
        lenient : bool
            True: relax what cannot be enforced exactly instead of raising; the relaxed
            keywords are listed in ``grammar.ir.meta["relaxed"]``.
        lenient_formats : bool
            True: a ``format`` gramgen does not know is an annotation (any string), listed
            in ``grammar.ir.meta["unknown_formats"]``; False: a SchemaError.
        unknown_keywords : {"warn", "error", "ignore"}
            Keywords gramgen does not know (a vendor's ``x-...``, a typo such as
            ``maxLenght``) constrain nothing, as the specification says; they are listed
            in ``grammar.ir.meta["unknown_keywords"]`` (JSON pointers). "warn": also one
            :class:`~gramgen.errors.UnknownKeywordWarning` naming them (and the nearest
            known keyword); "error": a SchemaError at the first; "ignore": no warning.
        max_lexeme_nodes : int
            0 (the default): objects, arrays and alternatives stay grammar rules over the
            lexemes of keys and values, which compile fastest (those automata are mostly
            shared or composed). N > 0: every non-recursive rule whose regex has at most N
            nodes is merged into one lexeme (fewer parser steps per mask, larger automata
            built at compile). The language is the same either way.

        Raises :class:`~gramgen.SchemaError` for a schema that cannot be read or enforced
        (a keyword value the draft's metaschema does not allow included, at its pointer),
        :class:`~gramgen.errors.ConfigurationError` for a bad option value.
        """
        return cls(json_schema_to_ir(read_schema(schema).value, whitespace=whitespace,
                                     separators=separators, indent=indent,
                                     max_whitespace=max_whitespace, property_order=property_order,
                                     strict=strict, refs=refs, draft=draft, lenient=lenient,
                                     lenient_formats=lenient_formats, unknown_keywords=unknown_keywords,
                                     max_lexeme_nodes=max_lexeme_nodes))

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, start: str | None = None) -> Grammar:
        """Load by suffix: ``.lark``, ``.gbnf`` / ``.ebnf``, ``.json`` (a JSON Schema, with
        the defaults of :meth:`from_json_schema`; call that with the path for its options).

        ``start``: the start rule (default ``start`` for Lark, ``root`` for GBNF; none for
        a schema). A Lark file's relative ``%import`` resolves against its folder."""
        kind = grammar_format(path)
        source = os.fspath(path)
        if kind == "json_schema":
            if start is not None:
                raise ConfigurationError("start= does not apply to a JSON Schema file")
            return cls.from_json_schema(Path(path))
        text = read_grammar_file(path)
        if kind == "lark":
            return cls.from_lark(text, start or "start", source=source)
        return cls.from_gbnf(text, start or "root", source=source)

    @classmethod
    def builtin(cls, name: str) -> Grammar:
        """A grammar shipped with gramgen, by name (:func:`gramgen.grammar.builtin_grammars`):
        ``json`` (RFC 8259), ``python`` (lark's ``python.lark``: real Python files, any
        indentation, see :mod:`gramgen.runtime.indenter`), ``python_subset`` (context-free,
        4-space indentation up to 6 levels), ``sql`` (SELECT queries).

        Raises :class:`~gramgen.errors.ConfigurationError` listing the names for another."""
        return cls.from_lark(builtin_grammar_text(name), builtin_grammar_start(name),
                             source=f"<builtin {name}.lark>")
