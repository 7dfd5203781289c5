"""Keyword values are checked against the draft's metaschema before anything reads them:
a malformed value is a SchemaError at that keyword's pointer, never a reinterpretation
(``"required": "abc"`` as ``["a", "b", "c"]``) or a raw TypeError / AttributeError."""

from __future__ import annotations

import math
import warnings

import jsonschema
import pytest

import gramgen
from gramgen.grammar.json_schema.keywords import KEYWORDS
from jsonschema_harness import BYTE_VOCAB, accepts

MALFORMED = [
    # (schema, pointer of the error, a fragment of its message)
    ({"type": "string", "format": 5}, "/format", "format must be a string"),
    ({"type": "integer", "minimum": True}, "/minimum", "minimum must be a finite number"),
    ({"type": "object", "required": "abc"}, "/required", "array of strings"),
    ({"enum": {"a": 1}}, "/enum", "enum must be an array"),
    ({"type": "object", "properties": []}, "/properties", "properties must be an object"),
    ({"allOf": {}}, "/allOf", "non-empty array of schemas"),
    ({"allOf": []}, "/allOf", "non-empty array of schemas"),
    ({"not": 5}, "/not", "a schema must be an object or a boolean"),
    ({"if": [1], "then": {}}, "/if", "a schema must be an object or a boolean"),
    ({"oneOf": [{}, "x"]}, "/oneOf/1", "a schema must be an object or a boolean"),
    ({"properties": {"a": {"items": {"pattern": 3}}}}, "/properties/a/items/pattern", "pattern must be a string"),
    ({"propertyNames": 3}, "/propertyNames", "a schema must be"),
    ({"$ref": 3}, "/$ref", "$ref must be a string"),
    ({"type": "number", "maximum": math.nan}, "/maximum", "finite number"),
    ({"type": "number", "exclusiveMinimum": -math.inf}, "/exclusiveMinimum", "finite number"),
    ({"type": "number", "multipleOf": 0}, "/multipleOf", "> 0"),
    ({"const": math.nan}, "/const", "not a JSON number"),
    ({"enum": [{1: 2}]}, "/enum", "key must be a string"),
    ({1: {"type": "string"}}, "", "keys must be strings"),
    # (inside an unknown keyword's value, which the keyword checks do not read)
    ({"x-meta": {"a": {0: None}}}, "/x-meta/a", "keys must be strings"),
    ({"properties": {("a",): {}}}, "/properties", "names in properties must be strings"),
    ({"$defs": {"x": {"$defs": {"y": 7}}}}, "/$defs/x/$defs/y", "a schema must be"),
    ({"type": "strnig"}, "/type", "type must be one of"),
    ({"type": ["string", "string"]}, "/type", "without repeats"),
    ({"minLength": 1.5}, "/minLength", "non-negative integer"),
    ({"maxItems": -1}, "/maxItems", "non-negative integer"),
    ({"dependentRequired": {"a": "b"}}, "/dependentRequired", "arrays of strings"),
    ({"dependencies": {"a": [1]}}, "/dependencies/a", "array of strings"),
    ({"items": [{}]}, "/items", "draft 2019-09 and earlier"),
    ({"$defs": {"a": [1]}, "$ref": "#/$defs/a"}, "/$defs/a", "a schema must be"),
    ({"properties": {"a": {"$ref": "#/required"}}, "required": ["a"]}, "/properties/a/$ref", "not at a schema"),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "not": True}, "/not", "draft 4"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "exclusiveMinimum": True}, "/exclusiveMinimum",
     "finite number"),
]


@pytest.mark.parametrize("schema,pointer,fragment", MALFORMED, ids=[repr(m[0])[:60] for m in MALFORMED])
def test_malformed_keyword_values_name_the_keyword(schema, pointer, fragment):
    with pytest.raises(gramgen.SchemaError) as info:
        gramgen.Grammar.from_json_schema(schema)
    assert info.value.pointer == pointer and fragment in info.value.message, str(info.value)


def test_remote_documents_are_checked_when_reached():
    refs = {"http://x.invalid/a.json": {"properties": {"a": {"minimum": "3"}}}}
    with pytest.raises(gramgen.SchemaError) as info:
        gramgen.Grammar.from_json_schema({"$ref": "http://x.invalid/a.json#/properties/a"}, refs=refs)
    assert info.value.pointer == "http://x.invalid/a.json#/properties/a/minimum"
    gramgen.Grammar.from_json_schema({"type": "integer"}, refs=refs)  # never reached: not read


WRONG_VALUES = [5, -1, 1.5, 0, True, None, "s", [], [1], ["s"], [{}], {}, {"a": 1}, {"a": "s"}, {"a": ["s"]}]
METASCHEMAS = {7: jsonschema.Draft7Validator, 2020: jsonschema.Draft202012Validator}


@pytest.mark.parametrize("draft", sorted(METASCHEMAS))
def test_every_keyword_value_agrees_with_the_metaschema(draft):
    """Each keyword with each value of the pool, one level down: the metaschema rejects it
    => a SchemaError pointing into that keyword; anything else => no raw exception."""
    meta = METASCHEMAS[draft]
    checked = 0
    for keyword in sorted(KEYWORDS):
        if keyword in ("$schema", "$id", "id"):
            continue  # resource identifiers: their values are resolved, not only typed
        for value in WRONG_VALUES:
            schema = {"properties": {"x": {keyword: value}}}
            try:
                meta.check_schema(schema)
                metaschema_ok = True
            except jsonschema.SchemaError:
                metaschema_ok = False
            try:
                gramgen.Grammar.from_json_schema(schema, draft=draft, lenient_formats=True, unknown_keywords="ignore")
            except (gramgen.SchemaError, gramgen.CompileLimitError) as exc:
                if not metaschema_ok:
                    checked += 1
                    assert (exc.pointer or "").startswith(f"/properties/x/{keyword}"), (keyword, value, str(exc))
                continue
            assert metaschema_ok, f"{keyword}: {value!r} violates the draft {draft} metaschema but compiled"
    assert checked > 100


def test_empty_schema_names_the_keywords():
    with pytest.raises(gramgen.SchemaError) as info:
        gramgen.Grammar.from_json_schema({"type": "object", "required": ["a"],
                                          "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 3}}})
    assert info.value.pointer == "/properties/a"
    assert "minimum 5, maximum 3" in info.value.message and "'a'" in info.value.message
    for schema, words in [({"type": "string", "minLength": 4, "maxLength": 2}, "minLength 4 > maxLength 2"),
                          ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems 3 > maxItems 1"),
                          ({"allOf": [{"type": "string"}, {"type": "null"}]}, "no type in common"),
                          ({"type": "integer", "minimum": 1, "maximum": 9, "multipleOf": 10}, "multipleOf 10")]:
        with pytest.raises(gramgen.SchemaError, match="accepts no JSON value") as info:
            gramgen.Grammar.from_json_schema(schema)
        assert words in info.value.message


def test_long_const_and_large_enum_compile():
    """10,000 characters of const / 10,000 enum values are split over several lexemes
    instead of one automaton past its state budget (a CompileLimitError without a pointer)."""
    text = "ab" * 5000
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"const": text}), BYTE_VOCAB)
    assert accepts(cg, f'"{text}"'.encode()) and not accepts(cg, f'"{text}b"'.encode())
    values = [f"v{i}" for i in range(10_000)]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"enum": values}), BYTE_VOCAB)
    assert accepts(cg, b'"v9876"') and accepts(cg, b'"v0"') and not accepts(cg, b'"v10000"')


@pytest.mark.parametrize("options", [{"draft": 3}, {"draft": True}, {"refs": ["x"]}, {"refs": {1: {}}}])
def test_bad_compiler_options(options):
    with pytest.raises(gramgen.ConfigurationError):
        gramgen.Grammar.from_json_schema({"type": "string"}, **options)


# ------------------------------------------------------------------ unknown keywords


def test_unknown_keywords_warn_and_are_listed():
    schema = {"type": "integer", "minDigits": 3,
              "properties": {"maxLenght": {"type": "string", "maxLenght": 3, "title": "t"}},
              "$defs": {"a": {"x-vendor": {"type": 5}, "description": "d"}}, "examples": [{"bogus": 1}]}
    with pytest.warns(gramgen.errors.UnknownKeywordWarning) as caught:
        g = gramgen.Grammar.from_json_schema(schema)
    # property names, annotations, data and an unknown keyword's own value are not keywords
    assert g.ir.meta["unknown_keywords"] == ["/$defs/a/x-vendor", "/minDigits", "/properties/maxLenght/maxLenght"]
    (warning,) = caught
    message = str(warning.message)
    assert "/minDigits" in message and "did you mean 'maxLength'?" in message
    assert warning.filename == __file__  # points at the caller, not into gramgen
    cg = gramgen.compile(g, BYTE_VOCAB)
    assert accepts(cg, b"10")  # and they constrain nothing


def test_unknown_keywords_error_and_ignore():
    with pytest.raises(gramgen.SchemaError) as info:
        gramgen.Grammar.from_json_schema({"type": "string", "properties": {"a": {"maxLenght": 3}}},
                                         unknown_keywords="error")
    assert info.value.pointer == "/properties/a/maxLenght" and "did you mean 'maxLength'?" in info.value.message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = gramgen.Grammar.from_json_schema({"type": "string", "maxLenght": 3}, unknown_keywords="ignore")
    assert g.ir.meta["unknown_keywords"] == ["/maxLenght"]
    with pytest.raises(gramgen.ConfigurationError, match="unknown_keywords"):
        gramgen.Grammar.from_json_schema({}, unknown_keywords="loud")


def test_known_keywords_of_every_draft_do_not_warn():
    schemas = [
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:x", "$anchor": "a", "$comment": "c",
         "$defs": {"d": {"title": "t", "description": "d", "default": 1, "examples": [1], "deprecated": True,
                         "readOnly": True, "writeOnly": False, "contentMediaType": "text/plain",
                         "contentEncoding": "base64", "contentSchema": {}}},
         "type": "object", "properties": {"a": {"$ref": "#/$defs/d"}}, "prefixItems": [{}],
         "dependentRequired": {"a": []}, "dependentSchemas": {"a": {}}, "unevaluatedProperties": True},
        {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"x": {}}, "dependencies": {"a": ["b"]},
         "items": [{}], "additionalItems": False, "if": {}, "then": {}, "else": {}, "contains": {}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "id": "urn:y", "exclusiveMinimum": True, "minimum": 1},
    ]
    for schema in schemas:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = gramgen.Grammar.from_json_schema(schema, lenient=True)
        assert g.ir.meta["unknown_keywords"] == [], schema


def test_pydantic_schemas_do_not_warn():
    pydantic = pytest.importorskip("pydantic")
    from typing import Literal

    class Tag(pydantic.BaseModel):
        """A tag."""
        name: str = pydantic.Field(min_length=1, description="the name", examples=["x"])

    class Item(pydantic.BaseModel):
        kind: Literal["a", "b"] = "a"
        tags: list[Tag] = pydantic.Field(default_factory=list, max_length=3)
        price: float | None = pydantic.Field(None, ge=0, deprecated=True)
        extra: dict[str, int] = {}

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = gramgen.Grammar.from_json_schema(Item)
    assert g.ir.meta["unknown_keywords"] == []


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_strict_must_be_a_bool(value):
    """strict='yes' was taken as true without a word."""
    with pytest.raises(gramgen.ConfigurationError, match="strict"):
        gramgen.Grammar.from_json_schema({"type": "object"}, strict=value)


def test_suggestion_is_difflibs_closest_keyword():
    """``keywords.suggestion`` filters the keywords by difflib's own bounds before its
    ratio: it names what ``difflib.get_close_matches(word, KEYWORDS, n=1, cutoff=0.75)``
    names (else the keyword equal but for case), on keywords with typos, case changes and
    foreign characters."""
    import difflib
    import random

    from gramgen.grammar.json_schema import keywords

    def reference(word: str) -> str:
        close = difflib.get_close_matches(word, keywords.KEYWORDS, n=1, cutoff=0.75)
        if not close:
            lower = {k.lower(): k for k in keywords.KEYWORDS}
            close = [lower[word.lower()]] if word.lower() in lower else []
        return f" (did you mean {close[0]!r}?)" if close else ""

    rng = random.Random(7)
    names = list(keywords.KEYWORDS)
    named = 0
    for _ in range(3000):
        word = list(rng.choice(names))
        for _ in range(rng.randint(0, 4)):
            at = rng.randrange(len(word) + 1)
            pick = rng.random()
            if pick < 0.3 and word:
                del word[min(at, len(word) - 1)]
            elif pick < 0.6:
                word.insert(at, rng.choice("abcdeIL$xy-é"))
            elif word:
                word[min(at, len(word) - 1)] = word[min(at, len(word) - 1)].upper()
        text = "".join(word)
        got = keywords.suggestion.__wrapped__(text)
        assert got == reference(text), text
        named += bool(got)
    assert 1000 <= named < 3000
