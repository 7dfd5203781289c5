"""The JSON layout options of Grammar.from_json_schema (whitespace / separators / indent):
what ``json.dumps`` writes with the same options is accepted, and the same text with one
whitespace change is not."""

from __future__ import annotations

import json

import pytest

import gramgen
from gramgen.grammar.json_schema.compiler import MAX_INDENT_DEPTH
from jsonschema_harness import BYTE_VOCAB, accepts

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}},
                   "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                                "zip": {"type": "string"}},
                               "required": ["city"]}},
    "required": ["name", "age"],
}
TREE = {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                            "children": {"type": "array",
                                                                         "items": {"$ref": "#/$defs/node"}}},
                           "required": ["value"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}

#: (schema, values it allows, in the order the grammar emits their keys)
CASES = [
    (PERSON, [{"name": "Ada", "age": 36},
              {"name": "Ada", "age": 36, "tags": ["x", "é y"], "address": {"city": "London", "zip": "N1"}},
              {"name": "", "age": -1, "tags": [], "address": {"city": "a"}},
              {"name": "B", "age": 2, "address": {"city": "c"}, "extra": {"k": [1, {}, [], None]}}]),
    ({"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
     [[], [[]], [[1, 2.5], [], [-3]]]),
    ({"enum": [{"a": [1, 2], "b": {}}, [1, {"c": []}], "x", None]},
     [{"a": [1, 2], "b": {}}, [1, {"c": []}], "x", None]),
    ({"type": "object", "properties": {"k": {"const": {"deep": {"er": [True, False]}}}}, "required": ["k"]},
     [{"k": {"deep": {"er": [True, False]}}}]),
    ({"anyOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
                 "required": ["kind"]},
                {"type": "array", "items": {"type": "boolean"}, "minItems": 1}]},
     [{"kind": "a"}, {"kind": "a", "n": 3}, [True], [False, True]]),
    (TREE, [{"value": 1}, {"value": 1, "children": []},
            {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]}]),
    (True, [1, "s", None, [], {}, {"a": [1, {"b": [[]]}]}, [[[{"x": {}}]]]]),
    ({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
     [{}, {"a": []}, {"a": [1], "b": [2, 3]}]),
]

#: (from_json_schema options, the matching json.dumps options)
LAYOUTS = [
    ({}, {}),                                   # the default: json.dumps' own
    ({"whitespace": "compact"}, {"separators": (",", ":")}),
    ({"whitespace": "standard"}, {}),
    ({"separators": (" ,", " : ")}, {"separators": (" ,", " : ")}),
    ({"whitespace": "standard", "separators": (",", ":")}, {"separators": (",", ":")}),
    ({"indent": 2}, {"indent": 2}),
    ({"indent": 0}, {"indent": 0}),
    ({"indent": "\t"}, {"indent": "\t"}),
    ({"indent": 4, "separators": (", ", ": ")}, {"indent": 4, "separators": (", ", ": ")}),
    ({"indent": 1, "separators": (",", ":")}, {"indent": 1, "separators": (",", ":")}),
]


def _perturbations(text: str) -> set[str]:
    """``text`` with one whitespace change: a space added after each kind of punctuation
    (outside strings), one whitespace character removed, a newline doubled."""
    out = set()
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{}[],:":
            out.add(text[:i + 1] + " " + text[i + 1:])
            out.add(text[:i] + " " + text[i:])
        elif ch in " \t\n":
            out.add(text[:i] + text[i + 1:])
            out.add(text[:i] + ch + text[i:])
    out.discard(text)
    return out


@pytest.mark.parametrize("options,dumps", LAYOUTS, ids=[repr(o) for o, _ in LAYOUTS])
def test_json_dumps_layout_exactly(options, dumps):
    for schema, values in CASES:
        cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, **options), BYTE_VOCAB)
        for value in values:
            text = json.dumps(value, ensure_ascii=False, **dumps)
            assert accepts(cg, text.encode()), (schema, options, text)
            for bad in sorted(_perturbations(text)):
                assert not accepts(cg, bad.encode()), (schema, options, text, bad)


def test_standard_is_json_dumps_default():
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(PERSON, whitespace="standard"), BYTE_VOCAB)
    assert accepts(cg, b'{"name": "Ada", "age": 36, "tags": ["a", "b"]}')
    assert not accepts(cg, b'{"name":"Ada","age":36}')
    assert not accepts(cg, b'{"name": "Ada" , "age": 36}')


def test_default_whitespace_is_one_constant():
    from gramgen.grammar.json_schema import compiler
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "array"}), BYTE_VOCAB)
    expected = json.dumps([1, 2], **({"separators": (",", ":")} if compiler.DEFAULT_WHITESPACE == "compact" else {}))
    assert accepts(cg, expected.encode())


def test_indent_depth_bound():
    """Past MAX_INDENT_DEPTH nested containers the grammar has no containers (it never
    guesses a layout); a schema that needs deeper ones says why it is empty."""
    deep = 0
    for _ in range(MAX_INDENT_DEPTH + 1):
        deep = [deep]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(True, indent=2), BYTE_VOCAB)
    assert accepts(cg, json.dumps(deep[0], indent=2).encode())
    assert not accepts(cg, json.dumps(deep, indent=2).encode())
    chain = {"type": "array", "items": {"$ref": "#"}, "minItems": 1}
    with pytest.raises(gramgen.SchemaError, match="nested containers"):
        gramgen.Grammar.from_json_schema(chain, indent=2)


@pytest.mark.parametrize("options,fragment", [
    ({"whitespace": "pretty"}, "whitespace"),
    ({"whitespace": "flexible", "indent": 2}, "flexible"),
    ({"whitespace": "flexible", "separators": (",", ":")}, "flexible"),
    ({"separators": ", "}, "separators"),
    ({"separators": (",", ":", " ")}, "separators"),
    ({"separators": (";", ":")}, "item separator"),
    ({"separators": (",", "=")}, "key separator"),
    ({"separators": (", x", ": ")}, "item separator"),
    ({"separators": (",", None)}, "key separator"),
    ({"indent": -1}, "indent"),
    ({"indent": True}, "indent"),
    ({"indent": 1.5}, "indent"),
    ({"indent": "--"}, "indent"),
    ({"indent": 10**9}, "indent"),
    ({"max_whitespace": -1}, "max_whitespace"),
    ({"max_whitespace": "3"}, "max_whitespace"),
])
def test_bad_layout_options(options, fragment):
    with pytest.raises(gramgen.ConfigurationError, match=fragment):
        gramgen.Grammar.from_json_schema({"type": "object"}, **options)


def test_merging_regular_rules_keeps_the_masks():
    """``max_lexeme_nodes``: 0 (the default) leaves objects, arrays and alternatives as
    rules; N > 0 merges them into fewer, larger lexemes. The masks are the same at every
    byte of valid and invalid texts, and a bad value is a ConfigurationError."""
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5}, "kind": {"enum": ["a", "bc", 3]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        "at": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "required": ["kind"]}
    rules = gramgen.Grammar.from_json_schema(schema, whitespace="flexible")
    merged = gramgen.Grammar.from_json_schema(schema, whitespace="flexible", max_lexeme_nodes=2000)
    assert len(merged.ir.rules) < len(rules.ir.rules) and len(merged.ir.lexemes) < len(rules.ir.lexemes)
    a, b = gramgen.compile(rules, BYTE_VOCAB), gramgen.compile(merged, BYTE_VOCAB)
    texts = [b'{"name": "ab", "kind": 3, "tags": [true,false], "at": {"x": -12}}', b'{"kind":"bc","extra":[1,{}]}',
             b'{ "kind" : "a" , "at":{"x":0,"y":null}}', b'{"name":"abcdef","kind":"a"}', b'{"kind":"b"}',
             b'{"tags":[true,true,true],"kind":3}']
    for text in texts:
        ma, mb = a.matcher(), b.matcher()
        for byte in text:
            assert (ma.mask() == mb.mask()).all(), text
            if not ma.check(byte):
                assert not mb.check(byte)
                break
            ma.advance(byte)
            mb.advance(byte)
        assert accepts(a, text) == accepts(b, text)
    for bad in (-1, True, 1.5, "10"):
        with pytest.raises(gramgen.errors.ConfigurationError):
            gramgen.Grammar.from_json_schema(schema, max_lexeme_nodes=bad)


@pytest.mark.parametrize("layout", [{"whitespace": "flexible"}, {"whitespace": "compact"}, {"indent": 2},
                                    {"separators": (" ,", " : ")}])
def test_other_keys_automaton_is_any_key_without_the_names(layout):
    """The automaton of "any key but the declared ones" is made from any key's, cut where a
    declared name's spelling and its closing quote end (``ir.meta[WITHOUT_PREFIXES]``):
    the same tables as its own regex gives, for names with escapes (quotes, backslashes,
    controls with a short escape or a ``\\u00XX`` in either case), non-ASCII and astral
    characters, the empty name, names that are prefixes of others, and a lone surrogate
    (never a key). Names with too many spellings leave the lexeme to its regex."""
    import random

    from gramgen.automata.dfa import compile_regex, without_prefixes
    from gramgen.grammar.ir import WITHOUT_PREFIXES
    from gramgen.grammar.json_schema import strings

    rng = random.Random(3)
    alphabet = ["a", "b", "ab", "é", "中", "\U0001F600", '"', "\\", "/", "\n", "\x1f", "\x0b", "\ud800", " "]
    made = 0
    for _ in range(50):
        names = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 7))}
        schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}}
        g = gramgen.Grammar.from_json_schema(schema, **layout)
        for name, (rx, base, prefixes) in g.ir.meta[WITHOUT_PREFIXES].items():
            assert g.ir.lexemes[name] is rx
            want = compile_regex(rx)
            got = without_prefixes(compile_regex(base), prefixes)
            assert (got.transitions == want.transitions).all() and (got.accepting == want.accepting).all()
            made += 1
        for n in names:
            spelled = strings.spellings(n)
            if spelled is None:
                assert any(0xD800 <= ord(c) <= 0xDFFF for c in n)
                continue
            assert sorted(json.loads(b'"' + s + b'"') for s in spelled) == [n] * len(spelled)
            assert len(set(spelled)) == 2 ** sum(c in "\x0b\x1f" for c in n)
    assert made == 50
    many = gramgen.Grammar.from_json_schema({"type": "object", "properties": {"\x0b" * 9: {"type": "integer"},
                                                                           "a": {"type": "integer"}}}, **layout)
    assert strings.spellings("\x0b" * 9) is None and not many.ir.meta[WITHOUT_PREFIXES]


def test_flexible_key_separator_is_one_shared_lexeme():
    """With flexible whitespace a key's lexeme is the quoted name alone, and the separator
    (bounded whitespace, the colon, bounded whitespace) one lexeme that every key shares,
    declared, other or of an open value's objects. Whitespace up to ``max_whitespace`` on
    each side of the colon is accepted, one more is not; at every byte of those texts the
    mask equals the one of the same schema merged into larger lexemes (where the separator
    is inside them), and each token of the mask passes ``check`` and no other."""
    from gramgen.automata.dfa import compile_regex

    schema = {"type": "object", "properties": {"ab": {"type": "integer"}, "a": {"type": "object"}},
              "additionalProperties": {"type": "boolean"}}
    g = gramgen.Grammar.from_json_schema(schema, whitespace="flexible", max_whitespace=3)
    keys = [name for name in g.ir.lexemes if name.startswith("KEY")]
    colons = [name for name in g.ir.lexemes if name.startswith("COLON")]
    # "ab", "a", any other name; any name in the object "a" and in the objects of its values
    assert len(keys) == 5 and len(colons) == 1
    sep = compile_regex(g.ir.lexemes[colons[0]])
    assert all(sep.matches(s) for s in (b":", b" \t:\n\r ", b"   :   ")) and not sep.matches(b"    :")
    for name in keys:
        dfa = compile_regex(g.ir.lexemes[name])
        assert not any(dfa.matches(b'"ab"' + s) for s in (b":", b" :"))
    assert compile_regex(g.ir.lexemes[keys[0]]).matches(b'"ab"')
    for name, (_, base, _) in g.ir.meta["without_prefixes"].items():
        assert compile_regex(base).matches(b'"x"') and not compile_regex(base).matches(b'"x":')
    merged = gramgen.Grammar.from_json_schema(schema, whitespace="flexible", max_whitespace=3,
                                              max_lexeme_nodes=2000)
    a, b = gramgen.compile(g, BYTE_VOCAB), gramgen.compile(merged, BYTE_VOCAB)
    good = [b'{"ab"   :   1}', b'{"ab":1,"a"\t:\n{"x" : [1, {"y" \r:\r"z"}]}, "q"   :true}',
            b'{"a":{},"zz" : false}']
    bad = [b'{"ab"    :1}', b'{"ab":    1}', b'{"a":{"x"    :1}}', b'{"q" :    false}', b'{"ab" 1}',
           b'{"ab"::1}']
    for text in good + bad:
        ma, mb = a.matcher(), b.matcher()
        for byte in text:
            mask = ma.mask()
            assert (mask == mb.mask()).all(), text
            assert [t for t in range(256) if ma.check(t)] == [t for t in range(256) if mask[t]], text
            if not ma.check(byte):
                break
            ma.advance(byte)
            mb.advance(byte)
        assert accepts(a, text) == (text in good) == accepts(b, text), text
