"""What a process did before must not change a grammar (and so its masks).

bench/e2e once generated ``{"accountSid":"1234567890","authToken":{"accountSid":…`` for
JSONSchemaBench Github_medium/o6249, whose ``authToken`` is a string: in that process the
grammar itself took the ``{`` (a fresh process rejected it). The JSON Schema compiler
memoized the nonterminal of each subschema by ``id(node)``, and some nodes it makes
while compiling (object variants: those of negated object keywords, which ``oneOf``
branches that overlap produce, or of ``dependencies``) died right after their entry was
made: a later node at the same address, often the very next variant, got the dead
node's nonterminal. Which node hit which depended on the allocator, so the same schema gave
different grammars, some wider than the schema (no mask error: the masks were exact for
a wrong grammar). The memo now holds its nodes.
"""

from __future__ import annotations

import random

import pytest

import gramgen
from gramgen.errors import TokenRejected
from gramgen.grammar.json_schema.compiler import SchemaCompiler
from gramgen.testing import _BYTES, accepts

# Github_medium/o6249 of JSONSchemaBench (its titles and messages left out): two ``oneOf``
# branches that overlap, each an object with required properties and an ``anyOf`` of two
# more requirements
_STRING = {"type": "string", "minLength": 1}
O6249 = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "definitions": {
        "accountSid": _STRING, "authToken": _STRING,
        "toNumbers": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "fromNumber": _STRING, "messagingServiceSid": _STRING, "bodyTemplate": _STRING,
        "mediaUrl": {"type": "string", "minLength": 1, "format": "uri"},
        "maxPrice": {"type": "string"},
    },
    "oneOf": [
        {"properties": {name: {"$ref": f"#/definitions/{name}"} for name in
                        ("accountSid", "authToken", "toNumbers", first, "bodyTemplate", "mediaUrl", "maxPrice")},
         "allOf": [{"required": ["accountSid", "authToken", "toNumbers", first]},
                   {"anyOf": [{"required": ["bodyTemplate"]}, {"required": ["mediaUrl"]}]}],
         "additionalProperties": False}
        for first in ("fromNumber", "messagingServiceSid")
    ],
}

# two overlapping ``oneOf`` branches: their exclusive parts negate additionalProperties,
# whose object variants are made one after the other
OVERLAP = {"type": "object", "oneOf": [
    {"properties": {"x": {"type": "string"}, other: {"type": "string"}}, "required": ["x"],
     "additionalProperties": False} for other in ("f", "m")]}


def _shape(grammar: gramgen.Grammar) -> tuple:
    ir = grammar.ir
    return tuple((r.lhs, r.rhs) for r in ir.rules), tuple(ir.lexemes.items())


def _under_heap_noise(schema, trials: int, seed: int = 0) -> list[gramgen.Grammar]:
    """The schema compiled ``trials`` times, with dicts of assorted sizes made and freed
    in between (different free addresses each time)."""
    rng = random.Random(seed)
    junk: list = []
    out = []
    for _ in range(trials):
        for _ in range(rng.randrange(200)):
            junk.append({i: i for i in range(rng.randrange(12))})
        rng.shuffle(junk)
        del junk[rng.randrange(len(junk) + 1):]
        out.append(gramgen.Grammar.from_json_schema(schema, whitespace="compact"))
    return out


def test_memo_answers_only_for_the_node_it_was_made_for(monkeypatch):
    """Whenever the compiler's memo of subschema nonterminals answers, the node asked
    about is the one the entry was made for (recorded as its repr: a dead node's
    successor at the same address has other content)."""
    stale: list[str] = []
    original = SchemaCompiler.value

    def value(self, node, *depth):
        made = self.__dict__.setdefault("_made_by_test", {})  # per compiler: id -> repr
        text = repr(node)
        if id(node) not in made:
            made[id(node)] = text
        elif made[id(node)] != text:
            stale.append(f"{text[:100]} answered as {made[id(node)][:100]}")
        return original(self, node, *depth)

    monkeypatch.setattr(SchemaCompiler, "value", value)
    for schema in (OVERLAP, O6249):
        gramgen.Grammar.from_json_schema(schema, whitespace="compact")
        assert not stale, stale


def test_schema_grammar_does_not_depend_on_the_heap():
    # in one process, with other work before it, the grammar of o6249 let authToken open
    # an object; every heap state must give the one grammar, which does not
    invalid_prefix = b'{"accountSid":"1234567890","authToken":{"'
    valid = ('{"accountSid":"AC1","authToken":"t","toNumbers":["+1"],"fromNumber":"+5",'
             '"bodyTemplate":"Hello","maxPrice":"0.01"}')
    shapes: dict[tuple, gramgen.Grammar] = {}
    for g in _under_heap_noise(O6249, 32, seed=4):
        shapes.setdefault(_shape(g), g)
    for g in shapes.values():
        assert accepts(g, valid)
        m = gramgen.compile(g, _BYTES).matcher()
        with pytest.raises(TokenRejected):
            m.advance_many(list(invalid_prefix))
    assert len(shapes) == 1, f"{len(shapes)} different grammars from one schema"
