"""JSON Schema compiler: exact numeric and string constructions, error policy, inputs,
and JSONSchemaBench instances walked through real tokenizers."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import jsonschema
import numpy as np
import pytest

import gramgen
from conftest import SHARED, hf_tokenizer, vocabulary
from gramgen.grammar import cpdfa
from gramgen.grammar.json_schema import numbers
from gramgen.grammar.json_schema.loader import Resolver
from jsonschema_harness import BYTE_VOCAB, accepts, compact, order_like_schema
from textgen import tokenize

# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize("seed", range(4))
def test_integer_ranges_exhaustive(seed):
    rng = random.Random(seed)
    lo, hi = sorted(rng.randint(-10_000, 10_000) for _ in range(2))
    dfa = cpdfa.from_regex(numbers.integers(lo, hi))
    for n in range(-20_000, 20_001, 1 if seed == 0 else 7):
        assert dfa.matches(str(n)) == (lo <= n <= hi), (lo, hi, n)
    assert not dfa.matches("-0") and not dfa.matches("01")


def test_half_open_integer_ranges():
    assert cpdfa.from_regex(numbers.integers(None, -3)).matches("-123456789012345678901234567890")
    above = cpdfa.from_regex(numbers.integers(98, None))
    assert [n for n in range(0, 2000) if above.matches(str(n))] == list(range(98, 2000))


DECIMALS = [Decimal(n) / 100 for n in range(-1500, 1500, 3)]


def _spellings(v: Decimal) -> set[str]:
    """Canonical numerals of v: as computed, with extra trailing zeros, normalized."""
    text = format(v, "f")
    out = {text, format(v.normalize(), "f") if v else "0"}
    if "." in text:
        out.add(text + "00")
    return out


@pytest.mark.parametrize("bound", ["0", "2.5", "-2.5", "3", "-3", "0.07", "-0.1", "10.05"])
@pytest.mark.parametrize("op", [">", ">=", "<", "<="])
def test_decimal_bounds_exact(op, bound):
    b = Decimal(bound)
    dfa = cpdfa.from_regex(numbers.compare(op, b))
    for v in DECIMALS:
        for text in _spellings(v):
            if text.startswith("-") and Decimal(text) == 0:
                continue  # -0 is never produced
            expected = {">": Decimal(text) > b, ">=": Decimal(text) >= b,
                        "<": Decimal(text) < b, "<=": Decimal(text) <= b}[op]
            assert dfa.matches(text) == expected, (op, bound, text)


@pytest.mark.parametrize("step", ["3", "7", "0.5", "0.01", "1.25"])
def test_multiple_of_exact(step):
    s = Decimal(step)
    dfa = cpdfa.from_regex(numbers.multiple_of(s, allow_fraction=True))
    for v in DECIMALS:
        for text in _spellings(v):
            if text.startswith("-") and Decimal(text) == 0:
                continue
            assert dfa.matches(text) == (Decimal(text) % s == 0), (step, text)


@pytest.mark.parametrize("step", ["10", "300", "7e3", "2.5e2", "1.2e3", "40"])
@pytest.mark.parametrize("allow_fraction", [True, False])
def test_multiple_of_integer_steps_with_trailing_zeros(step, allow_fraction):
    """Steps c * 10**k take c * (k + 1) states; the language is exactly the multiples."""
    s = Decimal(step)
    dfa = cpdfa.from_regex(numbers.multiple_of(s, allow_fraction=allow_fraction))
    for n in range(-30_000, 30_001, 10 if s >= 1000 else 1):
        assert dfa.matches(str(n)) == (n % s == 0), (step, n)
        assert dfa.matches(f"{n}.00") == (allow_fraction and n % s == 0), (step, n)
        assert not dfa.matches(f"{n}.5") and not dfa.matches(f"{n}.")
    assert not dfa.matches("-0") and not dfa.matches("00") and not dfa.matches("0" + str(int(s)))


def test_multiple_of_a_huge_power_of_ten_is_small():
    """multipleOf 1e30 (10**30 remainders before) compiles to a few dozen states."""
    dfa = cpdfa.from_regex(numbers.multiple_of(Decimal("1e30"), allow_fraction=True))
    assert dfa.matches("1" + "0" * 30) and dfa.matches("-37" + "0" * 31) and dfa.matches("0")
    assert dfa.matches("5" + "0" * 30 + ".000")
    assert not dfa.matches("1" + "0" * 29) and not dfa.matches("1" + "0" * 30 + "1" + "0" * 29)
    assert dfa.matches("1" + "0" * 29 + "1" + "0" * 30)
    assert not dfa.matches("1" + "0" * 30 + ".1")
    three = cpdfa.from_regex(numbers.multiple_of(Decimal("3e30"), allow_fraction=False))
    assert three.matches("12" + "0" * 30) and not three.matches("13" + "0" * 30)
    assert three.matches("3" + "0" * 33) and not three.matches("1" + "0" * 33)
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "integer", "multipleOf": 1e30},
                                                          whitespace="compact"), BYTE_VOCAB)
    assert accepts(cg, b"2" + b"0" * 30) and not accepts(cg, b"2" + b"0" * 29)


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "integer"}, "maxItems": 5000},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3000},
    {"type": "array", "items": {"enum": [1, 22]}, "minItems": 1234, "maxItems": 2345},
    {"type": "array", "prefixItems": [{"const": "a"}, {"type": "boolean"}], "items": {"type": "null"},
     "minItems": 3, "maxItems": 4097},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 7, "minItems": 2},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 1},
])
def test_array_bounds_cost_log_rules(schema):
    """Items past the prefix are counted by O(log n) rules (a maxItems of 5000 used to
    raise CompileLimitError): exactly the lengths the schema allows are accepted."""
    g = gramgen.Grammar.from_json_schema(schema, whitespace="compact")
    assert len(g.ir.rules) < 400
    cg = gramgen.compile(g, BYTE_VOCAB)
    lo, hi = schema.get("minItems", 0), schema.get("maxItems", 6000)
    item = {"integer": 7, "null": None}.get(schema["items"].get("type"), 22)
    prefix = ["a", True][:len(schema.get("prefixItems", []))]
    for n in sorted({0, 1, 2, 3, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1}):
        if n < 0:
            continue
        value = prefix[:n] + [item] * (n - len(prefix))
        text = compact(value)
        expected = jsonschema.Draft202012Validator(schema).is_valid(value)
        assert accepts(cg, text) == expected, (n, text[:40])
    if prefix:
        assert not accepts(cg, compact([True, "a"] + [None] * lo))


@pytest.mark.parametrize("seed", range(3))
def test_all_but_knows_its_groups(seed):
    """``cpdfa.all_but`` hands ``to_automaton`` its edges grouped per target (most trie
    nodes have children within the one-byte characters): the groups ``_state_groups``
    finds from the edges, and the same automaton as from the edges alone, for names with
    controls, quotes, backslashes, DEL, non-ASCII and surrogates."""
    from gramgen.grammar.json_schema import strings

    rng = random.Random(seed)
    chars = [*_NAME_CHARS, "z", " ", "!", "#", "~", "\x7f", "\x1f", "\x80", "[", "]"]
    for _ in range(400):
        words = sorted({"".join(rng.choice(chars) for _ in range(rng.randint(0, 5)))
                        for _ in range(rng.randint(0, 8))})
        but = cpdfa.all_but(words)
        found: list = []
        for s, out in enumerate(but.edges):
            cpdfa._state_groups(s, out, {}, found)
        assert but.groups is None or but.groups == found, words
        plain = cpdfa.CodepointDFA(but.edges, but.accepting)
        assert cpdfa.to_automaton(but, strings.json_char) == cpdfa.to_automaton(plain, strings.json_char)


@pytest.mark.parametrize("seed", range(2))
def test_other_keys_spelling_is_made_on_first_read(seed):
    """``strings.spelled(cpdfa.all_but(words))`` is an automaton made when first read
    (``Automaton.deferred``): then equal, field by field and as a whole, to the spelling of
    the automaton made at once, and so is its hash; ``all_but``'s own edges are made on
    first read too, with ``excluded`` (the words without a lone surrogate) and ``is_empty``
    known before. A flexible-layout schema that leaves other keys open compiles without
    making either (their DFA is cut from any key's), and still tells the declared names
    from the others (``a\\u0022``, a declared name spelled otherwise than gramgen spells
    it, is neither)."""
    from gramgen.grammar.ir import Automaton
    from gramgen.grammar.json_schema import strings

    def made(rx) -> bool:
        try:
            object.__getattribute__(rx, "_make")
        except AttributeError:
            return True
        return False

    rng = random.Random(seed)
    for _ in range(200):
        words = sorted({"".join(rng.choice(_NAME_CHARS) for _ in range(rng.randint(0, 5)))
                        for _ in range(rng.randint(0, 8))})
        but = cpdfa.all_but(words)
        assert not but.is_empty()
        assert but.excluded == tuple(w for w in words if not any(0xD800 <= ord(c) <= 0xDFFF for c in w))
        lazy = strings.spelled(but)
        auto = lazy.items[1]
        assert auto.__class__ is Automaton and not made(auto)
        eager = cpdfa._all_but_now(words)
        now = strings.quoted(cpdfa.to_automaton(eager, strings.json_char))
        assert hash(lazy) == hash(now) and lazy == now and made(auto)
        assert (auto.n_states, auto.start, auto.edges, auto.accepting) == \
            (now.items[1].n_states, now.items[1].start, now.items[1].edges, now.items[1].accepting)
        assert but.excluded == eager.excluded and but.edges == eager.edges

    schema = {"type": "object", "properties": {"ab": {"type": "integer"}, "a\"": {"type": "string"}}}
    g = gramgen.Grammar.from_json_schema(schema, whitespace="flexible")
    others = [rx.items[1] for rx in g.ir.lexemes.values()
              if rx.__class__.__name__ == "Seq" and len(rx.items) == 3 and rx.items[1].__class__ is Automaton]
    assert others
    cg = gramgen.compile(g, BYTE_VOCAB)
    assert not any(made(a) for a in others)
    for text, ok in ((b'{"ab":1,"a\\"":"x","zz":[1]}', True), (b'{"ab":1,"ab":2}', False),
                     (b'{"a\\u0022":"x"}', False), (b'{"a\\"":1}', False)):
        assert accepts(cg, text) == ok, text


def test_one_byte_split_and_adjacent_join_equal_the_general_ones():
    """``to_automaton`` cuts a state's ranges with ``cpdfa._split_one_byte`` and joins a
    group's sorted ranges with ``cpdfa._join_adjacent``: the same as the general
    ``_split_ranges(ranges, _ONE_BYTE)`` and ``normalize_ranges``, on ranges around the
    one-byte bounds (``"``, ``\\``, DEL, controls) and beyond ASCII."""
    from gramgen.grammar.ir import normalize_ranges

    rng = random.Random(0)
    points = [0, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7E, 0x7F, 0x80, 0xFF, 0xD7FF, 0xE000,
              0x10FFFF]
    for _ in range(5000):
        cuts = sorted(set(rng.sample(points, rng.randint(2, 8))
                          + [rng.randint(0, 0x100) for _ in range(rng.randint(0, 6))]))
        ranges = normalize_ranges(tuple((cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)))
        assert cpdfa._split_one_byte(ranges) == cpdfa._split_ranges(ranges, cpdfa._ONE_BYTE), ranges
        touching, at = [], rng.randint(0, 0x90)
        for _ in range(rng.randint(1, 8)):
            hi = at + rng.randint(0, 3)
            touching.append((at, hi))
            at = hi + 1 + rng.choice([0, 0, 1, 5])
        assert cpdfa._join_adjacent(touching) == normalize_ranges(tuple(touching)), touching


_NAME_CHARS = ["a", "b", "c", "\x00", '"', "\\", "\u00e9", "\u4e2d", "\U0001F600", "\ud800",
               "\ue000", "\U0010FFFF", "\ud7ff"]


@pytest.mark.parametrize("seed", range(4))
def test_declared_names_and_all_but_them_as_automata(seed):
    """``cpdfa.words_dfa`` (the trie of an object's declared names) and ``cpdfa.all_but``
    (every name but those, built from the trie in one pass) recognize what the
    subset construction of the names' alternation and its difference from every string
    recognize: equal languages (both differences empty) and equal verdicts on names, their
    prefixes and extensions; lone surrogates and the empty name included."""
    from gramgen.grammar.ir import EMPTY, CharRanges, Repeat, literal
    from gramgen.grammar.simplify import alt

    rng = random.Random(seed)
    every = cpdfa.from_regex(Repeat(CharRanges(cpdfa.ANY_CHAR), 0, None))
    for _ in range(60):
        words = sorted({"".join(rng.choice(_NAME_CHARS) for _ in range(rng.randint(0, 4)))
                        for _ in range(rng.randint(0, 6))})
        trie, but = cpdfa.words_dfa(words), cpdfa.all_but(words)
        if words:
            ref = cpdfa.from_regex(alt([literal(w) if w else EMPTY for w in words]))
            ref_but = cpdfa.difference(every, ref)
            for a, b in ((trie, ref), (ref, trie), (but, ref_but), (ref_but, but)):
                assert cpdfa.difference(a, b).is_empty()
        else:
            assert trie.is_empty()
            assert cpdfa.difference(every, but).is_empty() and cpdfa.difference(but, every).is_empty()
        for _ in range(40):
            text = "".join(rng.choice(_NAME_CHARS) for _ in range(rng.randint(0, 5)))
            if words and rng.random() < 0.5:
                text = rng.choice(words)[:rng.randint(0, 5)] + rng.choice(["", *_NAME_CHARS])
            assert trie.matches(text) == (text in words)
            assert but.matches(text) == (text not in words and not any(0xD800 <= ord(c) <= 0xDFFF for c in text))
        for d in (trie, but):  # edges sorted, disjoint, within the code points
            for out in d.edges:
                assert all(lo <= hi for lo, hi, _ in out)
                assert all(a[1] < b[0] for a, b in zip(out, out[1:]))


def test_schema_numbers_through_the_matcher():
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(
        {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2, "multipleOf": 0.5}, whitespace="compact"), BYTE_VOCAB)
    got = {t for t in ["-2", "-1.5", "-1", "0", "0.5", "1.50", "2", "2.0", "0.25", "-0"]
           if accepts(cg, t.encode())}
    assert got == {"-1.5", "-1", "0", "0.5", "1.50"}
    ints = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "integer", "minimum": 0.5,
                                                              "maximum": 12.7}, whitespace="compact"), BYTE_VOCAB)
    assert [n for n in range(-5, 20) if accepts(ints, str(n).encode())] == list(range(1, 13))


# ------------------------------------------------------------------ strings


def test_string_length_counts_code_points():
    rng = random.Random(3)
    alphabet = ["a", "é", "\u4e2d", "\U0001F600", "\n", '"', "\\", "\x01", "/", " "]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "string", "minLength": 2, "maxLength": 4}, whitespace="compact"),
                         BYTE_VOCAB)
    for _ in range(300):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        assert accepts(cg, json.dumps(s, ensure_ascii=False).encode()) == (2 <= len(s) <= 4), repr(s)


@pytest.mark.parametrize("lo,hi", [(70, 300), (0, 5000), (260, None)])
def test_long_strings_counted_in_blocks(lo, hi):
    schema = {"type": "string", "minLength": lo} | ({"maxLength": hi} if hi is not None else {})
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    edges = {0, 1, 63, 64, 65, 127, 128, 129, lo - 1, lo, lo + 1, 4999, 5000, 5001}
    if hi is not None:
        edges |= {hi - 1, hi, hi + 1}
    for n in sorted(e for e in edges if e >= 0):
        text = "é" * (n // 2) + "a" * (n - n // 2)
        expected = lo <= n and (hi is None or n <= hi)
        assert accepts(cg, json.dumps(text, ensure_ascii=False).encode()) == expected, n


def test_pattern_is_unanchored_and_intersects_with_length():
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(
        {"type": "string", "pattern": "ab+c", "maxLength": 5}, whitespace="compact"), BYTE_VOCAB)
    assert accepts(cg, b'"xabc"') and accepts(cg, b'"abbbc"')
    assert not accepts(cg, b'"xabbbc"') and not accepts(cg, b'"ac"')
    anchored = gramgen.compile(gramgen.Grammar.from_json_schema({"pattern": "^\\d{3}$"}, whitespace="compact"), BYTE_VOCAB)
    assert accepts(anchored, b'"123"') and not accepts(anchored, b'"1234"')
    assert accepts(anchored, b"17")  # pattern applies to strings only


@pytest.mark.parametrize("pattern", [
    "UTC|(Africa/[A-Za-z]+)|(America/[A-Za-z]+)|(Antarctica/[A-Za-z]+)|(Arctic/[A-Za-z]+)|(Asia/[A-Za-z]+)"
    "|(Atlantic/[A-Za-z]+)|(Australia/[A-Za-z]+)|(Europe/[A-Za-z]+)|(Indian/[A-Za-z]+)|(Pacific/[A-Za-z]+)",
    "a|b*", "^x|y$", "(ab)+c", "[^a]b|a[^b]"])
def test_unanchored_patterns_match_like_re_search(pattern):
    """Unanchored patterns: once a match is found every continuation is accepted, so the
    states still tracking other partial matches collapse into one (the timezone pattern
    needed over 20,000 DFA states before); the language is unchanged."""
    from gramgen.grammar.json_schema import strings

    dfa = strings.pattern_dfa(pattern)
    assert dfa.n_states < 200
    rng = random.Random(pattern)
    alphabet = "aAbcxyUTC/isEurope" + "é!"
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.3:
            word = rng.choice(["Asia/", "Europe/Paris", "UTC", "ab", "abc", "y", "x"])
            i = rng.randint(0, len(text))
            text = text[:i] + word + text[i:]
        assert dfa.matches(text) == bool(re.search(pattern, text)), text


def _ecma_search(pattern: str, text: str) -> bool:
    """Reference ECMA-262 search for the ASCII-safe patterns below: Python's ``re`` with
    ``$`` meaning the very end (``\\Z``), as in ECMA without the ``m`` flag."""
    out, in_class, escaped = [], False, False
    for c in pattern:
        out.append("\\Z" if c == "$" and not in_class and not escaped else c)
        in_class = (c == "[" or in_class) and not (c == "]" and not escaped)
        escaped = c == "\\" and not escaped
    return re.search("".join(out), text) is not None


@pytest.mark.parametrize("pattern", [
    "^$|(^(?:[^ ]+ +){0,4}[^ ]+$)", "(^gs://(.+))|(^http://(.+))|(^https://(.+))", "^([^,]|$)",
    "^$[a-z$_]*$", r"^(/?((\.{2})|([a-z0-9-]*))($|/))*$", "(^$)|(^[a-fA-F0-9]{3}$)", "^^a", "a$$",
    "(a|$)+", "(^|x)y", "x(^|y)", "^a|b$", "$^", "(^)*a", "a($|b)c"])
def test_anchors_anywhere_match_like_ecma(pattern):
    """``^``/``$`` inside groups and branches keep their zero-width meaning (start / end
    of the string only; ``$`` not before a final newline); these patterns raised before."""
    from gramgen.grammar.json_schema import strings

    dfa = strings.pattern_dfa(pattern)
    rng = random.Random(pattern)
    alphabet = "ab,xy$/.-_é \n:gshtp0A"
    texts = ["", "a", "\n", "a\n", "ab", "ac", "abc", "gs://x", "https://", "..", "../x/", "x y", "$"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(1500)]
    for text in texts:
        assert dfa.matches(text) == _ecma_search(pattern, text), (pattern, text)


def test_negated_class_escapes_inside_classes():
    """``[\\S]``, ``[a-z\\W]``, ``[^\\D]`` use ECMA's sets (U+0085 is not ECMA white
    space; U+FEFF is), written out as code points inside the class."""
    from gramgen.grammar.json_schema import strings

    cases = {r"^[\S]$": {"a": True, "\x85": True, "\ufeff": False, "\u3000": False, " ": False, "\n": False},
             r"^[b\W]$": {"b": True, "a": False, "_": False, "é": True, "-": True},
             r"^[^\D]$": {"7": True, "a": False, "\u0663": False}}
    for pattern, expect in cases.items():
        dfa = strings.pattern_dfa(pattern)
        for text, want in expect.items():
            assert dfa.matches(text) == want, (pattern, text)


def test_length_bound_implied_by_the_format_is_not_multiplied_in():
    """A hostname is at most 247 characters here, so ``maxLength: 255`` adds nothing and
    no length counter (this needed over 20,000 automaton states before)."""
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(
        {"type": "string", "format": "hostname", "maxLength": 255}, whitespace="compact"), BYTE_VOCAB)
    longest = ".".join(["a" * 30] * 8)
    assert len(longest) == 247
    assert accepts(cg, json.dumps(longest).encode())
    assert not accepts(cg, json.dumps(longest + "a").encode())
    short = gramgen.compile(gramgen.Grammar.from_json_schema(
        {"type": "string", "format": "hostname", "maxLength": 20, "minLength": 3}, whitespace="compact"), BYTE_VOCAB)
    for n in (1, 2, 3, 20, 21):
        assert accepts(short, json.dumps("a" * n).encode()) == (3 <= n <= 20), n
    dfa = cpdfa.from_regex(gramgen.grammar.json_schema.strings.format_regex("date"))
    assert cpdfa.length_range(dfa) == (10, 10)


def test_declared_names_meet_patterns_with_ecma_end_anchor():
    """A declared name ``"a\\n"`` does not match ``^a$`` (Python's ``$`` would match
    before the final newline and wrongly add the pattern's schema to the property; the
    ``jsonschema`` package does exactly that, so the expectations are written out)."""
    schema = {"properties": {"a\n": {"type": "integer"}}, "patternProperties": {"^a$": {"type": "string"}}}
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    for value, valid in (({"a\n": 1}, True), ({"a\n": "x"}, False), ({"a": "x"}, True), ({"a": 1}, False)):
        assert accepts(cg, compact(value)) == valid, value


# ------------------------------------------------------------------ errors and inputs


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems", "/uniqueItems"),
    ({"properties": {"a": {"not": {"prefixItems": [{"const": 1}]}}}}, "not", "/properties/a/not"),
    ({"type": "array", "unevaluatedItems": False}, "unevaluatedItems", "/unevaluatedItems"),
    ({"type": "array", "contains": {"prefixItems": [{"const": 1}]}}, "contains", "/contains"),
    ({"oneOf": [{"prefixItems": [{"const": 1}]}, {"type": "array"}]}, "oneOf", "/oneOf"),
    ({"if": {"prefixItems": [{"const": 1}]}, "then": {"minItems": 1}}, "if", "/if"),
])
def test_unsupported_keywords_name_keyword_and_pointer(schema, keyword, pointer):
    with pytest.raises(gramgen.SchemaError) as info:
        gramgen.Grammar.from_json_schema(schema, whitespace="compact")
    assert keyword in str(info.value) and info.value.pointer == pointer
    relaxed = gramgen.Grammar.from_json_schema(schema, lenient=True, whitespace="compact")
    assert any(pointer in r for r in relaxed.ir.meta["relaxed"])


DIFFERENTIAL = [
    {"not": {"required": ["a", "b"]}, "type": "object"},
    {"not": {"type": "string", "maxLength": 2}},
    {"not": {"enum": [1, "x", None]}, "type": ["integer", "string", "null"]},
    {"not": {"pattern": "^a"}, "type": "string"},
    {"type": "integer", "not": {"multipleOf": 3}, "minimum": -5, "maximum": 9},
    {"if": {"properties": {"k": {"const": "n"}}, "required": ["k"]},
     "then": {"properties": {"v": {"type": "integer"}}}, "else": {"properties": {"v": {"type": "string"}}},
     "type": "object", "properties": {"k": {"type": "string"}, "v": {}}},
    {"oneOf": [{"type": "integer"}, {"minimum": 2}]},
    {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "properties": {"a": {}, "b": {}}, "type": "object"},
    {"type": "array", "contains": {"type": "string"}, "minContains": 2, "maxContains": 3, "maxItems": 5},
    {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}},
    {"not": {"oneOf": [{"type": "integer"}, {"minimum": 2}, {"type": "string", "maxLength": 1}]}},
    {"allOf": [{"oneOf": [{"type": "integer"}, {"minimum": 2}]}, {"oneOf": [{"maximum": 3}, {"type": "array"}]}]},
    {"allOf": [{"type": "object", "x-editor-hint": "a"}, {"required": ["a"], "x-editor-hint": "b"}]},
    # negated dependencies: a trigger present without a name it requires, or failing its schema
    {"not": {"dependentRequired": {"a": ["b"]}}},
    {"type": "object", "oneOf": [{"dependentRequired": {"a": ["b"], "b": ["a"]}}, {"required": ["b"]}]},
    {"if": {"dependentSchemas": {"k": {"required": ["v"]}}}, "then": {"minProperties": 2}, "else": {"maxProperties": 1},
     "properties": {"k": {}, "v": {}}},
    # one anyOf / oneOf reached ten times through allOf: A and A = A (not 2**10 branches)
    {"$defs": {"A": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}},
     "allOf": [{"$ref": "#/$defs/A"}] * 10},
    {"$defs": {"B": {"oneOf": [{"type": "integer"}, {"minimum": 2}]}}, "allOf": [{"$ref": "#/$defs/B"}] * 10},
]
CANDIDATES = [None, True, 1, 2, 3, 6, -3, 2.5, "x", "ab", "abc", "ba", [], ["a"], ["a", "b"], [1, "a", "b"],
              ["a", 1, "b", "c"], ["a", "b", "c", "d"], [1, 7], [1, 2], {}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2},
              {"k": "n", "v": 1}, {"k": "n", "v": "s"}, {"k": "m", "v": "s"}, {"k": "m", "v": 1}, {"v": 1}]


@pytest.mark.filterwarnings("ignore::gramgen.errors.UnknownKeywordWarning")  # the x-editor-hint case
@pytest.mark.parametrize("index", range(len(DIFFERENTIAL)))
def test_negation_based_keywords_agree_with_jsonschema(index):
    """not / if-then-else / overlapping oneOf / contains: accepted iff jsonschema says valid
    (every candidate is written in our canonical serialization)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = DIFFERENTIAL[index]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    for value in CANDIDATES:
        assert accepts(cg, compact(value)) == validator.is_valid(value), (schema, value)


FORMAT_NEGATIONS = [
    {"oneOf": [{"format": "uuid"}, {"pattern": "^\\$[A-Z0-9-_]+"}, {"format": "date"}]},
    {"type": "string", "not": {"format": "ipv4"}},
    {"type": "string", "oneOf": [{"maxLength": 0}, {"format": "x-unknown-format", "minLength": 1}]},
    {"not": {"anyOf": [{"format": "ipv6"}, {"format": "date"}]}},
]
FORMAT_CANDIDATES = ["", "$ABC", "$abc", "123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-42661417400F",
                     "123e4567-e89b-12d3-a456-42661417400", "2020-01-01", "2020-02-30", "2024-02-29", "1.2.3.4",
                     "01.2.3.4", "256.1.1.1", "::1", "1::2::3", "P1D", "PT", "P1W", "x", 5, None, ["::1"]]


@pytest.mark.parametrize("index", range(len(FORMAT_NEGATIONS)))
def test_negated_formats_agree_with_jsonschema(index):
    """``not`` / ``oneOf`` over formats: a format whose grammar is the whole format negates
    to its complement; an unknown format (taken as an annotation under lenient_formats)
    never fails, so its negation is false. Checked with jsonschema's format checker
    (formats asserted, as gramgen does)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = FORMAT_NEGATIONS[index]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, lenient_formats=True, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for value in FORMAT_CANDIDATES:
        assert accepts(cg, compact(value)) == validator.is_valid(value), (schema, value)


def test_formats_with_a_partial_grammar_are_not_negated():
    with pytest.raises(gramgen.SchemaError, match="email"):
        gramgen.Grammar.from_json_schema({"not": {"format": "email"}}, whitespace="compact")


def test_oneof_negates_only_branches_that_may_overlap():
    """Branch A allows only the name ``a`` and B requires ``b``: they share no object, so
    A (whose ``prefixItems`` cannot be negated) is never negated; B and C overlap on
    integers and are made exclusive. Differential against jsonschema."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"oneOf": [
        {"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{"const": 1}]}},
         "required": ["a"], "additionalProperties": False},
        {"required": ["b"], "properties": {"b": {"type": "integer"}}},
        {"type": "integer", "minimum": 2}]}
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    for value in [1, 2, 5, "x", None, {}, {"a": [1]}, {"a": [2]}, {"a": [1, 5]}, {"b": 1, "a": [1]}, {"b": 1},
                  {"b": "x"}, {"b": 1, "c": 2}, {"c": 1}, {"a": 1}, [1]]:
        assert accepts(cg, compact(value)) == validator.is_valid(value), value


CONTAINS_NEGATIONS = [
    {"not": {"contains": {"type": "string"}}},
    {"oneOf": [{"contains": {"type": "string"}}, {"contains": {"minimum": 2}}]},
    {"not": {"not": {"contains": {"type": "string"}}}},
    {"not": {"items": {"not": {"contains": {"const": 1}}}}},
    {"type": "array", "prefixItems": [{"type": "integer"}], "not": {"contains": {"type": "integer"}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}],
     "additionalItems": {"type": "string"}, "not": {"contains": {"const": "a"}}},
    {"if": {"contains": {"type": "string"}}, "then": {"maxItems": 1}, "else": {"minItems": 2}},
]
ARRAY_CANDIDATES = [[], [1], ["a"], [1, "a"], ["a", "b"], [1, 2], [3], [1, "a", 3], [[1]], [[2, 1]], [{"a": 1}],
                    {"a": 1}, 5, "x", None]


@pytest.mark.parametrize("index", range(len(CONTAINS_NEGATIONS)))
def test_negated_contains_agrees_with_jsonschema(index):
    """``not contains C`` = every item fails C (also past ``prefixItems`` / tuple
    ``items``); the negation of a negated ``items`` ("some item fails it") likewise."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = CONTAINS_NEGATIONS[index]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.validators.validator_for(schema)(schema)
    for value in ARRAY_CANDIDATES:
        assert accepts(cg, compact(value)) == validator.is_valid(value), (schema, value)


@pytest.mark.parametrize("schema", [
    {"not": {"items": {"type": "integer"}}, "enum": [[1], ["a"]]},
    {"not": {"propertyNames": {"maxLength": 1}}, "enum": [{"a": 1}, {"bb": 1}]},
    {"not": {"additionalProperties": {"type": "integer"}}, "enum": [{"a": 1}, {"bb": "x"}]},
    {"not": {"patternProperties": {"^b": {"type": "integer"}}}, "enum": [{"a": 1}, {"bb": "x"}, {"bb": 1}]},
    {"not": {"contains": {"type": "string"}}, "enum": [[1], ["a"], [2, "b"]]},
])
def test_enum_values_meet_negated_array_and_object_keywords(schema):
    """An enum next to a negated ``items`` / ``propertyNames`` / ``additionalProperties``
    keeps only the values that meet the negation (the internal "some item / some
    property" keywords were passed to jsonschema, which ignored them: ``[1]`` and
    ``{"a": 1}`` were accepted)."""
    jsonschema = pytest.importorskip("jsonschema")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    for value in schema["enum"]:
        assert accepts(cg, compact(value)) == validator.is_valid(value), value


def test_subset_formats_hold_only_valid_values():
    """``regex``, ``uri-template``, ``iri``, ``idn-*`` compile to subsets: every string a
    random walk of the ``regex`` automaton reaches compiles in Python's ``re``; a few
    templates."""
    from gramgen.grammar.json_schema import strings

    dfa = cpdfa.from_regex(strings.format_regex("regex"))
    rng = random.Random(5)
    seen = 0
    for _ in range(4000):
        q, out = 0, []
        for _ in range(rng.randint(0, 12)):
            if not dfa.edges[q]:
                break
            lo, hi, q = rng.choice(dfa.edges[q])
            out.append(chr(rng.randint(lo, min(hi, lo + 500))))
        if dfa.accepting[q]:
            re.compile("".join(out))
            seen += 1
    assert seen > 1000
    for bad in ["(a", "a**", "[z-a]", "a{2,1}", "\\"]:
        assert not dfa.matches(bad), bad
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"format": "uri-template"}, whitespace="compact"), BYTE_VOCAB)
    for text, ok in [("http://example.com/{user}/x{?q,lang}", True), ("{+path:6}", True), ("{a", False),
                     ("a b", False), ("{var*}", True)]:
        assert accepts(cg, compact(text)) == ok, text
    for fmt in ("iri", "iri-reference", "idn-email", "idn-hostname"):
        gramgen.Grammar.from_json_schema({"type": "string", "format": fmt}, whitespace="compact")


@pytest.mark.parametrize("schema, pointer", [
    ({"properties": {"a": {"type": "string", "format": "html-selector"}}}, "/properties/a/format"),
    ({"items": {"not": {"format": "int32"}}}, "/items/not/format"),
    ({"oneOf": [{"type": "integer"}, {"format": "x-unknown"}]}, "/oneOf/1/format"),
])
def test_unknown_formats_raise_unless_lenient(schema, pointer):
    """A ``format`` gramgen has no grammar for is a SchemaError naming it and its pointer
    (also under ``not`` / ``oneOf``); with ``lenient_formats=True`` (or ``lenient``) it is
    an annotation, any string, listed in the grammar's meta."""
    with pytest.raises(gramgen.SchemaError) as info:
        gramgen.Grammar.from_json_schema(schema, whitespace="compact")
    assert "format" in str(info.value) and pointer in str(info.value) and "lenient_formats" in str(info.value)
    for options in ({"lenient_formats": True}, {"lenient": True}):
        g = gramgen.Grammar.from_json_schema(schema, **options)
        assert pointer in [m.split(":")[0] for m in g.ir.meta["unknown_formats"]]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(
        {"type": "string", "format": "html-selector", "maxLength": 3}, lenient_formats=True, whitespace="compact"), BYTE_VOCAB)
    assert accepts(cg, compact("a b")) and not accepts(cg, compact("abcd"))


def test_required_name_meets_every_parts_additional_properties():
    """A required name that no allOf part declares is checked by each part: its matching
    patterns, or else that part's additionalProperties (the random generation found
    ``{"abcd": []}`` accepted: part 1's ``minItems`` was dropped once another part's
    pattern matched ``abcd``)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object", "required": ["abcd"], "allOf": [
        {"additionalProperties": {"type": "array", "minItems": 2}},
        {"patternProperties": {"a": {"type": "array", "items": {"multipleOf": 2.5}}}, "additionalProperties": False},
        {"patternProperties": {"b": {"type": "array", "items": {"multipleOf": 4}}}, "additionalProperties": False}]}
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    for value in [{"abcd": []}, {"abcd": [20]}, {"abcd": [20, 40]}, {"abcd": [20, 5]}, {}, {"abcd": [20, 40], "x": [1, 2]},
                  {"abcd": [20, 40], "ab": [20, 40]}, {"abcd": [20, 40], "ab": [20]}]:
        assert accepts(cg, compact(value)) == validator.is_valid(value), value


PATTERN_SCHEMAS = [
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 2}},
     "additionalProperties": {"type": "string"}},
    {"allOf": [{"patternProperties": {"^a": {"type": "integer"}}},
               {"patternProperties": {"b": {"minimum": 3}}, "additionalProperties": {"type": "string"}}]},
    {"allOf": [{"properties": {"ab": {"maximum": 5}}, "patternProperties": {"^a": {"type": "integer"}},
                "additionalProperties": False},
               {"patternProperties": {"b$": {"minimum": 2}}}]},
    {"allOf": [{"allOf": [{"patternProperties": {"^a": {"type": "integer"}}},
                          {"patternProperties": {"b": {"minimum": 1}}}]},
               {"patternProperties": {"^ab": {"maximum": 4}}, "additionalProperties": {"type": "integer"}}]},
]


@pytest.mark.parametrize("index", range(len(PATTERN_SCHEMAS)))
def test_overlapping_pattern_properties_agree_with_jsonschema(index):
    """Names matched by several patterns (one schema, or several allOf parts) must satisfy
    all of them, and each part's additionalProperties covers what that part does not match."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = PATTERN_SCHEMAS[index]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(index)
    keys, values = ["ab", "a", "b", "ba", "x", "abb"], [1, 3, 7, "s", 2.5]
    verdicts = set()
    for _ in range(300):
        chosen = [k for k in keys if rng.random() < 0.35]  # "ab" (declared in one schema) first
        value = {k: rng.choice(values) for k in chosen}
        ok = validator.is_valid(value)
        verdicts.add(ok)
        assert accepts(cg, compact(value)) == ok, (schema, value)
    assert verdicts == {True, False}


NEGATED_OBJECT_SCHEMAS = [
    {"type": "object", "not": {"propertyNames": {"maxLength": 1}}},
    {"type": "object", "properties": {"ab": {}}, "not": {"additionalProperties": {"type": "integer"}}},
    {"type": "object", "not": {"patternProperties": {"^a": {"type": "integer"}}}},
    {"type": "object", "properties": {"ab": {"type": "string"}}, "not": {"propertyNames": {"pattern": "^a"}},
     "maxProperties": 2},
    {"if": {"propertyNames": {"maxLength": 1}}, "then": {"minProperties": 2}, "else": {"required": ["x"]}},
    {"oneOf": [{"propertyNames": {"pattern": "^a"}}, {"additionalProperties": {"type": "string"}}], "type": "object"},
    {"not": {"additionalProperties": False, "properties": {"a": {}}, "patternProperties": {"b": {}}}},
    {"allOf": [{"not": {"propertyNames": {"maxLength": 1}}}, {"not": {"patternProperties": {"^a": {"type": "integer"}}}}],
     "type": "object"},
    {"allOf": [{"not": {"propertyNames": {"pattern": "^a"}}}, {"not": {"propertyNames": {"pattern": "b$"}}}],
     "properties": {"ab": {}}, "type": "object"},
    {"not": {"anyOf": [{"additionalProperties": {"type": "string"}}, {"propertyNames": {"maxLength": 1}}]},
     "type": "object"},
]


@pytest.mark.parametrize("index", range(len(NEGATED_OBJECT_SCHEMAS)))
def test_negated_object_keywords_agree_with_jsonschema(index):
    """not / if / oneOf over propertyNames, additionalProperties and patternProperties: some
    property's name (and value) must escape them, in a declared property or an extra one;
    property_order="any" so that no instance is rejected for its key order."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = NEGATED_OBJECT_SCHEMAS[index]
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, property_order="any", whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(index)
    verdicts = set()
    for _ in range(300):
        value = {k: rng.choice([1, "s", 2.5]) for k in ["ab", "a", "b", "ba", "x"] if rng.random() < 0.4}
        ok = validator.is_valid(value)
        verdicts.add(ok)
        assert accepts(cg, compact(value)) == ok, (schema, value)
    assert verdicts == {True, False}


def test_allof_of_anyof_lists_drops_pairs_whose_types_cannot_meet():
    """oneOf of six overlapping array branches: exclusivity merges five negations, each an
    anyOf over types; pairs with disjoint types match nothing and are dropped before the
    branch limit applies (3^5 raw combinations, a few dozen that can match)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"oneOf": [{"type": "array", "maxItems": 3, "items": {"enum": [f"a{i}", f"b{i}", "c"]}}
                        for i in range(6)]}
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(3)
    pool = [f"{p}{i}" for p in "ab" for i in range(6)] + ["c", "d"]
    verdicts = set()
    for _ in range(200):
        value = [rng.choice(pool) for _ in range(rng.randint(0, 4))]
        ok = validator.is_valid(value)
        verdicts.add(ok)
        assert accepts(cg, compact(value)) == ok, value
    for value in (None, 1, "a0", {}):
        assert not accepts(cg, compact(value))
    assert verdicts == {True, False}


@pytest.mark.parametrize("draft", [4, 7, 2020])
def test_negated_items_in_every_draft(draft):
    """oneOf exclusivity negates `items` into "some item fails it": enforced in every draft,
    although `contains` is not a keyword before draft 6 (a draft-04 schema of
    JSONSchemaBench let `{"_elements": []}` match both branches)."""
    jsonschema = pytest.importorskip("jsonschema")
    attrs = [{"type": "object", "required": ["p"], "properties": {"p": {"enum": [v]}}} for v in ("r", "d")]
    items = {"type": "array", "items": {"type": "integer"}}
    schema = {"type": "object", "oneOf": [{"properties": {"a": a, "e": items}} for a in attrs]}
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, draft=draft, whitespace="compact"), BYTE_VOCAB)
    validator = {4: jsonschema.Draft4Validator, 7: jsonschema.Draft7Validator,
                 2020: jsonschema.Draft202012Validator}[draft](schema)
    verdicts = set()
    for value in ({}, {"e": []}, {"e": [1]}, {"e": ["x"]}, {"a": {"p": "r"}}, {"a": {"p": "d"}, "e": ["x"]},
                  {"a": {"p": "r"}, "e": [1, "x"]}, {"a": {"p": "x"}}, {"a": {"p": "d"}, "e": [2]}):
        ok = validator.is_valid(value)
        verdicts.add(ok)
        assert accepts(cg, compact(value)) == ok, value
    assert verdicts == {True, False}


def test_remote_refs_only_from_the_mapping():
    schema = {"$ref": "http://example.com/item.json"}
    with pytest.raises(gramgen.SchemaError, match="never fetched"):
        gramgen.Grammar.from_json_schema(schema, whitespace="compact")
    g = gramgen.Grammar.from_json_schema(schema, refs={"http://example.com/item.json": {"type": "integer"}}, whitespace="compact")
    cg = gramgen.compile(g, BYTE_VOCAB)
    assert accepts(cg, b"12") and not accepts(cg, b'"x"')


def test_malformed_schema_is_a_schema_error():
    for bad in ["{not json", "[1, 2]", {"type": "strin"}, {"minLength": -1}]:
        with pytest.raises(gramgen.SchemaError):
            gramgen.Grammar.from_json_schema(bad, whitespace="compact")


def test_pydantic_model_and_json_text_inputs():
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    cg = gramgen.compile(gramgen.Grammar.from_json_schema(Person, whitespace="compact"), BYTE_VOCAB)
    assert accepts(cg, b'{"name":"Ada","age":36}') and not accepts(cg, b'{"age":36,"name":"Ada"}')
    any_order = gramgen.compile(gramgen.Grammar.from_json_schema(Person, property_order="any", whitespace="compact"), BYTE_VOCAB)
    assert accepts(any_order, b'{"age":36,"name":"Ada"}') and not accepts(any_order, b'{"age":36}')
    text = gramgen.Grammar.from_json_schema(json.dumps(Person.model_json_schema()), whitespace="compact")
    assert accepts(gramgen.compile(text, BYTE_VOCAB), b'{"name":"","age":-1}')


# ------------------------------------------------------------------ strict


STRICT_CASES = [
    # (schema, accepted under strict=True, refused under strict=True but valid JSON Schema)
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, ['{"a":1}', "{}"], ['{"a":1,"z":2}', '{"z":2}']),
    # parts merged by allOf / anyOf / $ref: names declared by any part
    ({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}, ['{"a":1,"b":2}'], ['{"a":1,"b":2,"z":3}']),
    ({"properties": {"k": {"type": "string"}}, "anyOf": [{"properties": {"x": {"type": "integer"}}}]},
     ['{"k":"a","x":1}'], ['{"k":"a","x":1,"z":2}']),
    ({"$defs": {"P": {"type": "object", "properties": {"a": {}}}}, "properties": {"p": {"$ref": "#/$defs/P"}}},
     ['{"p":{"a":1}}'], ['{"p":{"a":1,"z":2}}', '{"p":{},"z":1}']),
    ({"type": "object", "properties": {"a": {}}, "dependentRequired": {"a": ["b"]}},
     ['{"a":1,"b":2}', "{}"], ['{"a":1,"b":2,"z":3}', '{"a":1}']),
    # names listed in required are declared; patternProperties keep their names
    ({"type": "object", "required": ["name"]}, ['{"name":[1]}'], ['{"name":1,"z":2}']),
    ({"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {"type": "integer"}}},
     ['{"a":1,"x1":2}'], ['{"a":1,"y":2}', '{"x1":"s"}']),
    # explicit additionalProperties / unevaluatedProperties keep their meaning
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": True}, ['{"a":1,"z":2}'], []),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
     ['{"a":1,"z":2}'], ['{"z":"s"}']),
    ({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": {"type": "integer"}},
     ['{"a":1,"z":2}'], ['{"z":"s"}']),
    ({"allOf": [{"properties": {"a": {}}, "additionalProperties": True}, {"properties": {"b": {}}}]},
     ['{"a":1,"b":2,"z":3}'], []),
    # a schema without assertions is any value
    ({"type": "object", "properties": {"a": {"description": "anything"}}}, ['{"a":{"q":[1]}}'], []),
]


@pytest.mark.parametrize("index", range(len(STRICT_CASES)))
def test_strict_refuses_only_undeclared_names(index):
    schema, good, bad = STRICT_CASES[index]
    strict = gramgen.compile(gramgen.Grammar.from_json_schema(schema, strict=True, whitespace="compact"), BYTE_VOCAB)
    standard = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="compact"), BYTE_VOCAB)
    validator = jsonschema.Draft202012Validator(schema)
    for text in good:
        assert validator.is_valid(json.loads(text)) and accepts(strict, text.encode()), text
    for text in bad:
        assert not accepts(strict, text.encode()), text
        assert validator.is_valid(json.loads(text)) == accepts(standard, text.encode()), text


def test_strict_pydantic_models_get_no_extra_keys():
    pydantic = pytest.importorskip("pydantic")

    class Author(pydantic.BaseModel):
        name: str

    class Book(pydantic.BaseModel):
        title: str
        author: Author
        year: int

    class Open(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        title: str

    book = gramgen.compile(gramgen.Grammar.from_json_schema(Book, strict=True, whitespace="compact"), BYTE_VOCAB)
    assert accepts(book, b'{"title":"Dune","author":{"name":"Frank Herbert"},"year":1965}')
    assert not accepts(book, b'{"title":"Dune","author":{"name":"Frank Herbert"},"year":1965,"cover":""}')
    assert not accepts(book, b'{"title":"Dune","author":{"name":"Frank Herbert","born":1920},"year":1965}')
    assert accepts(gramgen.compile(gramgen.Grammar.from_json_schema(Book, whitespace="compact"), BYTE_VOCAB),
                   b'{"title":"Dune","author":{"name":"F"},"year":1965,"cover":""}')
    open_ = gramgen.compile(gramgen.Grammar.from_json_schema(Open, strict=True, whitespace="compact"), BYTE_VOCAB)
    assert accepts(open_, b'{"title":"Dune","cover":""}')


def test_flexible_whitespace_is_bounded():
    g = gramgen.Grammar.from_json_schema({"type": "array"}, whitespace="flexible", max_whitespace=4)
    cg = gramgen.compile(g, BYTE_VOCAB)
    assert accepts(cg, b"[ 1 ,\n  2 ]") and not accepts(cg, b"[     1]")


# ------------------------------------------------------------------ JSONSchemaBench

BENCH = SHARED / "data" / "jsonschemabench"


def _bench_sample(per_category: int, max_chars: int):
    out = []
    for folder in sorted(p for p in BENCH.iterdir() if p.is_dir()):
        lines = [x for x in (folder / "dev.jsonl").read_text(encoding="utf-8").split("\n") if x.strip()]
        random.Random(7).shuffle(lines)
        taken = 0
        for line in lines:
            rec = json.loads(line)
            if len(json.dumps(rec["schema"])) <= max_chars and rec["tests"]:
                out.append(rec)
                taken += 1
                if taken == per_category:
                    break
    return out


@pytest.mark.filterwarnings("ignore::gramgen.errors.UnknownKeywordWarning")  # real-world schemas carry vendor keywords
@pytest.mark.skipif(not BENCH.exists(), reason="needs ../shared/data/jsonschemabench")
@pytest.mark.parametrize("tokenizer", ["smollm2", "llama2"])
def test_jsonschemabench_instances_with_real_tokenizers(tokenizer):
    """Every invalid instance is rejected; every valid one in our serialization (keys in
    schema order, compact, raw characters) is accepted, token by token with check()."""
    vocab, tok = vocabulary(tokenizer), hf_tokenizer(tokenizer)
    compiled = unsupported = walked = 0
    problems = []
    for rec in _bench_sample(2, 2500):
        try:
            cg = gramgen.compile(gramgen.Grammar.from_json_schema(rec["schema"], whitespace="compact"), vocab)
        except (gramgen.SchemaError, gramgen.CompileLimitError):
            unsupported += 1
            continue
        compiled += 1
        resolver = Resolver(rec["schema"], 2020, None)
        for case in rec["tests"]:
            data = order_like_schema(case["data"], resolver.root, resolver.resolve)
            ids = tokenize(compact(data), tok, vocab)  # the tokenizer's own ids when they spell it
            m = cg.matcher()
            ok = True
            for t in ids:
                if not m.check(t):
                    ok = False
                    break
                m.advance(t)
            ok = ok and m.check(vocab.eos_token_ids[0])
            walked += 1
            if ok != case["valid"] and (ok or not _policy(case["data"])):
                problems.append((rec["id"], case["valid"], compact(data)[:200]))
    assert compiled >= 25 and walked >= 40, (compiled, unsupported, walked)
    assert not problems


def _policy(data) -> bool:
    """Valid data our documented serialization does not produce (1.0 for an integer)."""
    return "." in json.dumps(data) and any(isinstance(x, float) and x.is_integer()
                                           for x in json.loads(json.dumps(data), parse_float=float)
                                           .values()) if isinstance(data, dict) else False


# ------------------------------------------------------------------ generative soundness

_FAVOURED = set(b'"{}[],:0123456789.-tfnrulase')


def _random_word(cg: gramgen.CompiledGrammar, rng: random.Random, cap: int = 400) -> bytes | None:
    """A random walk over allowed bytes (structural bytes favoured so values close soon);
    None when it runs past ``cap`` bytes."""
    import numpy as np
    m = cg.matcher()
    out = bytearray()
    while len(out) < cap:
        mask = m.mask()
        if mask[256] and (rng.random() < 0.35 or not mask[:256].any()):
            return bytes(out)
        allowed = np.flatnonzero(mask[:256])
        weights = [20.0 if b in _FAVOURED else 1.0 for b in allowed]
        b = int(rng.choices(allowed, weights)[0])
        m.advance(b)
        out.append(b)
    return None


@pytest.mark.filterwarnings("ignore::gramgen.errors.UnknownKeywordWarning")  # real-world schemas carry vendor keywords
@pytest.mark.skipif(not BENCH.exists(), reason="needs ../shared/data/jsonschemabench")
def test_random_words_of_compiled_schemas_validate():
    """Design note test 3: words sampled from the grammar must validate with jsonschema
    (formats checked); any failure is an under-constraint. Zero tolerated."""
    jsonschema = pytest.importorskip("jsonschema")
    rng = random.Random(11)
    checked = 0
    failures = []
    for rec in _bench_sample(2, 1500):
        if "multipleOf" in json.dumps(rec["schema"]):
            continue  # jsonschema's float arithmetic disagrees with exact decimals
        try:
            cg = gramgen.compile(gramgen.Grammar.from_json_schema(rec["schema"], whitespace="compact"), BYTE_VOCAB)
        except (gramgen.SchemaError, gramgen.CompileLimitError):
            continue
        validator = jsonschema.Draft202012Validator(rec["schema"],
                                                    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        for _ in range(8):
            word = _random_word(cg, rng)
            if word is None:
                continue
            value = json.loads(word)
            checked += 1
            if not validator.is_valid(value):
                failures.append((rec["id"], word[:200]))
    assert checked >= 60
    assert not failures


# ------------------------------------------------------------------ pathological schemas


def _nested(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


PATHOLOGICAL = {
    "huge enum": {"enum": [f"value-{i}" for i in range(20_000)]},
    "deep nesting": _nested(300),
    "deep $ref chain": {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(500)} | {"d500": {"type": "null"}},
                        "$ref": "#/$defs/d0"},
    "exponential oneOf": {"oneOf": [{"anyOf": [{"minimum": i}, {"maxLength": i}]} for i in range(8)]},
    "giant numeric range": {"type": "number", "minimum": -1e300, "maximum": 1e300, "multipleOf": 1e-12},
    "huge counts": {"type": "array", "minItems": 10**9},
    "many properties": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}},
    "dependency explosion": {"dependentRequired": {f"a{i}": [f"b{i}"] for i in range(40)}},
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_schemas_are_bounded(name):
    """Each either compiles or raises a gramgen error, within a bounded time (a hang or a
    crash deep inside is the failure)."""
    import signal
    import time

    def timeout(*_):
        raise TimeoutError(name)

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    t0 = time.perf_counter()
    try:
        try:
            gramgen.compile(gramgen.Grammar.from_json_schema(PATHOLOGICAL[name], whitespace="compact"), BYTE_VOCAB)
        except (gramgen.SchemaError, gramgen.CompileLimitError) as exc:
            assert str(exc)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert time.perf_counter() - t0 < 60


def test_compile_limit_names_the_subschema():
    """A budget exceeded deep inside a schema names the innermost subschema (JSON pointer)."""
    schema = {"type": "object", "properties": {
        "ok": {"type": "string"},
        "big": {"type": "array", "items": {"type": "string", "format": "email", "maxLength": 255}}}}
    with pytest.raises(gramgen.CompileLimitError) as info:
        gramgen.Grammar.from_json_schema(schema, whitespace="compact")
    assert info.value.pointer == "/properties/big/items"
    assert str(info.value).startswith("/properties/big/items: ")


def test_codepoint_automata_of_equal_regexes_are_shared(monkeypatch):
    """``cpdfa.from_regex`` reuses the automaton of an equal regex (the same format under
    many properties), within a budget of states; ``clear_cache`` forgets them; an
    unhashable regex is built every time; results equal a fresh construction."""
    from gramgen._lru import SizedLRU
    from gramgen.grammar.ir import CharRanges, Repeat
    from gramgen.grammar.json_schema import strings

    cache = SizedLRU(cpdfa.CACHE_STATES, lambda d: d.n_states)
    monkeypatch.setattr(cpdfa, "_cache", cache)
    rx = strings.format_regex("date-time")
    first = cpdfa.from_regex(rx)
    assert cpdfa.from_regex(strings.format_regex("date-time")) is first
    fresh = cpdfa._from_regex(rx, cpdfa.DEFAULT_MAX_STATES)
    # (the cached one as tuples: the collector stops tracking them)
    assert list(map(list, first.edges)) == fresh.edges and list(first.accepting) == fresh.accepting
    cache.budget = 8 * first.n_states
    for n in range(2, 30):
        cpdfa.from_regex(Repeat(CharRanges(((97, 122),)), 0, n))
        assert cache.total <= cache.budget
        assert cache.total == sum(d.n_states for d in cache.values())
    kept = cpdfa.from_regex(rx)
    cpdfa.clear_cache()
    assert not len(cache) and cache.total == 0 and cpdfa.from_regex(rx) is not kept
    listy = CharRanges([[97, 98]])  # lists: unhashable
    assert cpdfa.from_regex(listy).matches("a") and cpdfa.from_regex(listy) is not cpdfa.from_regex(listy)


def test_any_name_but_many_declared_ones_is_one_lexeme():
    """The key of an undeclared property (any name but the declared ones) is one lexeme
    even next to 120 long declared names: its DFA is the size of the names' trie, and so is
    the automaton while it is built (the non-ASCII characters and escapes that every trie
    node sends to the same state share their spelling states). Built with a state per
    node's spellings it passed the DFA size limit and was split into rules, which made
    every mask inside a key step the parser per character (20-75 ms at 128k tokens).
    Masks agree with brute force inside and after keys."""
    from gramgen.grammar import split
    from reference import ReferenceGrammar, brute_force_mask

    names = [f"option_{i:03d}_" + "abcdefghij"[i % 10] * 12 for i in range(120)]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}}
    grammar = gramgen.Grammar.from_json_schema(schema, whitespace="flexible")
    vocab = vocabulary("gpt2")
    cg = gramgen.compile(grammar, vocab)
    assert not cg.ir.meta.get(split.SPLIT_TOPS)
    from gramgen.testing import accepts as accepted

    assert accepted(grammar, '{"option_007_hhhhhhhhhhhh":1,"option_007_hhhh":2,"zz":3}')
    assert not accepted(grammar, '{"option_007_hhhhhhhhhhhh":"x"}')   # declared: an integer
    assert not accepted(grammar, '{"option_007_hhhhhhhhhhhh":1,"option_007_hhhhhhhhhhhh":1}')
    assert not accepted(grammar, '{"option_008_iiiiiiiiiiii":1,"option_007_hhhhhhhhhhhh":1}')  # order
    ref = ReferenceGrammar(grammar.ir)
    # (inside undeclared keys after non-ASCII characters and escapes: the spellings that
    # go through the shared states)
    for text in ['{"option_007_hhhh', '{"option_007_hhhhhhhhhhhh":1,"', '{"zz":{"a":"é"},"option_1',
                 '{"option_0é', '{"option_00\\n', '{"日本']:
        m = cg.matcher()
        m.advance_text(text)
        chart = ref.initial()
        for b in text.encode():
            chart = ref.feed(chart, b)
        got = set(np.flatnonzero(m.mask()).tolist())
        assert got == brute_force_mask(ref, chart, vocab), text
