"""Every keyword gramgen knows, with the value the draft's metaschema requires of it, and
one pass over a schema document that checks each keyword's value and finds the unknown
keywords.

The compiler then reads keyword values without re-checking their types: a ``"required":
"abc"`` or ``"minimum": true`` is a SchemaError here, at the keyword's pointer, instead of
being reinterpreted (``["a", "b", "c"]``, 1) or crashing later.
"""

from __future__ import annotations

import difflib
import functools
import math
from typing import Any

import numpy as np

from ...errors import SchemaError

TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


# ------------------------------------------------------------------ value kinds
# each kind: (what it expects, in words; a check(value, draft) -> bool)

def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_count(v: Any) -> bool:
    return _is_number(v) and v >= 0 and v == int(v)


def _is_string_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_type(v: Any) -> bool:
    if isinstance(v, str):
        return v in TYPES
    return isinstance(v, list) and len(v) > 0 and all(isinstance(x, str) and x in TYPES for x in v) \
        and len(set(v)) == len(v)


KINDS: dict[str, tuple[str, Any]] = {
    "any": ("any JSON value", lambda v, d: True),
    "string": ("a string", lambda v, d: isinstance(v, str)),
    "boolean": ("a boolean", lambda v, d: isinstance(v, bool)),
    "number": ("a finite number", lambda v, d: _is_number(v)),
    "positive": ("a finite number > 0", lambda v, d: _is_number(v) and v > 0),
    "count": ("a non-negative integer", lambda v, d: _is_count(v)),
    "exclusive": ("a boolean (draft 4) or a finite number (draft 6 on)",
                  lambda v, d: isinstance(v, bool) if d == 4 else _is_number(v)),
    "strings": ("an array of strings", lambda v, d: _is_string_list(v)),
    "type": (f"one of {', '.join(TYPES)} or a non-empty array of them without repeats",
             lambda v, d: _is_type(v)),
    "array": ("an array", lambda v, d: isinstance(v, list)),
    "schema": ("a schema (an object or a boolean)", None),
    "schemas": ("a non-empty array of schemas", lambda v, d: isinstance(v, list) and len(v) > 0),
    "schema_map": ("an object whose values are schemas", lambda v, d: isinstance(v, dict)),
    "items": ("a schema, or a non-empty array of schemas (draft 2019-09 and earlier)",
              lambda v, d: isinstance(v, (dict, bool)) or d <= 2019 and isinstance(v, list) and len(v) > 0),
    "dependencies": ("an object whose values are schemas or arrays of strings",
                     lambda v, d: isinstance(v, dict)),
    "dependent_required": ("an object whose values are arrays of strings",
                           lambda v, d: isinstance(v, dict) and all(_is_string_list(x) for x in v.values())),
    "vocabulary": ("an object whose values are booleans",
                   lambda v, d: isinstance(v, dict) and all(isinstance(x, bool) for x in v.values())),
}

KEYWORDS: dict[str, str] = {
    # core
    "$schema": "string", "$id": "string", "id": "any", "$ref": "string", "$anchor": "string",
    "$dynamicRef": "string", "$dynamicAnchor": "string", "$recursiveRef": "string",
    "$recursiveAnchor": "boolean", "$vocabulary": "vocabulary", "$comment": "string",
    "$defs": "schema_map", "definitions": "schema_map",
    # applicators
    "allOf": "schemas", "anyOf": "schemas", "oneOf": "schemas", "not": "schema",
    "if": "schema", "then": "schema", "else": "schema", "dependentSchemas": "schema_map",
    "prefixItems": "schemas", "items": "items", "additionalItems": "schema", "contains": "schema",
    "properties": "schema_map", "patternProperties": "schema_map", "additionalProperties": "schema",
    "propertyNames": "schema", "unevaluatedItems": "schema", "unevaluatedProperties": "schema",
    "dependencies": "dependencies",
    # validation
    "type": "type", "enum": "array", "const": "any", "multipleOf": "positive",
    "maximum": "number", "minimum": "number", "exclusiveMaximum": "exclusive", "exclusiveMinimum": "exclusive",
    "maxLength": "count", "minLength": "count", "pattern": "string",
    "maxItems": "count", "minItems": "count", "uniqueItems": "boolean", "maxContains": "count", "minContains": "count",
    "maxProperties": "count", "minProperties": "count", "required": "strings", "dependentRequired": "dependent_required",
    "format": "string",
    # annotations
    "title": "string", "description": "string", "default": "any", "deprecated": "boolean",
    "readOnly": "boolean", "writeOnly": "boolean", "examples": "array",
    "contentEncoding": "string", "contentMediaType": "string", "contentSchema": "schema",
    # OpenAPI's, written by pydantic for tagged unions: an annotation
    "discriminator": "any", "nullable_annotation": "any",
}
"""Keyword -> kind of value, for every draft from 4 to 2020-12 (a keyword of another draft
than the schema's is still known, and its value still checked: the compiler reads some of
them in every draft)."""

_SUBSCHEMA_KINDS = {"schema", "schemas", "schema_map", "items", "dependencies"}
_DATA = {"enum", "const"}
"""Keywords whose values become grammar text: they must be JSON (no NaN, string keys)."""


#: the cutoff of :func:`suggestion`'s similarity (``difflib``'s ratio)
_CLOSE = 0.75


@functools.lru_cache(maxsize=1024)
def suggestion(word: str) -> str:
    """`` (did you mean 'maxLength'?)`` for a keyword close to a known one, else ''.

    The keyword ``difflib.get_close_matches(word, KEYWORDS, n=1, cutoff=0.75)`` names
    (the best ratio, ties to the greater name), else the keyword equal to ``word`` but for
    case. Only the keywords that ``difflib``'s own upper bounds (lengths, then shared
    characters with their counts) let through are compared in full: the bounds of all
    keywords at once in numpy, where comparing one word with every keyword cost ~60 µs.
    Kept per word: the unknown words of one tool recur from schema to schema."""
    lengths, counts, alphabet = _keyword_tables()
    n = len(word)
    total = lengths + n
    vector = np.zeros(len(alphabet) + 1, dtype=np.int32)
    for ch in word:
        vector[alphabet.get(ch, -1)] += 1
    vector[-1] = 0   # (characters of no keyword match nothing)
    shared = np.minimum(counts, vector).sum(axis=1)
    maybe = (2.0 * np.minimum(lengths, n) / total >= _CLOSE) & (2.0 * shared / total >= _CLOSE)
    best = None
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(word)
    for i in np.flatnonzero(maybe).tolist():
        name = _KEYWORD_LIST[i]
        matcher.set_seq1(name)
        score = matcher.ratio()
        if score >= _CLOSE and (best is None or (score, name) > best):
            best = (score, name)
    if best is not None:
        return f" (did you mean {best[1]!r}?)"
    lower = _LOWER.get(word.lower())
    return f" (did you mean {lower!r}?)" if lower else ""


_KEYWORD_LIST = list(KEYWORDS)
_LOWER = {k.lower(): k for k in _KEYWORD_LIST}


@functools.lru_cache(maxsize=1)
def _keyword_tables() -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The keywords' lengths, their character counts (a column per character of any
    keyword, and a last one of zeros for every other character) and that alphabet."""
    alphabet: dict[str, int] = {}
    for name in _KEYWORD_LIST:
        for ch in name:
            alphabet.setdefault(ch, len(alphabet))
    counts = np.zeros((len(_KEYWORD_LIST), len(alphabet) + 1), dtype=np.int32)
    for i, name in enumerate(_KEYWORD_LIST):
        for ch in name:
            counts[i, alphabet[ch]] += 1
    lengths = np.array([len(name) for name in _KEYWORD_LIST], dtype=np.int64)
    return lengths, counts, alphabet


def check_document(schema: Any, draft: int, where: str = "") -> list[str]:
    """Check every keyword value of a schema document against the metaschema's type for
    it (SchemaError at the first that fails); return the pointers of unknown keywords.
    ``where`` prefixes pointers (a remote document's URI)."""
    unknown: list[str] = []
    todo: list[tuple[Any, str]] = [(schema, "")]
    seen: set[int] = set()
    while todo:
        node, pointer = todo.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {_describe(node)}", where + pointer)
        if id(node) in seen:  # the same dict reached twice (shared by the caller)
            continue
        seen.add(id(node))
        for key, value in node.items():
            if not isinstance(key, str):
                raise SchemaError(f"a schema's keys must be strings, not {key!r}", where + pointer)
            at = f"{pointer}/{_escape(key)}"
            kind = KEYWORDS.get(key)
            if kind is None:
                unknown.append(where + at)
                continue
            todo.extend(_check(key, kind, value, draft, where, at))
    return sorted(unknown)


def _check(key: str, kind: str, value: Any, draft: int, where: str, at: str) -> list[tuple[Any, str]]:
    """Check one keyword value; the subschemas in it, with their pointers."""
    if key in _DATA:
        _check_json(value, where + at)
    if key == "id" and draft == 4 and not isinstance(value, str):
        raise SchemaError(f"id must be a string, not {_describe(value)}", where + at)
    if kind == "schema":
        if draft == 4 and isinstance(value, bool) and key not in ("additionalProperties", "additionalItems"):
            raise SchemaError(f"{key} must be a schema object in draft 4 (boolean schemas arrived in draft 6)",
                              where + at)
        return [(value, at)]
    expected, check = KINDS[kind]
    if not check(value, draft):
        raise SchemaError(f"{key} must be {expected}, not {_describe(value)}", where + at)
    if kind not in _SUBSCHEMA_KINDS:
        return []
    if kind == "items" and not isinstance(value, list):
        return [(value, at)]
    if isinstance(value, list):
        return [(x, f"{at}/{i}") for i, x in enumerate(value)]
    if isinstance(value, dict):
        out = []
        for name, sub in value.items():
            if not isinstance(name, str):
                raise SchemaError(f"the names in {key} must be strings, not {name!r}", where + at)
            if kind == "dependencies" and isinstance(sub, list):
                if not _is_string_list(sub):
                    raise SchemaError(f"{key}/{name} must be a schema or an array of strings",
                                      where + f"{at}/{_escape(name)}")
                continue
            out.append((sub, f"{at}/{_escape(name)}"))
        return out
    return []


def _check_json(value: Any, pointer: str) -> None:
    """A JSON value: finite numbers, string keys, JSON types only."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise SchemaError(f"{v!r} is not a JSON number", pointer)
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise SchemaError(f"an object key must be a string, not {k!r}", pointer)
                todo.append(x)
        elif isinstance(v, list):
            todo.extend(v)
        elif not (v is None or isinstance(v, (bool, int, float, str))):
            raise SchemaError(f"{_describe(v)} is not a JSON value", pointer)


def _describe(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"the boolean {'true' if v else 'false'}"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    if isinstance(v, str):
        text = v if len(v) <= 40 else v[:37] + "..."
        return f"the string {text!r}"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return f"a {type(v).__name__}"
