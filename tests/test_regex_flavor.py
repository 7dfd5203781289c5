"""``Grammar.from_regex(..., flavor="ecma")``: ECMA-262 syntax and meaning (u flag), full match.

The expected tables are written by hand from ECMA-262 (CharacterClassEscape, WhiteSpace and
LineTerminator, Canonicalize with the u flag, Assertion), not from Python's ``re``: where
the two differ the table says so. Each row: pattern, flags, strings the whole pattern
matches, strings it does not.
"""

from __future__ import annotations

import re

import pytest

import gramgen
from gramgen.automata.dfa import compile_regex
from gramgen.errors import ConfigurationError, GrammarError
from gramgen.grammar.json_schema import strings

ECMA_WHITESPACE = "\t\x0b\x0c \u00a0\u1680\u2000\u2005\u200a\u202f\u205f\u3000\ufeff\n\r\u2028\u2029"

TABLE = [
    # . excludes exactly the four line terminators (Python's excludes only \n)
    (".", "", ["a", "\u0085", "\u00a0", "\U0001F600", "\x00"], ["\n", "\r", "\u2028", "\u2029", "", "ab"]),
    (".", "s", ["\n", "\r", "\u2028", "a"], [""]),
    # \d \w are ASCII (Python's are Unicode)
    (r"\d", "", list("0123456789"), ["\u0663", "\uff10", "a"]),
    (r"\w", "", ["a", "Z", "_", "0"], ["\u00e9", "\u017f", "\u212a", "-", "\u00b5"]),
    (r"\W", "", ["-", "\u00e9", "\u017f", "\u212a"], ["a", "_"]),
    # with i, \w also holds the two characters whose simple case folding is in a-z
    (r"\w", "i", ["a", "\u017f", "\u212a"], ["\u00e9"]),
    (r"\W", "i", ["-", "\u00e9"], ["s", "S", "\u017f", "k", "\u212a"]),
    (r"[^\W]", "i", ["s", "\u017f", "\u212a"], ["\u00e9", "-"]),
    # \s: WhiteSpace and LineTerminator; U+FEFF yes, U+0085 / U+180E / U+200B / \x1c no (Python differs)
    (r"\s", "", list(ECMA_WHITESPACE), ["\u0085", "\u180e", "\u200b", "\x1c", "\x1f", "x"]),
    (r"\S", "", ["\u0085", "\x1c", "x"], list(ECMA_WHITESPACE)),
    (r"[^\d\s]", "", ["a", "\u0085"], ["1", " ", "\ufeff"]),
    # $ is the end only (Python's $ also matches before a final newline); ^ the start only
    ("a$", "", ["a"], ["a\n", ""]),
    ("^a$", "m", ["a"], ["a\n", "\na"]),
    ("^a|b$", "", ["a", "b"], ["ab", ""]),
    ("(^a|b)c", "", ["ac", "bc"], ["c", "abc"]),
    ("(a$)?", "", ["", "a"], ["b"]),
    ("a^b", "", [], ["ab", "a", "b", ""]),
    ("$^", "", [""], ["a"]),
    # [] matches nothing, [^] any character
    ("[]", "", [], ["", "a", "]"]),
    ("a[]?", "", ["a"], [""]),
    ("[^]", "", ["a", "\n", "\u2028", "\U0001F600"], ["", "ab"]),
    # escapes
    (r"\u{20BB7}", "", ["\U00020BB7"], ["\u20bb", "\u20bb7"]),
    (r"\uD842\uDFB7", "", ["\U00020BB7"], ["\ud842"]),
    (r"[\uD83D\uDE00-\uD83D\uDE4F]", "", ["\U0001F600", "\U0001F64F"], ["\U0001F650", "a"]),
    (r"\cJ\cj", "", ["\n\n"], ["cJcj"]),
    (r"[\cM]", "", ["\r"], ["c", "M"]),
    (r"\0", "", ["\x00"], ["0"]),
    (r"[\b]", "", ["\x08"], ["b"]),
    (r"\x41\u00e9", "", ["A\u00e9"], []),
    (r"\/\.\$\^\[\]\{\}\(\)\|\*\+\?\\", "", ["/.$^[]{}()|*+?\\"], []),
    (r"[\-\]a-]", "", ["-", "]", "a"], ["b"]),
    ("[a-b-c]", "", ["a", "b", "-", "c"], ["d"]),
    (r"\f\n\r\t\v", "", ["\x0c\n\r\t\x0b"], []),
    # groups and quantifiers; names are only names
    (r"(?<year>\d{4})-(?<month>\d\d)", "", ["2024-01"], ["2024-1", "24-01"]),
    (r"(?<$x_1>a)", "", ["a"], []),
    ("a{2,3}", "", ["aa", "aaa"], ["a", "aaaa"]),
    ("a{2,}?b", "", ["aab", "aaaab"], ["ab"]),
    ("(ab|a)(bc|c)", "", ["abc", "abbc", "ac"], ["ab"]),
    ("a|", "", ["a", ""], ["b"]),
    ("(?:)", "", [""], ["a"]),
    # i: Unicode simple case folding (CaseFolding.txt C + S), negation after folding
    ("k", "i", ["k", "K", "\u212a"], ["x"]),
    ("s", "i", ["s", "S", "\u017f"], []),
    ("\u00df", "i", ["\u00df", "\u1e9e"], ["ss", "SS"]),
    ("\u03c3", "i", ["\u03c3", "\u03c2", "\u03a3"], []),
    ("\u01c5", "i", ["\u01c4", "\u01c5", "\u01c6"], []),
    ("\u0130", "i", ["\u0130"], ["i", "I"]),   # only a full (F) / Turkic (T) folding: matches itself
    ("[^k]", "i", ["a", "\u00e9"], ["k", "K", "\u212a"]),
    ("[a-z]+", "i", ["Hello", "\u017f\u212a"], ["h\u00e9"]),
]


def _matcher(pattern: str, flags: str):
    return compile_regex(gramgen.Grammar.from_regex(pattern, flags, flavor="ecma").ir.lexemes["REGEX"])


@pytest.mark.parametrize("pattern, flags, accepted, rejected", TABLE,
                         ids=[f"{p!r}/{f}" for p, f, _, _ in TABLE])
def test_ecma_semantics(pattern, flags, accepted, rejected):
    d = _matcher(pattern, flags)
    for s in accepted:
        assert d.matches(s.encode("utf-8", "surrogatepass")), (pattern, flags, s)
    for s in rejected:
        assert not d.matches(s.encode("utf-8", "surrogatepass")), (pattern, flags, s)


def test_re_flags_mean_the_ecma_letters():
    for letters, value in (("i", re.I), ("m", re.M), ("s", re.S), ("ims", re.I | re.M | re.S)):
        for pattern in ("k.", "^a$", r"\W"):
            a = gramgen.Grammar.from_regex(pattern, letters, flavor="ecma").ir.lexemes["REGEX"]
            b = gramgen.Grammar.from_regex(pattern, value, flavor="ecma").ir.lexemes["REGEX"]
            assert a == b
    for letters in ("dgyu", ""):  # change nothing under full match
        assert (gramgen.Grammar.from_regex("a.", letters, flavor="ecma").ir.lexemes
                == gramgen.Grammar.from_regex("a.", flavor="ecma").ir.lexemes)


def test_python_flavor_is_the_default_and_keeps_python_meaning():
    # \d is Unicode in Python, ASCII in ECMA-262
    py = compile_regex(gramgen.Grammar.from_regex(r"\d").ir.lexemes["REGEX"])
    ecma = _matcher(r"\d", "")
    assert py.matches("\u0663".encode()) and not ecma.matches("\u0663".encode())
    with pytest.raises(GrammarError):
        gramgen.Grammar.from_regex(r"\u{20BB7}")  # not Python syntax


@pytest.mark.parametrize("pattern, line, column, needle", [
    (r"(a)\1", 1, 4, "backreference"),
    (r"(?<a>x)\k<a>", 1, 8, "named backreference"),
    ("a(?=b)", 1, 2, "lookahead"),
    ("a(?!b)", 1, 2, "negative lookahead"),
    ("(?<=a)b", 1, 1, "lookbehind"),
    ("(?<!a)b", 1, 1, "negative lookbehind"),
    (r"a\b", 1, 2, "word boundary"),
    (r"x\B", 1, 2, "non-word-boundary"),
    (r"\p{L}", 1, 1, "property escape"),
    ("ab{", 1, 3, "incomplete quantifier"),
    ("a{,5}", 1, 2, "incomplete quantifier"),
    ("a{3,2}", 1, 2, "out of order"),
    ("}", 1, 1, "lone"),
    ("]", 1, 1, "lone"),
    ("*a", 1, 1, "nothing to repeat"),
    ("a**", 1, 3, "nothing to repeat"),
    ("a*+", 1, 3, "nothing to repeat"),
    ("^*", 1, 2, "nothing to repeat"),
    (r"\a", 1, 1, "invalid escape"),
    (r"\-", 1, 1, "invalid escape"),
    (r"[\d-z]", 1, 2, "cannot bound a range"),
    ("[z-a]", 1, 2, "out of order"),
    (r"\01", 1, 1, "octal"),
    (r"\c1", 1, 1, "ASCII letter"),
    (r"\u{110000}", 1, 1, "10FFFF"),
    (r"a\u{12", 1, 2, "10FFFF"),
    (r"\x4", 1, 1, "two hex digits"),
    (r"\u12", 1, 1, "four hex digits"),
    ("(?i)a", 1, 1, "unknown group syntax"),
    ("(?<a>x)(?<a>y)", 1, 8, "duplicate"),
    ("(?<1a>x)", 1, 1, "group name"),
    ("(ab", 1, 1, "missing ')'"),
    ("ab)", 1, 3, "unmatched ')'"),
    ("[ab", 1, 1, "missing ']'"),
    ("ab\\", 1, 3, "lone backslash"),
    ("ab\n(?=c)", 2, 1, "lookahead"),
])
def test_errors_name_the_construct_and_its_position(pattern, line, column, needle):
    with pytest.raises(GrammarError) as info:
        gramgen.Grammar.from_regex(pattern, flavor="ecma")
    assert (info.value.line, info.value.column) == (line, column)
    assert needle in info.value.message


def test_multiline_anchors_inside_the_pattern_are_an_error():
    with pytest.raises(GrammarError, match="MULTILINE"):
        gramgen.Grammar.from_regex("a^b", "m", flavor="ecma")


@pytest.mark.parametrize("kwargs", [
    {"flavor": "js"}, {"flavor": None}, {"flavor": "ECMA"},
    {"flavor": "ecma", "flags": "v"}, {"flavor": "ecma", "flags": "q"}, {"flavor": "ecma", "flags": re.X},
    {"flavor": "ecma", "flags": 1.5}, {"flavor": "python", "flags": 1.5}, {"flavor": "python", "flags": None},
])
def test_bad_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        gramgen.Grammar.from_regex("a", **kwargs)


@pytest.mark.parametrize("pattern", [None, b"a", 5])
def test_a_pattern_that_is_no_string_is_a_configuration_error(pattern):
    for flavor in ("python", "ecma"):
        with pytest.raises(ConfigurationError):
            gramgen.Grammar.from_regex(pattern, flavor=flavor)


@pytest.mark.parametrize("pattern, inside, outside", [
    ("[]", [], ["", "a"]),
    (r"\u{1F600}", ["x\U0001F600y"], ["x"]),
    (r"\uD83D\uDE00", ["\U0001F600"], ["\ud83d"]),
    ("a{,2}", None, None),        # a syntax error with the u flag, not {0,2}
    (r"\Z", None, None),          # not Python's end anchor
    ("^a$", ["a"], ["a\n"]),
    # lenient syntax of real schemas (Annex B's one meaning), refused by from_regex(flavor="ecma")
    (r"^5\-\:\_$", ["5-:_"], ["5"]),
    ("^/{env}/x}]$", ["/{env}/x}]"], ["/e/x"]),
    ("a{,5}", None, None),
])
def test_json_schema_patterns_use_the_same_translator(pattern, inside, outside):
    """A JSON Schema ``pattern`` is searched (not anchored) with the same ECMA meaning."""
    if inside is None:
        with pytest.raises(strings.PatternError):
            strings.pattern_dfa(pattern)
        with pytest.raises(gramgen.SchemaError):
            gramgen.Grammar.from_json_schema({"type": "string", "pattern": pattern})
        return
    if pattern.startswith(("^5", "^/{")):
        with pytest.raises(GrammarError):
            gramgen.Grammar.from_regex(pattern, flavor="ecma")
    dfa = strings.pattern_dfa(pattern)
    for s in inside:
        assert dfa.matches(s)
    for s in outside:
        assert not dfa.matches(s)
