"""JSON Schema -> grammar IR.

One nonterminal per (sub)schema, memoized by node identity so ``$ref`` recursion becomes
grammar recursion. Primitive values are lexemes; objects and arrays are small rule
systems. Everything the grammar cannot express exactly raises :class:`SchemaError` with the
keyword's JSON pointer (or, with ``lenient=True``, is relaxed and listed in
``Grammar.ir.meta["relaxed"]``). The documented over-constraints (README, "JSON Schema"):
properties in schema order, canonical numbers (no exponent once bounded, no ``-0``),
``enum``/``const`` values serialized canonically, bounded whitespace.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import warnings
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

# the modules beside this one by their own names (``from .. import cpdfa`` would import
# the package gramgen.grammar, whose Grammar imports this module)
import gramgen.grammar.cpdfa as cpdfa
import gramgen.grammar.json_schema.numbers as numbers
import gramgen.grammar.json_schema.keywords as keywords
import gramgen.grammar.json_schema.strings as strings

from ...errors import CompileLimitError, ConfigurationError, GrammarError, SchemaError, UnknownKeywordWarning
from ..ir import (CONSTANT_LEXEMES, COUNTED_CHAINS, EMPTY, NOTHING, WITHOUT_PREFIXES, CharRanges, GrammarIR, Regex,
                  Repeat, Rule, literal, prune_rules)
from ..simplify import alt, collapse_regular, seq
from ..split import CountedRules
from ..sources import read_schema
from .keywords import check_document
from .layout import Layout
from .loader import DRAFTS, Resolver, draft_of

try:  # enum/const values are checked against their sibling keywords (a dependency; imported
    # with the frontend so that its ~40 ms import is not paid by the first schema with an enum)
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import specification_with
except ImportError:  # pragma: no cover
    jsonschema = None

ANNOTATIONS = {
    "title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$defs", "definitions", "$vocabulary",
    "contentEncoding", "contentMediaType", "contentSchema", "discriminator", "nullable_annotation",
}
"""Keywords that never constrain an instance (``$defs`` holds schemas only reached by $ref)."""

SUPPORTED = {
    "type", "enum", "const", "$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems",
    "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
}
"""Every validation keyword of drafts 4-2020-12 (some only in simple forms, see below);
anything else that is not an annotation is an unknown extension keyword, which validators
ignore, so we do too."""

KNOWN_UNSUPPORTED = {"$dynamicRef", "$recursiveRef", "$recursiveAnchor"}

TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
STRING_FORMATS_WE_REJECT: set[str] = set()
"""Standard formats with no grammar here: a SchemaError (or lenient). Every standard
format now has one (``regex``, ``iri*``, ``idn-*`` and ``uri-template`` as ASCII subsets)."""
EXACT_FORMATS = {"date", "uuid", "ipv4", "ipv6", "duration", "json-pointer", "relative-json-pointer", "uri",
                 "uri-reference"}
"""Formats whose regex here is the whole format (the others accept a documented subset, so
their negation would let through strings that are in fact of that format)."""

UNKNOWN_KEYWORD_POLICIES = ("warn", "error", "ignore")
DEFAULT_WHITESPACE = "standard"
"""The layout :meth:`Grammar.from_json_schema` and ``generate()`` use unless told (see
:mod:`.layout`): json.dumps' ``", "`` / ``": "``, the layout models write JSON in. Chosen by
measurement: with SmolLM2 it gets more extracted values right than the compact layout, whose
``":"`` rules out the ``' "'`` token the model wants after a key (bench/results/EXTRACTION.md)."""
MAX_INDENT_DEPTH = 16
"""With ``indent``, containers nest at most this deep: the layout of a value depends on its
depth, so each (schema, depth) is its own nonterminal, and a recursive schema or an
any-value schema would otherwise need infinitely many. Deeper containers are left out of
the grammar (an over-constraint, never a wrong layout); a schema that cannot be met
within the bound is a SchemaError saying so."""
MAX_RULES = 200_000
LITERAL_CHUNK = 1000
"""enum / const text per lexeme, in characters (see ``_enum``)."""
LONG_STRING = 256
"""Plain strings allowing more characters than this are counted in blocks by rules."""
BLOCK = 64
MAX_STRING_LENGTH = 1_000_000
MAX_UNROLL = 1_000
MAX_MERGE_DEPTH = 32
MAX_NEGATION_DEPTH = 12
"""Nested negations (a negated property of a negated property ...) followed at most this deep."""
MAX_NEGATED_ONEOF = 6
"""A negated oneOf of n branches is "none or two of them": 1 + n(n-1)/2 alternatives."""
MAX_BRANCH_PAIRS = 256
"""allOf of two anyOf/oneOf lists: at most this many combined branches (each is compiled)."""


class _NotExpressible(Exception):
    """A negation (for not / if / overlapping oneOf) has no exact schema here."""


class SchemaCompiler:
    def __init__(self, schema: Any, *, whitespace: str = DEFAULT_WHITESPACE, max_whitespace: int = 20,
                 separators: tuple[str, str] | None = None, indent: int | str | None = None,
                 strict: bool = False, lenient: bool = False, lenient_formats: bool = False,
                 refs: dict[str, Any] | None = None, draft: int | None = None,
                 property_order: str = "schema", max_lexeme_nodes: int = 0,
                 unknown_keywords: str = "warn"):
        if unknown_keywords not in UNKNOWN_KEYWORD_POLICIES:
            raise ConfigurationError(f"unknown_keywords must be one of "
                                     f"{', '.join(map(repr, UNKNOWN_KEYWORD_POLICIES))}, not {unknown_keywords!r}")
        self.unknown_policy = unknown_keywords
        if property_order not in ("schema", "any"):
            raise ConfigurationError(f"property_order must be 'schema' or 'any', not {property_order!r}")
        if draft is not None and (isinstance(draft, bool) or draft not in DRAFTS.values()):
            raise ConfigurationError(f"draft must be one of {', '.join(map(str, DRAFTS.values()))} or None, "
                                     f"not {draft!r}")
        self.layout = Layout.of(whitespace, separators, indent, max_whitespace)
        #: the layout options as given: the JSON Schema grammars of one layout share their
        #: value lexemes (see ``runtime.json_standard``)
        self.layout_options = (("whitespace", whitespace), ("separators", tuple(separators) if separators else None),
                               ("indent", indent), ("max_whitespace", max_whitespace))
        schema = read_schema(schema).value
        self.draft = draft or draft_of(schema)
        if refs is not None and not isinstance(refs, Mapping):
            raise ConfigurationError(f"refs must be a mapping of URI to schema, not {type(refs).__name__}")
        #: pointers of keywords gramgen does not know (checked before anything reads them)
        self.unknown_keywords: list[str] = []
        self._unknown(check_document(schema, self.draft))
        for uri in refs or {}:
            if not isinstance(uri, str):
                raise ConfigurationError(f"refs: the URIs must be strings, not {uri!r}")
        self.resolver = Resolver(schema, self.draft, refs)
        self.resolver.on_document = self._check_remote
        if not isinstance(strict, bool):
            raise ConfigurationError(f"strict must be True or False, not {strict!r}")
        self.strict = strict
        self.lenient = lenient
        self.lenient_formats = lenient_formats
        self.any_order = property_order == "any"
        if isinstance(max_lexeme_nodes, bool) or not isinstance(max_lexeme_nodes, int) or max_lexeme_nodes < 0:
            raise ConfigurationError(f"max_lexeme_nodes must be an int >= 0, not {max_lexeme_nodes!r}")
        self.max_lexeme_nodes = max_lexeme_nodes
        #: the depth (containers around it) of the value being compiled: with ``indent``,
        #: nonterminals are per (schema, depth); otherwise always 0
        self._depth = 0
        self._depth_capped = False  # some container was left out for MAX_INDENT_DEPTH
        #: (pointer, keywords and why) of subschemas found to accept nothing, for the
        #: message when the whole schema does
        self._empties: list[tuple[str, str]] = []
        self.relaxed: list[str] = []
        #: pointers of ``format`` values that are no format gramgen knows, taken as
        #: annotations (any string) under ``lenient_formats``: ``Grammar.ir.meta["unknown_formats"]``
        self.unknown_formats: dict[str, str] = {}
        self.rules: list[Rule] = []
        self.lexemes: dict[str, Regex] = {}
        #: the nonterminals that count the blocks of each long string, in order: the
        #: parser names the ones whose next blocks look alike by one class (``ir.meta
        #: ["counted_chains"]``, see ``ParserTables``), so that masks at one block's end
        #: are reused at the next
        self.chains: list[tuple[str, ...]] = []
        self._lex_ids: dict[int, str] = {}
        #: (id(node), depth) -> (node, its nonterminal or None): each entry holds its node,
        #: so that the id cannot be reused by another object while the entry exists (nodes
        #: made while compiling, such as the variants of an object, die after their value())
        self._memo: dict[tuple[int, int], tuple[Any, str | None]] = {}
        self._pieces: dict[tuple, str] = {}
        self._keep: list[Any] = []  # merged schemas stay alive so their ids stay unique
        self._n = 0
        self._validator_cls = None
        #: key lexemes made more cheaply from any key's automaton (``ir.meta[WITHOUT_PREFIXES]``)
        self._without_prefixes: dict[str, tuple] = {}
        #: lexemes that are a format's spelling (``ir.meta[CONSTANT_LEXEMES]``)
        self._constant_lexemes: dict[str, Regex] = {}

    def _check_remote(self, uri: str, doc: Any) -> None:
        """A document of ``refs``, checked as the root was, once a reference reaches it."""
        try:
            draft = draft_of(doc, self.draft)
        except SchemaError:
            draft = self.draft  # a custom metaschema: read by the schema's draft
        self._unknown(check_document(doc, draft, where=uri + "#"))

    def _unknown(self, pointers: list[str]) -> None:
        """Keywords gramgen does not know: a SchemaError under ``unknown_keywords="error"``;
        else listed (and, under "warn", one warning when the build ends)."""
        if pointers and self.unknown_policy == "error":
            name = _keyword_of(pointers[0])
            more = f" (and {len(pointers) - 1} more)" if len(pointers) > 1 else ""
            raise SchemaError(f"unknown keyword {name!r}{keywords.suggestion(name)}{more}; JSON Schema "
                              "ignores unknown keywords: unknown_keywords='warn' or 'ignore' compiles the "
                              "schema with it ignored", pointers[0])
        self.unknown_keywords += pointers

    def _warn_unknown(self) -> None:
        if not self.unknown_keywords or self.unknown_policy != "warn":
            return
        said: dict[str, str] = {}   # (one suggestion per word: a typo tends to repeat)
        for p in self.unknown_keywords[:10]:
            word = _keyword_of(p)
            if word not in said:
                said[word] = keywords.suggestion(word)
        shown = ", ".join(p + said[_keyword_of(p)] for p in self.unknown_keywords[:10])
        more = f" and {len(self.unknown_keywords) - 10} more" if len(self.unknown_keywords) > 10 else ""
        warnings.warn(f"JSON Schema keywords gramgen does not know, which constrain nothing: {shown}{more} "
                      "(grammar.ir.meta['unknown_keywords'] lists them; unknown_keywords='error' raises, "
                      "'ignore' is silent)", UnknownKeywordWarning, stacklevel=_caller_stacklevel())

    # -------------------------------------------------------------- plumbing

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def rule(self, lhs: str, *rhs: str) -> None:
        if len(self.rules) >= MAX_RULES:
            raise CompileLimitError(f"the schema needs more than {MAX_RULES} grammar rules")
        self.rules.append(Rule(lhs, tuple(rhs)))

    def lex(self, rx: Regex, hint: str = "L") -> str:
        key = id(rx)
        name = self._lex_ids.get(key)
        if name is None:
            name = self.fresh(hint)
            self.lexemes[name] = rx
            self._lex_ids[key] = name
            self._keep.append(rx)
        return name

    def unsupported(self, keyword: str, node: Any, why: str) -> None:
        """Raise, or with ``lenient`` record that ``keyword`` is relaxed."""
        pointer = self.resolver.pointer(node)
        where = f"{pointer}/{keyword}"
        if self.lenient:
            self.relaxed.append(f"{where}: {why}")
            return
        raise SchemaError(f"unsupported: {keyword} at {where or '/'}: {why} (pass lenient=True to relax it)",
                          where)

    def unknown_format(self, fmt: str, node: Any) -> None:
        """A ``format`` that is no format gramgen knows (``int32``, ``html-selector``):
        a SchemaError naming it, unless the caller passed ``lenient_formats=True`` (or
        ``lenient=True``); then it is an annotation, as the specification allows (any
        string), listed in ``Grammar.ir.meta["unknown_formats"]``."""
        where = self.resolver.pointer(node) + "/format"
        if not (self.lenient_formats or self.lenient):
            raise SchemaError(f"unknown format {fmt!r}: gramgen has no grammar for it "
                              "(lenient_formats=True takes unknown formats as annotations: any string)", where)
        self.unknown_formats[where] = fmt

    # -------------------------------------------------------------- whitespace & punctuation

    def key(self, name_rx: Regex) -> tuple[str, ...]:
        """The symbols of a key and the key separator after it: one lexeme, or, where the
        separator is flexible whitespace around the colon, the key's lexeme and the
        separator's, one lexeme shared by every key (bounded whitespace twice: ~40 states
        that each key's automaton would repeat, where the separator's is kept per layout
        with the standard lexemes)."""
        if self._colon_apart:
            return self.lex(name_rx, "KEY"), self._piece(("colon",), self.layout.colon, "COLON")
        return (self.lex(seq([name_rx, self.layout.colon()]), "KEY"),)

    @property
    def _colon_apart(self) -> bool:
        """Whether the key separator is a lexeme of its own (see :meth:`key`)."""
        return self.layout.flexible and self.layout.max_ws > 0

    def container(self, open_ch: str, close_ch: str) -> tuple[str, str | None, str, str, str]:
        """Lexemes of a container at the current depth: (opening bracket, what precedes the
        first item or None, item separator, closing bracket after items, closing bracket
        of the empty container)."""
        lay, d = self.layout, self._depth if self.layout.by_depth else 0
        first = lay.first(d)
        close = self._piece(("close", close_ch, d), lambda: lay.close(close_ch, d, False), "CLOSE")
        return (self._piece(("open", open_ch), lambda: lay.open(open_ch), "OPEN"),
                None if first is None else self._piece(("first", d), lambda: first, "NL"),
                self._piece(("comma", d), lambda: lay.comma(d), "COMMA"),
                close,
                self._piece(("close_empty", close_ch), lambda: lay.close(close_ch, d, True), "CLOSE")
                if lay.by_depth else close)

    @staticmethod
    def item(first_item: bool, lead: str | None, comma: str, *symbols: str) -> tuple[str, ...]:
        """The right-hand side of one container item: its separator (or the lead of the
        first item) and its symbols."""
        if first_item:
            return symbols if lead is None else (lead, *symbols)
        return (comma, *symbols)

    def child(self, node: Any) -> str | None:
        """``value`` of a container's item (one level deeper)."""
        return self.value(node, self._depth + 1)

    def _piece(self, key: tuple, make, hint: str) -> str:
        """One lexeme per distinct piece (``key``), built once by ``make``."""
        if key not in self._pieces:
            self._pieces[key] = self.lex(make(), hint)
        return self._pieces[key]

    # -------------------------------------------------------------- entry

    def build(self) -> GrammarIR:
        top = self.value(self.resolver.root)
        if top is None:
            raise self._empty_error("the schema accepts no JSON value at all", "")
        if self.layout.flexible:
            ws = self.lex(self.layout.ws, "WS") if self.layout.max_ws > 0 else None
            if ws:
                self.rule("start", ws, top, ws)
                self.rule("start", ws, top)
                self.rule("start", top, ws)
            self.rule("start", top)
        else:
            self.rule("start", top)
        ir = GrammarIR(self.rules, self.lexemes, "start", source="<json schema>",
                       meta={"relaxed": list(self.relaxed), "draft": self.draft,
                             "unknown_keywords": list(self.unknown_keywords),
                             "unknown_formats": [f"{p}: {f}" for p, f in self.unknown_formats.items()],
                             "json_layout": self.layout_options,
                             COUNTED_CHAINS: tuple(self.chains),
                             WITHOUT_PREFIXES: dict(self._without_prefixes),
                             CONSTANT_LEXEMES: dict(self._constant_lexemes)})
        try:
            ir = _prune_unproductive(ir)
        except SchemaError as exc:
            raise self._empty_error(exc.message, exc.pointer) from None
        if not self.max_lexeme_nodes:
            # (objects stay rules over the lexemes of their keys and values: most of those
            # automata are kept or composed, where a merged object's is built whole)
            return ir
        try:
            return collapse_regular(ir, max_regex_nodes=self.max_lexeme_nodes, max_expanded=4000)
        except GrammarError:
            return ir

    def empty(self, node: Any, why: str) -> list[str]:
        """No instance of this type is valid under ``node``: note which keywords made it
        so (the error names them if the whole schema ends up empty); no alternatives."""
        self._empties.append((self.resolver.pointer(node), why))
        return []

    def _empty_error(self, message: str, pointer: str) -> SchemaError:
        """The schema accepts nothing: name the keywords that emptied its parts."""
        if self._empties:
            (first, why), rest = self._empties[0], self._empties[1:4]
            also = "".join(f"; and at {p or '#'}: {w}" for p, w in rest)
            more = f" (and {len(self._empties) - 4} more)" if len(self._empties) > 4 else ""
            return SchemaError(f"{message}: {why}{also}{more}{self._cap_note()}", first)
        return SchemaError(message + self._cap_note(), pointer)

    def _cap_note(self) -> str:
        if not self._depth_capped:
            return ""
        return (f" within {MAX_INDENT_DEPTH} nested containers (with indent=, deeper containers are "
                "left out of the grammar; use indent=None)")

    # -------------------------------------------------------------- schemas

    def value(self, node: Any, depth: int | None = None) -> str | None:
        """Nonterminal for the instances valid under ``node`` at ``depth`` (default: the
        current one; only ``indent`` tells depths apart). None: no instance is valid."""
        depth = (self._depth if depth is None else depth) if self.layout.by_depth else 0
        saved, self._depth = self._depth, depth
        try:
            return self._value(node, depth)
        finally:
            self._depth = saved

    def _value(self, node: Any, depth: int) -> str | None:
        key = (id(node), depth)
        found = self._memo.get(key)
        if found is not None:
            return found[1]
        if isinstance(node, dict) and "$ref" in node and not any(k in node for k in KNOWN_UNSUPPORTED) and (
                self.draft <= 7 or not _asserts({k: v for k, v in node.items() if k != "$ref"})):
            name = self.fresh("v")
            self._memo[key] = (node, name)  # a cycle of bare references derives nothing
            target = self.resolver.resolve(node["$ref"], self.resolver.pointer(node) + "/$ref")
            sym = self._value(target, depth)
            self._memo[key] = (node, sym)
            return sym
        name = self.fresh("v")
        self._memo[key] = (node, name)  # recursion through $ref refers back to this name
        try:
            alternatives = self._alternatives(node)
        except CompileLimitError as exc:
            if exc.pointer is not None:
                raise
            # the innermost subschema that went over a budget names where
            raise CompileLimitError(exc.message, self.resolver.pointer(node)) from None
        if not alternatives:
            self._memo[key] = (node, None)
            return None
        for rhs in alternatives:
            self.rule(name, rhs)
        return name

    def _alternatives(self, node: Any) -> list[str]:
        if node is True:
            return self.any_value()
        if node is False:
            return []
        if not isinstance(node, dict):
            raise SchemaError("a schema must be an object or a boolean", self.resolver.pointer(node))
        node = self.normalize(node, 0)
        if node is True:
            return self.any_value()
        if node is False:
            return []
        return self._branches(node)

    def normalize(self, node: Any, depth: int) -> Any:
        """Resolve ``$ref`` and merge ``allOf`` into one schema (without recursion into
        the targets of self-references, which stay references)."""
        if depth > MAX_MERGE_DEPTH:
            raise SchemaError("allOf / $ref merging nests too deeply (a recursive allOf?)",
                              self.resolver.pointer(node))
        if isinstance(node, bool) or not isinstance(node, dict):
            return node
        for kw in KNOWN_UNSUPPORTED:
            if kw in node:
                self.unsupported(kw, node, "dynamic references are not supported")
        if "$ref" in node:
            target = self.resolver.resolve(node["$ref"], self.resolver.pointer(node) + "/$ref")
            if self.draft <= 7:
                return self.normalize(target, depth + 1)
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if not _asserts(rest):
                return self.normalize(target, depth + 1)
            return self.merge([target, rest], node, depth + 1, owner=1)
        if "allOf" in node:
            parts = node["allOf"]
            rest = {k: v for k, v in node.items() if k != "allOf"}
            return self.merge([rest, *parts], node, depth + 1)
        return node

    def merge(self, parts: list[Any], where: Any, depth: int, owner: int = 0) -> Any:
        """allOf of ``parts`` as one schema, or SchemaError when not exactly mergeable.

        ``owner`` is the part holding the keywords of the schema being merged into; only
        its ``unevaluated*`` may see the other parts' properties/items (a nested one
        sees only its own subschema, which merging would hide)."""
        normalized = []
        for i, part in enumerate(parts):
            part = self.normalize(part, depth)
            if part is False:
                return False
            if part is True:
                continue
            if isinstance(part, dict) and any(k in part for k in ("if", "then", "else")):
                part = self._if_then_else(part)  # if/then/else only see each other within one part
                part = self.normalize(part, depth)
                if part is False:
                    return False
                if part is True:
                    continue
            if i != owner:
                for kw in ("unevaluatedProperties", "unevaluatedItems"):
                    if kw in part and part[kw] is not True:
                        self.unsupported(kw, part, "inside a subschema that is merged with others")
            normalized.append(part)
        merged: dict[str, Any] = {}
        for part in normalized:
            for kw, val in part.items():
                if kw in ANNOTATIONS or kw in _STRUCTURE:
                    continue
                if kw not in SUPPORTED and kw not in KNOWN_UNSUPPORTED and not kw.startswith("__"):
                    continue  # an extension keyword (x-..., editor hints): validators ignore it
                if kw not in merged:
                    merged[kw] = val
                    continue
                merged[kw] = self._merge_keyword(kw, merged[kw], val, merged, where)
        self._merge_objects(normalized, merged, where)
        self._merge_arrays(normalized, merged, where)
        self._keep.append(merged)
        self.resolver.pointers[id(merged)] = (merged, self.resolver.pointer(where))
        return merged

    def _merge_objects(self, parts: list[dict], merged: dict, where: Any) -> None:
        """properties / patternProperties / additionalProperties of several parts: each
        part's additionalProperties applies to the names *it* does not declare."""
        keys = ("properties", "patternProperties", "additionalProperties", "__pp_parts__")
        obj = [p for p in parts if any(k in p for k in keys)]
        if not obj:
            return
        if len(obj) == 1:
            for k in keys:
                if k in obj[0]:
                    merged[k] = obj[0][k]
            return
        names: list[str] = []
        for p in obj:
            names.extend(k for k in p.get("properties", {}) if k not in names)
        merged["properties"] = {name: _all_of([c for p in obj for c in _name_constraints(p, name)])
                                for name in names}
        if any("additionalProperties" in p for p in obj) or not self.strict:
            merged["additionalProperties"] = _all_of([p.get("additionalProperties", True) for p in obj])
        # else (strict, no part says): absent, so names that no part declares or matches are
        # refused, as ``unevaluatedProperties: false`` over the parts would
        merged.pop("patternProperties", None)
        # a name that no part declares is checked by each part on its own: against that
        # part's matching patterns, or else its additionalProperties (see _key_regions)
        sub_parts = []
        for p in obj:
            if "__pp_parts__" in p:
                sub_parts.extend(p["__pp_parts__"])
            else:
                sub_parts.append((list(p.get("properties", {})), dict(p.get("patternProperties", {})),
                                  p.get("additionalProperties", True)))
        if any(pp for _, pp, _ in sub_parts):
            merged["__pp_parts__"] = sub_parts

    def _items_of(self, p: dict) -> tuple[list, Any]:
        if self.draft <= 2019:
            if isinstance(p.get("items"), list):
                return list(p["items"]), p.get("additionalItems", True)
            return [], p.get("items", True)
        return list(p.get("prefixItems", [])), p.get("items", True)

    def _merge_arrays(self, parts: list[dict], merged: dict, where: Any) -> None:
        arr = [p for p in parts if any(k in p for k in ("items", "prefixItems", "additionalItems"))]
        if not arr:
            return
        if len(arr) == 1:
            for k in ("items", "prefixItems", "additionalItems"):
                if k in arr[0]:
                    merged[k] = arr[0][k]
            return
        shapes = [self._items_of(p) for p in arr]
        n = max(len(pre) for pre, _ in shapes)
        prefix = [_all_of([pre[i] if i < len(pre) else tail for pre, tail in shapes]) for i in range(n)]
        tail = _all_of([tail for _, tail in shapes])
        if self.draft <= 2019:
            if prefix:
                merged["items"], merged["additionalItems"] = prefix, tail
            else:
                merged["items"] = tail
        else:
            merged["prefixItems"], merged["items"] = prefix, tail

    def _merge_keyword(self, kw: str, a: Any, b: Any, merged: dict, where: Any) -> Any:
        if a == b and kw not in ("anyOf", "oneOf", "not"):
            return a
        if kw == "type":
            ta = {a} if isinstance(a, str) else set(a)
            tb = {b} if isinstance(b, str) else set(b)
            both = _intersect_types(ta, tb)
            return sorted(both) if both else []
        if kw == "required":
            return list(dict.fromkeys([*a, *b]))
        if kw in ("minimum", "minLength", "minItems", "minProperties", "minContains"):
            return max(a, b)
        if kw in ("maximum", "maxLength", "maxItems", "maxProperties", "maxContains"):
            return min(a, b)
        if kw == "exclusiveMinimum" and not isinstance(a, bool) and not isinstance(b, bool):
            return max(a, b)
        if kw == "exclusiveMaximum" and not isinstance(a, bool) and not isinstance(b, bool):
            return min(a, b)
        if kw == "dependentSchemas":
            out = dict(a)
            for k, v in b.items():
                out[k] = {"allOf": [out[k], v]} if k in out else v
            return out
        if kw == "dependentRequired":
            out = dict(a)
            for k, v in b.items():
                out[k] = list(dict.fromkeys([*out.get(k, []), *v]))
            return out
        if kw == "anyOf":
            if a == b:  # the same list reached twice (a $ref used along two paths): A and A = A
                return list(a)
            # allOf[anyOf A, anyOf B] = anyOf of the pairwise merges, less the pairs whose
            # types cannot meet (each other's or the merged schema's): those match nothing
            pairs = [(x, y) for x in a for y in b if _types_meet(x, y, merged.get("type"))]
            if len(pairs) > MAX_BRANCH_PAIRS:
                raise CompileLimitError(f"allOf of two {kw} lists makes {len(pairs)} combined branches "
                                        f"(limit {MAX_BRANCH_PAIRS})")
            return [x if x == y else {"allOf": [x, y]} for x, y in pairs] or [False]
        if kw == "oneOf":
            if a == b:  # exactly one of A, twice over: still exactly one of A
                return list(a)
            if len(a) * len(b) > MAX_BRANCH_PAIRS:
                raise CompileLimitError(f"allOf of two {kw} lists makes {len(a) * len(b)} combined branches "
                                        f"(limit {MAX_BRANCH_PAIRS})")
            return self._merge_oneofs(a, b, where)
        if kw in ("items", "additionalProperties", "additionalItems", "propertyNames", "contains",
                  "unevaluatedProperties", "unevaluatedItems") and not isinstance(a, list) \
                and not isinstance(b, list):
            return {"allOf": [a, b]}
        if kw == "enum":
            return [x for x in a if any(_json_equal(x, y) for y in b)]
        if kw == "const":
            return a if _json_equal(a, b) else {"__gramgen_conflict__": True}
        if kw == "pattern":
            return _Patterns([*_as_patterns(a), *_as_patterns(b)])
        if kw == "format":
            return self._merge_format(a, b, where)
        if kw == "not":
            return {"anyOf": [a, b]}
        if kw == "multipleOf":
            return _lcm_decimal(numbers.as_decimal(a), numbers.as_decimal(b))
        if kw == "uniqueItems":
            return a or b
        if kw == "__not_integer__":
            return a or b
        if kw.startswith("__not_") or kw in ("__some_key__", "__every_item__"):
            return [*a, *b]
        if kw == "$ref":
            return {"allOf": [{"$ref": a}, {"$ref": b}]}
        if kw == "__contains__":
            # "some item fails A" and "some item fails B" become "some item fails both":
            # never wider than the schema (a documented over-constraint when they differ)
            return {"allOf": [a, b]}
        raise SchemaError(f"unsupported: allOf combines two different {kw!r} values that cannot be merged exactly",
                          self.resolver.pointer(where) + "/allOf")

    def _merge_oneofs(self, a: list, b: list, where: Any) -> Any:
        """Exactly one of A and exactly one of B = exactly one of the pairs (A_i and B_j)."""
        if len(a) * len(b) > 64:
            raise SchemaError(f"unsupported: allOf of two oneOf lists ({len(a)} x {len(b)} pairs, limit 64)",
                              self.resolver.pointer(where) + "/allOf")
        return [{"allOf": [x, y]} for x in a for y in b]

    def _merge_format(self, a: str, b: str, where: Any) -> Any:
        raise SchemaError(f"unsupported: allOf combines formats {a!r} and {b!r}",
                          self.resolver.pointer(where) + "/allOf")

    def _branches(self, node: dict) -> list[str]:
        """Alternatives (nonterminal names) of a normalized schema."""
        if node.get("__gramgen_conflict__"):
            return self.empty(node, "const: the parts of allOf / $ref ask for different values")
        if "if" in node or "then" in node or "else" in node:
            return self._alternatives(self._if_then_else(node))
        if "not" in node:
            rest = {k: v for k, v in node.items() if k != "not"}
            try:
                negated = self.negate(node["not"], 0)
            except _NotExpressible as exc:
                self.unsupported("not", node, str(exc))
                return self._alternatives(rest)
            return self._alternatives(self.merge([rest, negated], node, 1))
        if "anyOf" in node:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            out = []
            for branch in node["anyOf"]:
                sym = self.value(self.merge([rest, branch], node, 1) if _asserts(rest) else branch)
                if sym is not None:
                    out.append(sym)
            return out
        if "oneOf" in node:
            rest = {k: v for k, v in node.items() if k != "oneOf"}
            branches = [self.merge([rest, b], node, 1) if _asserts(rest) else self.normalize(b, 1)
                        for b in node["oneOf"]]
            if not self._pairwise_disjoint(branches):
                branches = self._exclusive(node, node["oneOf"], rest, branches)
            out = []
            for b in branches:
                sym = self.value(b)
                if sym is not None:
                    out.append(sym)
            return out
        return self._typed(node)

    def _exclusive(self, node: dict, options: list, rest: dict, merged: list) -> list:
        """oneOf as anyOf of (branch i and no other branch that may overlap it): exact when
        every branch that overlaps another can be negated. ``merged``: the branches with
        ``rest`` merged in, for the disjointness test."""
        if len(options) > 8:
            self.unsupported("oneOf", node, f"{len(options)} overlapping branches (limit 8)")
            return [self.merge([rest, b], node, 1) for b in options]
        sigs = [self._signature(b) for b in merged]
        overlaps = [[j for j in range(len(options)) if j != i and not _disjoint(sigs[i], sigs[j])]
                    for i in range(len(options))]
        negations: dict[int, Any] = {}
        try:
            for j in sorted({j for js in overlaps for j in js}):
                negations[j] = self.negate(options[j], 0)
        except _NotExpressible as exc:
            self.unsupported("oneOf", node, "branches may overlap and one of them has no expressible "
                             f"negation ({exc})")
            return [self.merge([rest, b], node, 1) for b in options]
        out = []
        for i, b in enumerate(options):
            parts = [rest, b, *(negations[j] for j in overlaps[i])]
            out.append(self.merge(parts, node, 1))
        return out

    def _if_then_else(self, node: dict) -> Any:
        """if/then/else = (if and then) or (not if and else)."""
        rest = {k: v for k, v in node.items() if k not in ("if", "then", "else")}
        if "if" not in node:
            return rest  # then/else without if have no effect
        cond = node["if"]
        then, otherwise = node.get("then", True), node.get("else", True)
        try:
            negated = self.negate(cond, 0)
        except _NotExpressible as exc:
            self.unsupported("if", node, f"the negation of `if` is not expressible ({exc})")
            return rest
        return self.merge([rest, {"anyOf": [{"allOf": [cond, then]}, {"allOf": [negated, otherwise]}]}], node, 1)

    # -------------------------------------------------------------- negation (not, if, oneOf)

    def negate(self, schema: Any, depth: int) -> Any:
        """A schema for exactly the instances that ``schema`` rejects, built keyword by
        keyword (De Morgan): a keyword that constrains one type is false only for
        instances of that type, so its negation names that type."""
        if depth > MAX_NEGATION_DEPTH:
            raise _NotExpressible("negation nests too deeply")
        schema = self.normalize(schema, 1)
        if schema is True:
            return False
        if schema is False:
            return True
        alternatives: list[Any] = []
        for kw, v in schema.items():
            if kw in ANNOTATIONS:
                continue
            alternatives.extend(self._negate_keyword(kw, v, schema, depth))
        if not alternatives:
            return False
        return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}

    def _negate_keyword(self, kw: str, v: Any, schema: dict, depth: int) -> list[Any]:
        counts = {"minLength": ("string", "maxLength"), "maxLength": ("string", "minLength"),
                  "minItems": ("array", "maxItems"), "maxItems": ("array", "minItems"),
                  "minProperties": ("object", "maxProperties"), "maxProperties": ("object", "minProperties")}
        bounds = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
                  "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}
        if kw == "type":
            types = _types_of({"type": v})
            rest = [t for t in ("null", "boolean", "object", "array", "string") if t not in types]
            out: list[Any] = [{"type": rest}] if rest else []
            if "number" not in types:
                out.append({"type": "number", "__not_integer__": True} if "integer" in types else {"type": "number"})
            return out
        if kw in ("enum", "const"):
            return [{"__not_enum__": [v] if kw == "const" else list(v)}]
        if kw == "__not_enum__":
            return [{"enum": list(v)}]
        if kw == "required":
            return [{"type": "object", "properties": {r: False}} for r in v]
        if kw == "pattern":
            return [{"type": "string", "__not_pattern__": _as_patterns(v)}]
        if kw == "__not_pattern__":
            return [{"type": "string", "pattern": p} for p in v]
        if kw == "format" and isinstance(v, str):
            if v in EXACT_FORMATS:
                return [{"type": "string", "__not_format__": [v]}]
            if strings.format_regex(v) is None and v not in STRING_FORMATS_WE_REJECT:
                self.unknown_format(v, schema)
                return []  # an unknown format taken as an annotation never fails
            raise _NotExpressible(f"`format: {v}` cannot be negated (its grammar is a subset of the format)")
        if kw == "__not_format__":
            return [{"type": "string", "format": f} for f in v]
        if kw == "multipleOf":
            return [{"type": "number", "__not_multipleOf__": [v]}]
        if kw == "__not_integer__":
            return [{"type": "integer"}]
        if kw == "__not_multipleOf__":
            return [{"type": "number", "multipleOf": m} for m in v]
        if kw in bounds:
            if isinstance(v, bool):
                raise _NotExpressible("draft 4 boolean exclusive bounds")
            return [{"type": "number", bounds[kw]: v}]
        if kw in counts:
            t, other = counts[kw]
            n = self._count(schema, kw, 0)
            if kw.startswith("min"):
                return [{"type": t, other: n - 1}] if n > 0 else []
            return [{"type": t, other: n + 1}]
        if kw == "not":
            return [v]
        if kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            # some trigger is present and a name it requires is absent, or the object
            # fails the schema it brings
            out = []
            for k, dep in v.items():
                if isinstance(dep, list):
                    out.extend({"type": "object", "required": [k], "properties": {r: False}} for r in dep if r != k)
                else:
                    neg = self.negate(dep, depth + 1)
                    if neg is not False:
                        out.append({"allOf": [{"type": "object", "required": [k]}, neg]})
            return out
        if kw == "anyOf":
            return [{"allOf": [self.negate(b, depth + 1) for b in v]}]
        if kw == "oneOf":  # none matches, or two (or more) do
            if len(v) > MAX_NEGATED_ONEOF:
                raise _NotExpressible(f"`oneOf` with {len(v)} branches cannot be negated (limit {MAX_NEGATED_ONEOF})")
            none = {"allOf": [self.negate(b, depth + 1) for b in v]}
            return [none, *({"allOf": [v[i], v[j]]} for i in range(len(v)) for j in range(i + 1, len(v)))]
        if kw == "properties":
            return [{"type": "object", "required": [k], "properties": {k: self.negate(sub, depth + 1)}}
                    for k, sub in v.items()]
        if kw == "propertyNames":  # some name is not such a string
            return [{"type": "object", "__some_key__": [(self._string_part(self.negate(v, depth + 1)), True)]}]
        if kw == "additionalProperties" and not schema.get("__pp_parts__"):
            # some name that is neither declared nor matched by a pattern has a value failing it
            names = {"type": "string", "__not_enum__": list(schema.get("properties", {}))}
            if schema.get("patternProperties"):
                names["__not_pattern__"] = list(schema["patternProperties"])
            return [{"type": "object", "__some_key__": [(names, self.negate(v, depth + 1))]}]
        if kw == "patternProperties":
            return [{"type": "object", "__some_key__": [({"type": "string", "pattern": p}, self.negate(sub, depth + 1))]}
                    for p, sub in v.items()]
        if kw == "contains":
            if self.draft < 6:
                return []  # not a keyword before draft 6
            lo = self._count(schema, "minContains", 1) if self.draft >= 2019 else 1
            hi = self._count(schema, "maxContains", None) if self.draft >= 2019 else None
            if lo == 0 and hi is None:
                return []  # at least zero matches: never fails
            if lo == 1 and hi is None:  # no item meets it
                return [{"type": "array", "__every_item__": [self.negate(v, depth + 1)]}]
            raise _NotExpressible("`contains` with minContains/maxContains cannot be negated")
        if kw in ("minContains", "maxContains"):
            return []  # negated together with `contains` (alone, or before 2019-09, they never fail)
        if kw == "__contains__":  # no item meets it
            return [{"type": "array", "__every_item__": [self.negate(v, depth + 1)]}]
        if kw == "__every_item__":  # some item fails one of them
            return [{"type": "array", "__contains__": self.negate(x, depth + 1)} for x in v]
        if kw == "items" and not isinstance(v, list) and not schema.get("prefixItems"):
            # some item fails it: an internal keyword, active in every draft (`contains`
            # itself is not a keyword before draft 6, so a schema's own one is ignored there)
            return [{"type": "array", "__contains__": self.negate(v, depth + 1)}]
        if kw in SUPPORTED or kw.startswith("__"):
            raise _NotExpressible(f"`{'patternProperties' if kw == '__pp_parts__' else kw}` cannot be negated")
        return []  # extension keywords never fail

    @staticmethod
    def _string_part(schema: Any) -> Any:
        """The strings a schema accepts, as a schema (for a set of property names)."""
        if schema is True or schema is False:
            return {"type": "string"} if schema else False
        return {"allOf": [{"type": "string"}, schema]}

    # -------------------------------------------------------------- disjointness (oneOf)

    def _pairwise_disjoint(self, branches: list[Any]) -> bool:
        sigs = [self._signature(b) for b in branches]
        for i in range(len(sigs)):
            for j in range(i + 1, len(sigs)):
                if not _disjoint(sigs[i], sigs[j]):
                    return False
        return True

    def _signature(self, node: Any) -> tuple:
        """(possible instance types, enum values or None, required-const discriminators,
        required names, (closed, names): with closed only ``names`` may appear in an
        object, else ``names`` may not)."""
        node = self.normalize(node, 1)
        if node is False:
            return frozenset(), [], {}, frozenset(), (False, frozenset())
        if node is True:
            return frozenset(TYPES), None, {}, frozenset(), (False, frozenset())
        types = _types_of(node)
        values = None
        if "const" in node:
            values = [node["const"]]
        elif "enum" in node:
            values = list(node["enum"])
        discr = {}
        props = node.get("properties", {})
        for name in node.get("required", []):
            sub = props.get(name)
            if isinstance(sub, dict):
                sub = self.normalize(sub, 1)
                if isinstance(sub, dict) and ("const" in sub or "enum" in sub):
                    discr[name] = [sub["const"]] if "const" in sub else list(sub["enum"])
        plain = not any(k in node for k in ("patternProperties", "__pp_parts__", "unevaluatedProperties",
                                            "dependentSchemas", "dependencies", "allOf", "anyOf", "oneOf",
                                            "not", "if", "$ref"))
        if plain and self._additional(node) is False:
            names = (True, frozenset(k for k, v in props.items() if v is not False))
        else:
            names = (False, frozenset(k for k, v in props.items() if v is False))
        return types, values, discr, frozenset(node.get("required", [])), names

    # -------------------------------------------------------------- typed values

    def _typed(self, node: dict) -> list[str]:
        types = set(_types_of(node))
        if not types:
            return self.empty(node, "type: the parts of allOf / $ref have no type in common")
        if "enum" in node or "const" in node:
            return self._enum(node, types)
        if self._too_deep() and types & {"array", "object"}:
            types -= {"array", "object"}
        out = []
        excluded = node.get("__not_enum__", [])
        if "null" in types and not any(x is None for x in excluded):
            out.append(self.lex(literal("null"), "NULL"))
        if "boolean" in types:
            bools = [b for b in (True, False) if not any(x is b for x in excluded)]
            if bools:
                out.append(self.lex(alt([literal(json.dumps(b)) for b in bools]), "BOOL"))
        if any(isinstance(x, (dict, list)) for x in excluded) and types & {"array", "object"}:
            self.unsupported("not", node, "excluding array or object values (not enum/const)")
        if "number" in types:
            out.extend(self._number(node, integer=False))
        elif "integer" in types:
            out.extend(self._number(node, integer=True))
        if "string" in types:
            out.extend(self._string(node))
        if "array" in types:
            out.extend(self._array(node))
        if "object" in types:
            out.extend(self._object(node))
        return out

    def _too_deep(self) -> bool:
        """Whether a container here would pass MAX_INDENT_DEPTH (then it is left out)."""
        if self.layout.by_depth and self._depth >= MAX_INDENT_DEPTH:
            self._depth_capped = True
            return True
        return False

    # ---- enum / const

    def _enum(self, node: dict, types: set[str]) -> list[str]:
        values = [node["const"]] if "const" in node else list(node["enum"])
        if "const" in node and "enum" in node:
            values = [v for v in values if any(_json_equal(v, e) for e in node["enum"])]
        rest = {k: v for k, v in node.items() if k not in ("enum", "const")}
        kept = []
        for v in values:
            if _type_name(v) not in types and not (_type_name(v) == "integer" and "number" in types) \
                    and not (_type_name(v) == "number" and _is_integral(v) and "integer" in types):
                continue
            if any(_json_equal(v, x) for x in node.get("__not_enum__", [])):
                continue
            rest_checked = {k: x for k, x in rest.items() if k != "__not_enum__"}
            if _asserts(rest_checked) and not self._valid(v, rest_checked):
                continue
            kept.append(v)
        if not kept:
            kw = "const" if "const" in node else "enum"
            return self.empty(node, f"{kw}: no value is of the allowed type and meets the other keywords")
        # values in lexemes of at most LITERAL_CHUNK characters each (one lexeme is one
        # automaton, and 10,000 values or a 10,000-character const would pass its budget);
        # a longer string is a sequence of lexemes
        out, group, size = [], [], 0
        for v in kept:
            n = len(json.dumps(v, ensure_ascii=False))
            if isinstance(v, str) and n > LITERAL_CHUNK:
                out.append(self._long_literal(v))
                continue
            if group and size + n > LITERAL_CHUNK:
                out.append(self.lex(alt(group), "ENUM"))
                group, size = [], 0
            group.append(self.literal_value(v, self._depth))
            size += n
        if group:
            out.append(self.lex(alt(group), "ENUM"))
        return out

    def _long_literal(self, v: str) -> str:
        """A long string value as a rule over lexemes of LITERAL_CHUNK characters."""
        chars = [strings.json_char(((ord(c), ord(c)),)) for c in v]
        pieces = [chars[i:i + LITERAL_CHUNK] for i in range(0, len(chars), LITERAL_CHUNK)]
        pieces[0] = [literal('"'), *pieces[0]]
        pieces[-1] = [*pieces[-1], literal('"')]
        sym = self.fresh("literal")
        self.rule(sym, *(self.lex(seq(p), "CHUNK") for p in pieces))
        return sym

    def _valid(self, value: Any, schema: Any) -> bool:
        """Whether ``value`` satisfies ``schema`` (refs already absolute), per jsonschema;
        the internal "some property" keywords of negations are evaluated here (jsonschema
        has no keyword for them), the others are translated by ``_strip_internal``."""
        if schema is True or schema is False:
            return schema
        schema = dict(schema)
        some_key = schema.pop("__some_key__", [])
        some_extra = schema.pop("__some_extra__", [])
        if isinstance(value, dict):
            for names, sub in some_key:
                if not any(self._valid(k, names) and self._valid(x, sub) for k, x in value.items()):
                    return False
            for names_dfa, sub in some_extra:
                if not any(names_dfa.matches(k) and self._valid(x, sub) for k, x in value.items()):
                    return False
        if _mentions(schema, ("__some_key__", "__some_extra__")):
            self.unsupported("enum", schema, "an enum/const value under negated object keywords nested in "
                             "other keywords cannot be checked")
            return False
        if not _asserts(schema):
            return True
        if jsonschema is None:  # pragma: no cover
            raise SchemaError("enum/const next to other keywords needs the jsonschema package", "")
        if self._validator_cls is None:
            uri = {4: "http://json-schema.org/draft-04/schema#", 6: "http://json-schema.org/draft-06/schema#",
                   7: "http://json-schema.org/draft-07/schema#", 2019: "https://json-schema.org/draft/2019-09/schema",
                   2020: "https://json-schema.org/draft/2020-12/schema"}[self.draft]
            spec = specification_with(uri)
            resources = [(u, Resource(contents=d, specification=spec)) for u, d in self.resolver.documents.items()]
            self._registry = Registry().with_resources(resources)
            self._validator_cls = jsonschema.validators.validator_for({"$schema": uri})
        clean = _strip_internal(schema)
        try:
            return self._validator_cls(clean, registry=self._registry,
                                       format_checker=self._validator_cls.FORMAT_CHECKER).is_valid(value)
        except Exception as exc:  # noqa: BLE001 - a schema jsonschema cannot evaluate
            raise SchemaError(f"cannot evaluate enum value {value!r} against its sibling keywords: {exc}",
                              self.resolver.pointer(schema)) from None

    def literal_value(self, v: Any, depth: int = 0) -> Regex:
        """Canonical serialization of a JSON value at ``depth`` in the layout (strings in
        every spelling)."""
        if isinstance(v, str):
            return strings.string_literal(v)
        if isinstance(v, (dict, list)):
            lay = self.layout
            pairs = v.items() if isinstance(v, dict) else [(None, x) for x in v]
            items = []
            for i, (k, x) in enumerate(pairs):
                lead = lay.first(depth) if i == 0 else lay.comma(depth)
                if lead is not None:
                    items.append(lead)
                if k is not None:
                    items.extend([strings.string_literal(k), lay.colon()])
                items.append(self.literal_value(x, depth + 1))
            open_ch, close_ch = "{}" if isinstance(v, dict) else "[]"
            return seq([lay.open(open_ch), *items, lay.close(close_ch, depth, not items)])
        if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer():
            # 2, 2.0, 2.00 are the same JSON number: every integral spelling without exponent
            text = str(int(v))
            return seq([literal(text), Repeat(seq([literal("."), Repeat(literal("0"), 1, None)]), 0, 1)])
        return literal(json.dumps(v))

    # ---- numbers

    def _number(self, node: dict, integer: bool) -> list[str]:
        def dec(kw):
            v = node.get(kw)
            if v is None or isinstance(v, bool):
                return None
            try:
                return numbers.as_decimal(v)
            except TypeError:
                raise SchemaError(f"{kw} must be a number", self.resolver.pointer(node) + "/" + kw) from None
        lo, hi, xlo, xhi = dec("minimum"), dec("maximum"), dec("exclusiveMinimum"), dec("exclusiveMaximum")
        if node.get("exclusiveMinimum") is True:  # draft 4 booleans
            lo, xlo = None, lo
        if node.get("exclusiveMaximum") is True:
            hi, xhi = None, hi
        step = dec("multipleOf")
        if step is not None and step <= 0:
            raise SchemaError("multipleOf must be > 0", self.resolver.pointer(node) + "/multipleOf")
        if integer and node.get("__not_integer__"):
            return []
        rx = numbers.number_regex(integer, lo, hi, xlo, xhi, step)
        if any(b is not None for b in (lo, hi, xlo, xhi)) and cpdfa.from_regex(rx).is_empty():
            named = [f"{kw} {node[kw]}" for kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum",
                                                    "multipleOf") if kw in node]
            return self.empty(node, f"no {'integer' if integer else 'number'} meets {', '.join(named)}")
        if node.get("__not_integer__"):  # numbers with a non-zero fraction
            rx = cpdfa.regex_and(rx, numbers.NON_INTEGER)
        excluded = [v for v in node.get("__not_enum__", []) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        not_multiple = [numbers.as_decimal(m) for m in node.get("__not_multipleOf__", [])]
        if excluded or not_multiple:
            # exclusions are exact on canonical numerals only: no exponent, no -0
            base = numbers.INTEGER if integer else numbers.CANONICAL_DECIMAL
            dfa = cpdfa.difference(cpdfa.intersect(cpdfa.from_regex(rx), cpdfa.from_regex(base)),
                                   cpdfa.from_regex(numbers.NEGATIVE_ZERO))
            for m in not_multiple:
                dfa = cpdfa.difference(dfa, cpdfa.from_regex(numbers.multiple_of(m, not integer)))
            if excluded:
                dfa = cpdfa.difference(dfa, cpdfa.from_regex(alt([numbers.spellings(v) for v in excluded])))
            if dfa.is_empty():
                return []
            rx = cpdfa.as_regex(dfa)
        return [self.lex(rx, "INT" if integer else "NUM")]

    def _count(self, node: dict, kw: str, default):
        v = node.get(kw, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
            raise SchemaError(f"{kw} must be a non-negative integer", self.resolver.pointer(node) + "/" + kw)
        return int(v)

    # ---- strings

    def _string(self, node: dict) -> list[str]:
        lo = self._count(node, "minLength", 0)
        hi = self._count(node, "maxLength", None)
        patterns = _as_patterns(node["pattern"]) if "pattern" in node else []
        fmt = node.get("format")
        constraints: list[Regex | cpdfa.CodepointDFA | str] = []   # (a str: a format's name)
        for p in patterns:
            try:
                constraints.append(strings.pattern_dfa(p))
            except strings.PatternError as exc:
                self.unsupported("pattern", node, f"{p!r}: {exc}")
        if isinstance(fmt, str):
            rx = strings.format_regex(fmt)
            if rx is not None:
                constraints.append(fmt)   # (its automaton: strings.format_dfa)
            elif fmt in STRING_FORMATS_WE_REJECT and not self.lenient_formats:
                self.unsupported("format", node, f"format {fmt!r} has no exact grammar here "
                                 "(lenient_formats=True accepts any string)")
            elif fmt not in STRING_FORMATS_WE_REJECT:
                self.unknown_format(fmt, node)
        negated = node.get("__not_pattern__", []) + node.get("__not_format__", [])
        excluded = [v for v in node.get("__not_enum__", []) if isinstance(v, str)]
        if hi is not None and hi < lo:
            return self.empty(node, f"minLength {lo} > maxLength {hi}")
        if not constraints and not negated and not excluded:
            if max(lo, hi or 0) > LONG_STRING:
                return [self._long_string(lo, hi)]
            return [self.lex(strings.quoted(Repeat(strings.ANY_JSON_CHAR, lo, hi)), "STR")]
        if not constraints:
            constraints.append(Repeat(CharRanges(cpdfa.ANY_CHAR), 0, None))
        try:
            dfa = self._string_dfa(constraints, lo, hi)
        except CompileLimitError:
            subset = strings.format_subset(fmt) if isinstance(fmt, str) else None
            if subset is None:
                raise
            # the format's documented subset for length-bounded strings (see format_subset)
            constraints = [subset if c is fmt else c for c in constraints]
            dfa = self._string_dfa(constraints, lo, hi)
        if isinstance(dfa, str):
            return self.empty(node, dfa)
        dfa = self._exclude_strings(dfa, node)
        if dfa.is_empty():
            return []
        rx = strings.spelled(dfa)
        name = self.lex(rx, "STR")
        if strings.is_format_spelling(rx):
            self._constant_lexemes[name] = rx
        return [name]

    def _long_string(self, lo: int, hi: int | None) -> str:
        """A string of lo..hi characters as blocks of BLOCK characters counted by rules
        (one lexeme per block), so long bounds cost rules, not automaton states."""
        if max(lo, hi or 0) > MAX_STRING_LENGTH:
            raise CompileLimitError(f"string length bound {max(lo, hi or 0)} is above the limit {MAX_STRING_LENGTH}")
        char = strings.ANY_JSON_CHAR
        quote = literal('"')

        block = self._piece(("block",), lambda: Repeat(char, BLOCK, BLOCK), "BLOCK")
        top = self.fresh("longstr")
        states = [self.fresh("longstr") for _ in range((hi if hi is not None else lo) // BLOCK + 1)]
        self.chains.append(tuple(states))
        self.rule(top, self._piece(("quote",), lambda: quote, "QUOTE"), states[0])
        for q, s in enumerate(states):
            t_lo = max(0, lo - BLOCK * q)
            if hi is None and q == len(states) - 1:
                self.rule(s, self._piece(("tail", t_lo, None), lambda: seq([Repeat(char, t_lo, None), quote]), "TAIL"))
                continue
            t_hi = BLOCK - 1 if hi is None else min(BLOCK - 1, hi - BLOCK * q)
            if t_lo <= t_hi:
                self.rule(s, self._piece(("tail", t_lo, t_hi), lambda: seq([Repeat(char, t_lo, t_hi), quote]), "TAIL"))
            if q + 1 < len(states):
                self.rule(s, block, states[q + 1])
        return top

    def string_dfa(self, node: Any) -> cpdfa.CodepointDFA | None:
        """Decoded-string automaton for a key schema (``propertyNames``); None = any."""
        node = self.normalize(node, 1)
        if node is True:
            return None
        if node is False:
            return cpdfa.CodepointDFA([], [])
        kws = set(node) - ANNOTATIONS
        if "anyOf" in node:  # a union of names (e.g. from a negation)
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            union = None
            for branch in node["anyOf"]:
                d = self.string_dfa(self.merge([rest, branch], node, 1))
                d = _ANY_NAME() if d is None else d
                union = d if union is None else _union_dfa(union, d)
            return union if union is not None else cpdfa.CodepointDFA([], [])
        if not kws <= {"type", "pattern", "format", "minLength", "maxLength", "enum", "const",
                       "__not_enum__", "__not_pattern__", "__not_format__"}:
            self.unsupported("propertyNames", node, f"only string keywords are supported, not {sorted(kws)}")
            return None
        parts = []
        if "enum" in node or "const" in node:
            vals = [node["const"]] if "const" in node else node["enum"]
            vals = [v for v in vals if isinstance(v, str)]
            parts.append(cpdfa.from_regex(alt([literal(v) if v else EMPTY for v in vals]) if vals else NOTHING))
        for p in _as_patterns(node.get("pattern", [])) if "pattern" in node else []:
            try:
                parts.append(strings.pattern_dfa(p))
            except strings.PatternError as exc:
                self.unsupported("pattern", node, f"{p!r}: {exc}")
        fmt = node.get("format")
        if isinstance(fmt, str) and strings.format_regex(fmt) is not None:
            parts.append(strings.format_dfa(fmt))
        if "minLength" in node or "maxLength" in node:
            parts.append(cpdfa.from_regex(Repeat(CharRanges(cpdfa.ANY_CHAR), self._count(node, "minLength", 0),
                                                 self._count(node, "maxLength", None))))
        if "type" in node and "string" not in _types_of(node):
            return cpdfa.CodepointDFA([], [])
        if not parts:
            if not {"__not_enum__", "__not_pattern__", "__not_format__"} & set(node):
                return None
            parts.append(_ANY_NAME())
        dfa = parts[0]
        for p in parts[1:]:
            dfa = cpdfa.intersect(dfa, p)
        return self._exclude_strings(dfa, node)

    def _string_dfa(self, constraints: list, lo: int, hi: int | None) -> "cpdfa.CodepointDFA | str":
        """The strings meeting every constraint (a pattern's DFA, a regex, a format's name)
        and lo..hi characters; a str saying why when none do."""
        dfa = None
        for rx in constraints:
            d = rx if isinstance(rx, cpdfa.CodepointDFA) else strings.format_dfa(rx) if isinstance(rx, str) \
                else cpdfa.from_regex(rx)
            dfa = d if dfa is None else cpdfa.intersect(dfa, d)
            if dfa.is_empty():
                return "no string matches all of its pattern / format keywords"
        if lo or hi is not None:
            # the length counter multiplies the states; skip it when the other constraints
            # already keep every string within lo..hi (a hostname is at most 247 long)
            shortest, longest = cpdfa.length_range(dfa)
            if shortest < lo or hi is not None and (longest is None or longest > hi):
                dfa = cpdfa.intersect(dfa, cpdfa.from_regex(Repeat(CharRanges(cpdfa.ANY_CHAR), lo, hi)))
                if dfa.is_empty():
                    return "no string of minLength / maxLength matches its pattern / format"
        return dfa

    def _exclude_strings(self, dfa: cpdfa.CodepointDFA, node: dict) -> cpdfa.CodepointDFA:
        """``dfa`` without the strings a negation excluded (``__not_pattern__``,
        ``__not_format__``, and the strings of ``__not_enum__``)."""
        for f in node.get("__not_format__", []):
            dfa = cpdfa.difference(dfa, strings.format_dfa(f))
        for p in node.get("__not_pattern__", []):
            try:
                dfa = cpdfa.difference(dfa, strings.pattern_dfa(p))
            except strings.PatternError as exc:
                self.unsupported("not", node, f"pattern {p!r}: {exc}")
        excluded = [v for v in node.get("__not_enum__", []) if isinstance(v, str)]
        if excluded:
            dfa = cpdfa.difference(dfa, cpdfa.from_regex(alt([literal(v) if v else EMPTY for v in excluded])))
        return dfa

    # ---- arrays

    def _array(self, node: dict) -> list[str]:
        if "unevaluatedItems" in node and node["unevaluatedItems"] is not True:
            self.unsupported("unevaluatedItems", node, "unevaluatedItems is not supported")
        if self.draft <= 2019 and isinstance(node.get("items"), list):
            prefix, tail = node["items"], node.get("additionalItems", True)
        elif isinstance(node.get("items"), list):
            raise SchemaError("items must be a schema in draft 2020-12 (use prefixItems)",
                              self.resolver.pointer(node) + "/items")
        else:
            prefix = node.get("prefixItems", []) if self.draft >= 2020 else []
            tail = node.get("items", True)
        every = node.get("__every_item__", [])
        if every:  # from a negated `contains`: every item meets these
            prefix = [self.merge([p, *every], node, 1) for p in prefix]
            tail = self.merge([tail, *every], node, 1)
        lo = self._count(node, "minItems", 0)
        hi = self._count(node, "maxItems", None)
        if node.get("uniqueItems") is True and (hi is None or hi > 1):
            self.unsupported("uniqueItems", node, "item uniqueness is not context-free")
        if hi is not None and hi < lo:
            return self.empty(node, f"minItems {lo} > maxItems {hi}")
        contains = node.get("contains") if self.draft >= 6 else None
        min_c = self._count(node, "minContains", 1) if contains is not None else 0
        max_c = self._count(node, "maxContains", None) if contains is not None else None
        if contains is not None and self.draft < 2019:
            min_c, max_c = 1, None  # minContains/maxContains arrived in 2019-09
        if "__contains__" in node:  # from a negated `items`: some item fails it
            if contains is not None and not (min_c == 0 and max_c is None):
                self.unsupported("contains", node, "together with the negation of `items` (two contains constraints)")
            contains, min_c, max_c = node["__contains__"], 1, None
        contains_kw = "items" if "__contains__" in node else "contains"  # what an error names
        if max_c is not None and max_c < min_c:
            return self.empty(node, f"minContains {min_c} > maxContains {max_c}")
        options: dict[int, list[tuple[str, int]]] = {}  # position -> [(item symbol, counts as contained)]

        def item_options(i: int) -> list[tuple[str, int]]:
            key = min(i, len(prefix))
            if key not in options:
                schema = prefix[i] if i < len(prefix) else tail
                if contains is None or (min_c == 0 and max_c is None):
                    pairs = [(self.child(schema), 0)]
                else:
                    try:
                        negated = self.negate(contains, 0)
                    except _NotExpressible as exc:
                        detail = "" if contains_kw == "contains" else " (an items schema negated for not / oneOf)"
                        self.unsupported(contains_kw, node, f"its negation is not expressible{detail} ({exc})")
                        negated = True
                    pairs = [(self.child(self.merge([schema, contains], node, 1)), 1),
                             (self.child(self.merge([schema, negated], node, 1)), 0)]
                options[key] = [(sym, inc) for sym, inc in pairs if sym is not None]
            return options[key]

        counted = contains is not None and not (min_c == 0 and max_c is None)
        cap = max(min_c, max_c or 0) if counted else 0
        last = hi if hi is not None else max(len(prefix), lo, 1)
        # without a contains count, the items past the prefix (and past the first) are all
        # alike: their number is counted by O(log n) rules from position `tail_at` on
        tail_at = None if counted else max(len(prefix), 1)
        if tail_at is None and (last * (cap + 1) > MAX_UNROLL * 4 or last > MAX_UNROLL):
            raise CompileLimitError(f"array bounds need {last} x {cap + 1} states (limit {MAX_UNROLL})")
        open_, lead, comma, close, close_empty = self.container("[", "]")
        names: dict[tuple[int, int], str] = {}
        todo: list[tuple[int, int]] = []

        def state(i: int, c: int) -> str:
            if (i, c) not in names:
                names[(i, c)] = self.fresh("arr")
                todo.append((i, c))
            return names[(i, c)]

        top = self.fresh("array")
        self.rule(top, open_, state(0, 0))
        while todo:
            i, c = todo.pop()
            s = names[(i, c)]
            if i == tail_at and (hi is None or i < hi):
                self._array_tail(s, item_options(i), comma, close, max(lo - i, 0), None if hi is None else hi - i)
                continue
            if i >= lo and c >= min_c:
                self.rule(s, close if i else close_empty)
            if hi is not None and i >= hi:
                continue
            # unbounded arrays: positions past `last` behave alike (same schema, not first)
            nxt_i = i + 1 if hi is not None or i + 1 <= last else last
            for sym, inc in item_options(i):
                c2 = c + inc
                if max_c is not None and c2 > max_c:
                    continue
                if max_c is None:
                    c2 = min(c2, cap)
                self.rule(s, *self.item(i == 0, lead, comma, sym, state(nxt_i, c2)))
        return [top]

    def _array_tail(self, state: str, options: list[tuple[str, int]], comma: str, close: str,
                    lo: int, hi: int | None) -> None:
        """``state -> (comma item){lo,hi} close``: the items past the first and the prefix,
        counted in O(log n) rules (``hi=None``: unbounded)."""
        def make(alternatives) -> str:
            name = self.fresh("arr")
            for body in alternatives:
                self.rule(name, *body)
            return name

        unit = make([(comma, sym) for sym, _ in options])
        counted = CountedRules(make)
        if hi is None:
            star = self.fresh("arr")
            self.rule(star)
            self.rule(star, star, unit)
            body = counted.power(unit, lo) + (star,)
        else:
            body = counted.between(unit, lo, hi)
        self.rule(state, *body, close)

    # ---- objects

    def _object(self, node: dict) -> list[str]:
        if "unevaluatedProperties" in node:
            node = dict(node)
            uneval = node.pop("unevaluatedProperties")
            if "additionalProperties" in node:
                if uneval is not True:
                    self.unsupported("unevaluatedProperties", node, "next to additionalProperties")
            else:
                node["additionalProperties"] = uneval
        props: dict[str, Any] = dict(node.get("properties", {}))
        required = list(dict.fromkeys(node.get("required", [])))
        dep_req: dict[str, list[str]] = dict(node.get("dependentRequired", {}))
        dep_schemas: dict[str, Any] = dict(node.get("dependentSchemas", {}))
        for k, v in node.get("dependencies", {}).items():
            (dep_req if isinstance(v, list) else dep_schemas)[k] = v
        if dep_req or dep_schemas:
            return self._object_cases(node, dep_req, dep_schemas)
        if "__some_key__" in node:
            return self._object_some_key(node)
        # [(name automaton, value schema)]: for each, some extra pair must have such a name and value
        some = node.get("__some_extra__")
        additional = self._additional(node)
        patterns = node.get("patternProperties", {})
        names_dfa = self.string_dfa(node["propertyNames"]) if "propertyNames" in node else None
        min_p = self._count(node, "minProperties", 0)
        max_p = self._count(node, "maxProperties", None)
        if max_p is not None and max_p < min_p:
            return self.empty(node, f"minProperties {min_p} > maxProperties {max_p}")
        # each part: (its patterns as (pattern, key automaton, schema), its additionalProperties
        # as written: a name listed in `required` is declared, also under strict)
        pp_parts = node.get("__pp_parts__") or [((), patterns, node.get("additionalProperties", True))]
        parts_dfas = []
        for _names, part_patterns, part_additional in pp_parts:
            compiled_patterns = []
            for p, sub in part_patterns.items():
                try:
                    compiled_patterns.append((p, strings.pattern_dfa(p), sub))
                except strings.PatternError as exc:
                    self.unsupported("patternProperties", node, f"{p!r}: {exc}")
                    return []
            parts_dfas.append((compiled_patterns, part_additional))
        pattern_dfas = [entry for compiled_patterns, _ in parts_dfas for entry in compiled_patterns]
        # declared names: properties plus required ones that are not declared
        declared = list(props)
        for r in required:
            if r not in props:
                declared.append(r)
        entries = []  # (name, value symbol, required)
        for name in declared:
            if names_dfa is not None and not names_dfa.matches(name):
                if name in required:
                    return self.empty(node, f"required: {name!r} is not allowed by propertyNames")
                continue
            if name in props:  # (merged properties already hold what every part applies)
                parts = [props[name], *(sub for _, d, sub in pattern_dfas if d.matches(name))]
            else:  # a required name no part declares: each part's matching patterns, or else
                parts = []  # that part's additionalProperties
                for compiled_patterns, part_additional in parts_dfas:
                    parts.extend([sub for _, d, sub in compiled_patterns if d.matches(name)] or [part_additional])
            schema = parts[0] if len(parts) == 1 else self.merge(parts, node, 1)
            sym = self.child(schema)
            if sym is None:
                if name in required:
                    return self.empty(node, f"required: property {name!r} can have no value")
                continue
            entries.append((name, sym, name in required))
        # keys beyond the declared ones
        declared_dfa = None   # (made for the first pattern region: most objects have none)
        extra_kinds = []  # (key automaton, value schema)
        covered = None
        for key, matched in self._key_regions([d for _, d, _ in pattern_dfas], node):
            covered = key if covered is None else _union_dfa(covered, key)
            if declared:
                if declared_dfa is None:
                    declared_dfa = cpdfa.words_dfa(declared)
                key = cpdfa.difference(key, declared_dfa)
            if names_dfa is not None:
                key = cpdfa.intersect(key, names_dfa)
            if key.is_empty():
                continue
            # every part checks the name: its matching patterns, or else its additionalProperties
            constraints, i = [], 0
            for compiled_patterns, part_additional in parts_dfas:
                mine = [sub for j, (_, _, sub) in enumerate(compiled_patterns, start=i) if j in matched]
                constraints.extend(mine or [part_additional])
                i += len(compiled_patterns)
            schema = constraints[0] if len(constraints) == 1 else self.merge(constraints, node, 1)
            extra_kinds.append((key, schema))
        if additional is not False:
            key = cpdfa.all_but(declared)
            if covered is not None:
                key = cpdfa.difference(key, covered)
            if names_dfa is not None:
                key = cpdfa.intersect(key, names_dfa)
            if not key.is_empty():
                extra_kinds.append((key, additional))
        extra = self._extra_keys(extra_kinds)
        specials = []  # (requirements met, symbol of an extra pair that meets them)
        for mask in range(1, 1 << len(some or [])):
            met = [some[i] for i in range(len(some)) if mask >> i & 1]
            kinds = []
            for key, schema in extra_kinds:
                for names, _ in met:
                    key = cpdfa.intersect(key, names)
                kinds.append((key, self.merge([schema, *(v for _, v in met)], node, 1)))
            sym = self._extra_keys(kinds)
            if sym is not None:
                specials.append((mask, sym))
        if self.any_order and (len(entries) > 1 or (entries and (extra or specials))):
            return self._object_any_order(entries, extra, min_p, max_p, specials, len(some or []))
        return self._object_ordered(entries, extra, min_p, max_p, specials, len(some or []))

    def _additional(self, node: dict) -> Any:
        """The schema of undeclared names: ``additionalProperties`` (``unevaluatedProperties``
        was moved into it), else with ``strict`` false: no undeclared names unless the
        schema says so explicitly. A schema without assertions (``{}``, annotations only)
        is ``true`` either way."""
        if "additionalProperties" in node:
            return node["additionalProperties"]
        return not (self.strict and _asserts(node))

    def _extra_keys(self, kinds: list) -> str | None:
        """A symbol for one extra ``"key":value`` pair, from (key automaton, value schema)."""
        extra = None
        for key, schema in kinds:
            if key.is_empty():
                continue
            sym = self.child(schema)
            if sym is None:
                continue
            if extra is None:
                extra = self.fresh("extra")
            symbols = self.key(strings.spelled(key))
            if key.excluded is not None and symbols[0] not in self._without_prefixes:
                self._note_without_prefixes(symbols[0], key.excluded)
            self.rule(extra, *symbols, sym)
        return extra

    def _note_without_prefixes(self, lexeme: str, names: tuple[str, ...]) -> None:
        """Note that the key lexeme ``lexeme`` (any name but ``names``) is any key whose
        spelling does not start with one of theirs and the closing quote (see
        :data:`~gramgen.grammar.ir.WITHOUT_PREFIXES`): its automaton is then any key's with
        a few paths cut, where building it from its regex determinizes the trie of the
        names spelled."""
        prefixes = []
        for name in names:
            spelled = strings.spellings(name)
            if spelled is None:
                return   # (the regex then: too many spellings to list)
            prefixes += [b'"' + s + b'"' for s in spelled]
        self._without_prefixes[lexeme] = (self.lexemes[lexeme], self._any_key(), tuple(prefixes))

    def _any_key(self) -> Regex:
        """Any key, and the separator after it unless that is a lexeme of its own: what the
        lexeme of a key other than some names is cut from."""
        name = strings.quoted(Repeat(strings.ANY_JSON_CHAR, 0, None))
        return name if self._colon_apart else seq([name, self.layout.colon()])

    def _object_some_key(self, node: dict) -> list[str]:
        """``__some_key__`` (from negating propertyNames / additionalProperties /
        patternProperties): for each requirement, some property's name is in a set and its
        value meets a schema. Object variants: each requirement is met by one of the
        declared names in its set (that name required, its value also meeting the schema)
        or by an extra pair (see ``specials`` in the object builders)."""
        reqs = node["__some_key__"]
        if len(reqs) > 3:
            self.unsupported("not", node, f"{len(reqs)} negated object keywords at once (limit 3)")
            return []
        base = {k: v for k, v in node.items() if k != "__some_key__"}
        declared = list(dict.fromkeys([*base.get("properties", {}), *base.get("required", [])]))
        options = []  # per requirement: declared names that may meet it, or None for an extra pair
        for name_schema, value_schema in reqs:
            names = self.string_dfa(name_schema)
            if names is None:
                names = _ANY_NAME()
            options.append([(n, names, value_schema) for n in declared if names.matches(n)]
                           + [(None, names, value_schema)])
        if math.prod(len(o) for o in options) > 64:
            self.unsupported("not", node, "more than 64 ways to meet the negated object keywords")
            return []
        out = []
        for choice in itertools.product(*options):
            parts = [base] + [{"required": [n], "properties": {n: v}} for n, _, v in choice if n is not None]
            variant = self.merge(parts, node, 1) if len(parts) > 1 else dict(base)
            if variant is False:
                continue
            variant = dict(variant)
            extras = [(names, v) for n, names, v in choice if n is None]
            if extras:
                variant["__some_extra__"] = extras
            variant["type"] = "object"
            sym = self.value(variant)
            if sym is not None:
                out.append(sym)
        return out

    def _key_regions(self, dfas: list, where: Any, limit: int = 64) -> list[tuple[Any, frozenset]]:
        """Split the names matched by some of these key automata into disjoint regions, each
        with the set of automata (by index) that match its names. Overlapping patterns all
        apply to a name (JSON Schema checks every matching one), so each region gets the
        conjunction of its patterns' schemas."""
        regions: list[tuple[Any, frozenset]] = []
        for i, d in enumerate(dfas):
            rest = d
            refined = []
            for key, matched in regions:
                both = cpdfa.intersect(key, d)
                if both.is_empty():
                    refined.append((key, matched))
                    continue
                refined.append((both, matched | {i}))
                only = cpdfa.difference(key, d)
                if not only.is_empty():
                    refined.append((only, matched))
                rest = cpdfa.difference(rest, key)
            if not rest.is_empty():
                refined.append((rest, frozenset((i,))))
            regions = refined
            if len(regions) > limit:
                self.unsupported("patternProperties", where,
                                 f"the patterns overlap in more than {limit} ways")
        return regions

    def _object_ordered(self, entries, extra, min_p: int, max_p: int | None,
                        specials=(), n_required: int = 0) -> list[str]:
        """Declared properties in schema order (optional ones may be skipped), then extra
        keys; ``state(i, c, seen)`` = at entry i with c properties so far (saturating at K)
        and the extra-pair requirements met so far (a bitmask, see _object_some_key):
        ``specials`` = [(requirements met, extra pair symbol)], all ``n_required`` must be
        met before the object closes."""
        open_, lead, comma, close, close_empty = self.container("{", "}")
        cap = max(1, min_p, max_p or 0)
        if cap > MAX_UNROLL:
            raise CompileLimitError(f"min/maxProperties {cap} is above the limit {MAX_UNROLL}")
        names: dict[tuple, str] = {}
        n = len(entries)

        full = (1 << n_required) - 1

        def state(i: int, c: int, seen: int = 0) -> str:
            key = (i, c, seen)
            if key not in names:
                names[key] = self.fresh("obj")
                todo.append(key)
            return names[key]

        kv = [None] * n
        for i, (name, sym, _) in enumerate(entries):
            k = self.fresh("kv")
            self.rule(k, *self.key(strings.string_literal(name)), sym)
            kv[i] = k
        top = self.fresh("object")
        todo: list[tuple] = []
        self.rule(top, open_, state(0, 0))
        while todo:
            i, c, seen = todo.pop()
            s = names[(i, c, seen)]
            nxt = c + 1 if max_p is not None else min(c + 1, cap)
            can_add = max_p is None or c + 1 <= max_p
            if i < n:
                name, sym, req = entries[i]
                if can_add:
                    self.rule(s, *self.item(c == 0, lead, comma, kv[i], state(i + 1, nxt, seen)))
                if not req:
                    self.rule(s, state(i + 1, c, seen))
                continue
            # after the declared entries: extras, then the closing brace
            if c >= min_p and seen == full:
                self.rule(s, close if c else close_empty)
            if extra is not None and can_add:
                self.rule(s, *self.item(c == 0, lead, comma, extra, state(n, nxt, seen)))
            if can_add:
                for mask, special in specials:
                    self.rule(s, *self.item(c == 0, lead, comma, special, state(n, nxt, seen | mask)))
        return [top]

    def _object_any_order(self, entries, extra, min_p: int, max_p: int | None,
                          specials=(), n_required: int = 0) -> list[str]:
        if len(entries) > 8:
            raise CompileLimitError(f"property_order='any' with {len(entries)} properties "
                                    "(limit 8: every subset becomes a state)")
        open_, lead, comma, close, close_empty = self.container("{", "}")
        kv = []
        for name, sym, _ in entries:
            k = self.fresh("kv")
            self.rule(k, *self.key(strings.string_literal(name)), sym)
            kv.append(k)
        req_mask = sum(1 << i for i, e in enumerate(entries) if e[2])
        cap = max(1, min_p, max_p or 0)
        names: dict[tuple, str] = {}
        todo: list[tuple] = []

        full = (1 << n_required) - 1

        def state(mask: int, c: int, seen: int = 0) -> str:
            if (mask, c, seen) not in names:
                names[(mask, c, seen)] = self.fresh("obj")
                todo.append((mask, c, seen))
            return names[(mask, c, seen)]

        top = self.fresh("object")
        self.rule(top, open_, state(0, 0))
        while todo:
            mask, c, seen = todo.pop()
            s = names[(mask, c, seen)]
            can_add = max_p is None or c + 1 <= max_p
            nxt = c + 1 if max_p is not None else min(c + 1, cap)
            if mask & req_mask == req_mask and c >= min_p and seen == full:
                self.rule(s, close if c else close_empty)
            if not can_add:
                continue
            for i in range(len(entries)):
                if not mask & (1 << i):
                    self.rule(s, *self.item(c == 0, lead, comma, kv[i], state(mask | (1 << i), nxt, seen)))
            if extra is not None:
                self.rule(s, *self.item(c == 0, lead, comma, extra, state(mask, nxt, seen)))
            for met, special in specials:
                self.rule(s, *self.item(c == 0, lead, comma, special, state(mask, nxt, seen | met)))
        return [top]

    def _object_cases(self, node: dict, dep_req: dict, dep_schemas: dict) -> list[str]:
        """dependentRequired / dependentSchemas: one object variant per presence pattern
        of the trigger properties (at most 2**6 variants)."""
        triggers = sorted(set(dep_req) | set(dep_schemas))
        if len(triggers) > 6:
            raise CompileLimitError(f"{len(triggers)} dependency triggers (limit 6: 2**n object variants)")
        base = {k: v for k, v in node.items() if k not in ("dependentRequired", "dependentSchemas", "dependencies")}
        out = []
        for bits in range(1 << len(triggers)):
            parts = [base]
            present = [t for i, t in enumerate(triggers) if bits >> i & 1]
            absent = [t for i, t in enumerate(triggers) if not bits >> i & 1]
            extra_req = list(present)
            for t in present:
                extra_req.extend(dep_req.get(t, []))
                if t in dep_schemas:
                    parts.append(dep_schemas[t])
            parts.append({"required": extra_req, "properties": {t: False for t in absent}})
            merged = self.merge(parts, node, 1)
            if merged is False:
                continue
            merged = dict(merged)
            for t in absent:  # required wins over absence: the variant is empty
                if t in merged.get("required", []):
                    merged = None
                    break
            if merged is None:
                continue
            merged["type"] = "object"
            sym = self.value(merged)
            if sym is not None:
                out.append(sym)
        return out

    # ---- any JSON value

    def any_value(self) -> list[str]:
        """Alternatives for any JSON value at the current depth (with ``indent``, values
        deeper than MAX_INDENT_DEPTH are scalars)."""
        d = self._depth
        if ("any", d) in self._pieces:
            return [self._pieces[("any", d)]]
        v = self.fresh("any")
        self._pieces[("any", d)] = v
        scalar = self._piece(("scalar",), lambda: alt([
            literal("null"), literal("true"), literal("false"), numbers.NUMBER,
            strings.quoted(Repeat(strings.ANY_JSON_CHAR, 0, None))]), "SCALAR")
        self.rule(v, scalar)
        if self._too_deep():
            return [v]
        key = self._piece(("any_key",), self._any_key, "KEY")
        keys = (key, self._piece(("colon",), self.layout.colon, "COLON")) if self._colon_apart else (key,)
        inner = self.child(True)
        for open_ch, close_ch in ("{}", "[]"):
            open_, lead, comma, close, close_empty = self.container(open_ch, close_ch)
            items = self.fresh("members" if open_ch == "{" else "elements")
            entry = (*keys, inner) if open_ch == "{" else (inner,)
            self.rule(v, open_, close_empty)
            self.rule(v, open_, *((lead,) if lead else ()), items, close)
            self.rule(items, *entry)
            self.rule(items, items, comma, *entry)
        return [v]


# ------------------------------------------------------------------ helpers


_STRUCTURE = {"properties", "patternProperties", "additionalProperties", "items", "prefixItems",
              "additionalItems", "__pp_parts__"}
"""Keywords whose meaning depends on their siblings in the same part (merged together)."""


def _all_of(schemas: list[Any]) -> Any:
    kept = [s for s in schemas if s is not True and s != {}]
    if any(s is False for s in kept):
        return False
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else {"allOf": kept}


def _search(pattern: str, text: str) -> bool:
    import re
    try:
        return re.search(strings.ecma_to_python(pattern), text) is not None
    except (re.error, strings.PatternError):
        return False


class _Patterns(list):
    """Several ``pattern``s that all must match (from merging)."""


def _as_patterns(p: Any) -> list[str]:
    return list(p) if isinstance(p, _Patterns) else [p]


def _asserts(node: Any) -> bool:
    """Whether a schema object has any keyword that constrains instances."""
    if not isinstance(node, dict):
        return node is False
    return any(k not in ANNOTATIONS for k in node)


def _types_of(node: dict) -> frozenset[str]:
    t = node.get("type")
    if t is None:
        types = set(TYPES)
    else:
        types = {t} if isinstance(t, str) else set(t)
        unknown = types - set(TYPES)
        if unknown:
            raise SchemaError(f"unknown type {sorted(unknown)[0]!r}", "/type")
        if "number" in types:
            types.add("integer")
    return frozenset(types)


def _types_meet(*schemas: Any) -> bool:
    """False when the explicit ``type``s of these schemas (or a type value itself) have
    no common type, so their allOf matches nothing; True when they may meet."""
    common: set[str] | None = None
    for sch in schemas:
        if sch is False:
            return False
        t = sch.get("type") if isinstance(sch, dict) else sch if isinstance(sch, (str, list)) else None
        if t is None:
            continue
        ts = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)}
        common = ts if common is None else _intersect_types(common, ts)
        if not common:
            return False
    return True


def _intersect_types(a: set[str], b: set[str]) -> set[str]:
    def expand(s):
        return s | ({"integer"} if "number" in s else set())
    return expand(a) & expand(b)


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _is_integral(v: Any) -> bool:
    return isinstance(v, float) and v.is_integer()


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _disjoint(x, y) -> bool:
    """Whether two signatures (see ``_signature``) provably share no instance."""
    types_x, values_x, discr_x, req_x, names_x = x
    types_y, values_y, discr_y, req_y, names_y = y
    if not (types_x & types_y):
        return True
    if values_x is not None and values_y is not None:
        return not any(_json_equal(a, b) for a in values_x for b in values_y)
    if not types_x & types_y <= {"object"}:
        return False
    for name in discr_x.keys() & discr_y.keys():
        if not any(_json_equal(a, b) for a in discr_x[name] for b in discr_y[name]):
            return True
    # an object one side requires a name that the other side does not allow

    def forbids(names, name: str) -> bool:
        closed, listed = names
        return name not in listed if closed else name in listed

    return any(forbids(names_y, r) for r in req_x) or any(forbids(names_x, r) for r in req_y)


def _lcm_decimal(a: Decimal, b: Decimal) -> Decimal:
    from math import gcd
    scale = max(-a.as_tuple().exponent, -b.as_tuple().exponent, 0)
    ia, ib = int(a.scaleb(scale)), int(b.scaleb(scale))
    return Decimal(ia * ib // gcd(ia, ib)).scaleb(-scale)


def _union_dfa(a: cpdfa.CodepointDFA, b: cpdfa.CodepointDFA) -> cpdfa.CodepointDFA:
    return cpdfa.from_regex(alt([cpdfa.as_regex(a), cpdfa.as_regex(b)]))


def _ANY_NAME() -> cpdfa.CodepointDFA:
    """Every string, as a code-point automaton."""
    return cpdfa.from_regex(Repeat(CharRanges(cpdfa.ANY_CHAR), 0, None))


def _name_constraints(part: dict, name: str) -> list:
    """The schemas one allOf part applies to the value of property ``name``."""
    if name in part.get("properties", {}):
        out = [part["properties"][name]]
        if "__pp_parts__" in part:
            return out  # a merged part's properties already hold everything it applies
    else:
        out = []
    subs = part["__pp_parts__"] if "__pp_parts__" in part else [
        (list(part.get("properties", {})), part.get("patternProperties", {}), part.get("additionalProperties", True))]
    for names, patterns, additional in subs:
        matched = [sub for pat, sub in patterns.items() if _search(pat, name)]
        out.extend(matched)
        if not matched and name not in names:
            out.append(additional)
    return out


def _mentions(node: Any, keys: tuple[str, ...]) -> bool:
    """Whether any of ``keys`` appears as a keyword anywhere inside ``node``."""
    if isinstance(node, dict):
        return any(k in keys or _mentions(v, keys) for k, v in node.items())
    if isinstance(node, (list, tuple)):
        return any(_mentions(x, keys) for x in node)
    return False


def _strip_internal(node: Any) -> Any:
    if isinstance(node, _Patterns):
        return {"allOf": [{"pattern": p} for p in node]}
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "pattern" and isinstance(v, _Patterns):
                out.setdefault("allOf", []).extend({"pattern": p} for p in v)
            elif k == "__not_integer__":
                out.setdefault("allOf", []).append({"not": {"type": "integer"}})
            elif k == "__contains__":  # some item meets it (`items` alone covers every item in all drafts)
                out.setdefault("allOf", []).append({"not": {"items": {"not": _strip_internal(v)}}})
            elif k == "__every_item__":
                out.setdefault("allOf", []).extend({"items": _strip_internal(x)} for x in v)
            elif k == "__pp_parts__":
                out.setdefault("allOf", []).extend(
                    {"properties": {n: True for n in names}, "patternProperties": _strip_internal(pp),
                     "additionalProperties": _strip_internal(add)} for names, pp, add in v)
            elif k.startswith("__not_"):
                inner = {"__not_enum__": "enum", "__not_pattern__": "pattern", "__not_multipleOf__": "multipleOf",
                         "__not_format__": "format"}[k]
                if inner == "enum":
                    out.setdefault("allOf", []).append({"not": {"enum": v}})
                else:
                    out.setdefault("allOf", []).extend({"not": {inner: x}} for x in v)
            elif isinstance(v, Decimal):
                out[k] = float(v) if v != v.to_integral_value() else int(v)
            else:
                out[k] = _strip_internal(v)
        return out
    if isinstance(node, list):
        return [_strip_internal(x) for x in node]
    return node


def _keyword_of(pointer: str) -> str:
    """The keyword a JSON pointer ends with."""
    return pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside gramgen."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def _prune_unproductive(ir: GrammarIR) -> GrammarIR:
    """Drop rules using nonterminals that derive no finite string (e.g. a required
    recursive property): they would only slow the parser and leave dead ends; and what
    the start symbol no longer reaches."""
    pruned = prune_rules(ir.rules, ir.lexemes, ir.start)
    if pruned is None:
        raise SchemaError("the schema accepts no finite JSON value", "")
    rules, lexemes = pruned
    return GrammarIR(rules, lexemes, ir.start, ir.ignore, ir.source, ir.meta)


def json_schema_to_ir(schema: Any, **options: Any) -> GrammarIR:
    """Compile a JSON Schema to the grammar IR (see :class:`SchemaCompiler` options)."""
    import sys
    limit = sys.getrecursionlimit()
    if sys.version_info >= (3, 11):  # pure-Python frames no longer use the C stack
        sys.setrecursionlimit(max(limit, 20_000))
    try:
        compiler = SchemaCompiler(schema, **options)
        try:
            return compiler.build()
        finally:
            compiler._warn_unknown()
            # the resolver calls back into the compiler: without that cycle, what the
            # build made and dropped is freed at once, not by a later garbage collection
            compiler.resolver.on_document = None
    except RecursionError:
        raise CompileLimitError("the schema nests too deeply to compile") from None
    finally:
        sys.setrecursionlimit(limit)
