"""Python regex -> Regex AST -> byte DFA must agree exactly with ``re.fullmatch``."""

from __future__ import annotations

import re
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gramgen.automata.dfa import compile_regex
from gramgen.errors import CompileLimitError, GrammarError
from gramgen.grammar import regex as regex_mod
from gramgen.grammar.ir import EMPTY, NOTHING, CharRanges, Repeat, Seq, char
from gramgen.grammar.regex import parse_regex

JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"

PATTERNS: list[tuple[str, int]] = [
    ("abc", 0), ("a|b|cd", 0), ("(a|b)*c", 0), ("a{2,4}", 0), ("(?:ab){1,3}c?", 0),
    ("a{3}", 0), ("a{2,}", 0), ("a{,2}b", 0), ("a*?b+?c??", 0), ("(a(b(c|d)*)?)+", 0),
    (r"\d+", 0), (r"\w+", 0), (r"\s*", 0), (r"\D\W\S", 0), (r"[^\W\d]\w*", 0),
    (r"(?a)\w+", 0), (r"\d", re.A), (r"(?a:\s)\s", 0), (r"[\d\s]+", 0), (r"[^\d\s]", 0),
    (r".", 0), (r".", re.S), (r"(?s:.).", 0), (r"[^a-z]", 0), (r"[^\n]*", 0),
    ("[α-ω]+", 0), ("[一-龥]+", 0), ("[😀-🙏]", 0), ("é|ü+", 0), ("[^é]", 0),
    ("(?i)abc", 0), ("(?i)[a-z]+", 0), ("(?i)[^a-z]", 0), ("k", re.I), ("(?i)ß", 0),
    ("(?i)σ", 0), ("(?i)[à-ÿ]", 0), ("(?ai)[a-z]k", 0), ("(?i:a)b", 0), ("(?i)(?-i:a)b", 0),
    (r"(?i)\w", 0), (r"(?i)[\W]", 0), (r"(?i)[^\Wa]", 0), ("(?i)ǅ", 0), ("(?i)[ᾀ-ᾏ]", 0),
    ("^abc$", 0), (r"\Aab\Z", 0), ("(?m)^a$", 0), ("^a|b$", 0), ("(?:^a)?b", 0), ("^$", 0),
    (JSON_STRING, 0), (JSON_NUMBER, 0), (r"[+-]?(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?", 0),
    (r"(?x) a b  # comment\n c", 0), (r"\x41\u00e9\U0001F600\t\n", 0), (r"[\]\-\\]", 0),
    (r"[-a]", 0), ("(?P<n>x)y", 0), ("()a", 0), (r"(?#comment)a", 0),
]

ALPHABET = "abcdkzABCDKZ019_ \t\n-.+eE\"\\/uéüÉßẞσςΣαωK中一😀\x00\x1f\x7f\u0085\u00a0\u2028"
SAMPLE_STRINGS = ["", "a", "abc", "ABC", "aBc", "abcd", "ab", "aa", "aaa", "aaaaa", "ac", "abcabc",
                  "0", "-0", "1.5e+10", "-12.25E3", ".5", "1.", '"hi"', '"a\\"b"', '"\\u00e9x"',
                  '"\\uZZZZ"', '"\x01"', "x\n", "\n", "é", "ü", "üü", "日本", "😀", "K", "k", "K",
                  "ß", "SS", "ẞ", "σ", "ς", "Σ", "ǅ", "ǆ", "Ǆ", "ᾈ", "ᾀ", "\u0345", "ι", "Ι",
                  "_x1", "1x", " \t", "\u00a0", "A\u00e9\U0001F600\t\n", "]", "-", "\\", "xy"]


def agree(pattern: str, flags: int, s: str, d=None) -> None:
    d = d or compile_regex(parse_regex(pattern, flags))
    want = bool(re.fullmatch(pattern, s, flags))
    assert d.matches(s.encode()) == want, (pattern, flags, s)
    if want:
        data = s.encode()
        for i in range(len(data) + 1):
            assert d.is_live_prefix(data[:i]), (pattern, s, i)


@pytest.mark.parametrize("pattern, flags", PATTERNS)
def test_fixed_patterns_against_re(pattern, flags):
    d = compile_regex(parse_regex(pattern, flags))
    for s in SAMPLE_STRINGS:
        agree(pattern, flags, s, d)


@pytest.mark.parametrize("pattern, flags", PATTERNS)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fixed_patterns_random_strings(pattern, flags, data):
    d = _compiled(pattern, flags)
    s = data.draw(st.text(ALPHABET, max_size=10), label="random")
    agree(pattern, flags, s, d)
    try:
        positive = data.draw(st.from_regex(re.compile(pattern, flags), fullmatch=True), label="positive")
    except Exception:  # hypothesis cannot generate from every construct
        return
    agree(pattern, flags, positive, d)


_CACHE: dict = {}


def _compiled(pattern: str, flags: int):
    key = (pattern, flags)
    if key not in _CACHE:
        _CACHE[key] = compile_regex(parse_regex(pattern, flags))
    return _CACHE[key]


# ----------------------------------------------------------- random regexes

_ATOMS = ["a", "b", "c", "é", "Σ", "中", "😀", r"\.", "-", " ", "[ab]", "[^a]", "[a-cé]",
          r"[^\w]", r"\d", r"\w", r"\s", r"\W", ".", "[丁-中]", "[^b-z]", r"[\dA-C]", "K", "k"]
_QUANTS = ["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}", "*?", "??", "+?", "{,2}"]


def _regexes():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda t: f"{t[0]}|{t[1]}"),
            st.tuples(inner, st.sampled_from(_QUANTS)).map(lambda t: f"(?:{t[0]}){t[1]}"),
            inner.map(lambda s: f"({s})"),
            inner.map(lambda s: f"(?i:{s})"),
            inner.map(lambda s: f"(?s:{s})"),
            inner.map(lambda s: f"(?a:{s})"),
        )
    return st.recursive(st.sampled_from(_ATOMS), extend, max_leaves=8)


_RANDOM_ALPHABET = "abcABCéÉσΣς中丁😀.- \n1_Kk\u212a"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pattern=_regexes(), data=st.data())
def test_random_regexes_against_re(pattern, data):
    try:
        d = compile_regex(parse_regex(pattern))
    except CompileLimitError:
        assume(False)
    for _ in range(4):
        agree(pattern, 0, data.draw(st.text(_RANDOM_ALPHABET, max_size=8)), d)
    try:
        positive = data.draw(st.from_regex(pattern, fullmatch=True))
    except Exception:
        return
    agree(pattern, 0, positive, d)


# ------------------------------------------------------------ AST shapes


def test_ast_shapes():
    assert parse_regex("ab") == Seq((char("a"), char("b")))
    assert parse_regex("[a-c]") == CharRanges(((97, 99),))
    assert parse_regex("^a$") == char("a")
    assert parse_regex("") == EMPTY
    assert parse_regex("a{2,5}") == Repeat(char("a"), 2, 5)
    assert parse_regex("a*?") == Repeat(char("a"), 0, None)
    assert parse_regex("[^\\x00-\\U0010ffff]") == NOTHING
    assert parse_regex("a[^\\x00-\\U0010ffff]b") == NOTHING
    with pytest.raises(GrammarError, match="lookahead"):
        parse_regex("[^\\x00-\\U0010ffff](?=a)")
    assert parse_regex("(?i)k") == CharRanges(((75, 75), (107, 107), (0x212A, 0x212A)))
    assert parse_regex("(?ai)k") == CharRanges(((75, 75), (107, 107)))
    assert parse_regex(".", "s") == CharRanges(((0, 0xD7FF), (0xE000, 0x10FFFF)))
    assert parse_regex(".") == CharRanges(((0, 9), (11, 0xD7FF), (0xE000, 0x10FFFF)))


def test_flag_letters():
    assert parse_regex("A", "i") == parse_regex("a", re.I)
    assert parse_regex("a b", "x") == parse_regex("ab")
    assert parse_regex(r"\w", "a") == parse_regex(r"[a-zA-Z0-9_]")
    assert parse_regex("^a$", "m") == char("a")
    with pytest.raises(GrammarError, match="unknown regex flag 'q'"):
        parse_regex("a", "iq")
    with pytest.raises(GrammarError):
        parse_regex("a", "l")  # LOCALE is only valid for bytes patterns
    with pytest.raises(GrammarError):
        parse_regex("a", "au")
    with pytest.raises(GrammarError):
        parse_regex("a", 1 << 12)


# --------------------------------------------------------- character sets


def _re_set(pattern: str) -> np.ndarray:
    """Which code points the one-character ``pattern`` matches, asked of ``re``."""
    out = np.zeros(0x110000, dtype=bool)
    flags, body = re.fullmatch(r"(\(\?[aiLmsux]+\))?(.*)", pattern, re.S).groups()
    rx = re.compile(f"{flags or ''}(?:{body})+")  # runs of matching code points
    for lo, hi in ((0, 0xD7FF), (0xE000, 0x10FFFF)):
        text = np.arange(lo, hi + 1, dtype="<u4").tobytes().decode("utf-32-le")
        for m in rx.finditer(text):
            out[lo + m.start():lo + m.end()] = True
    return out


def _ast_set(pattern: str) -> np.ndarray:
    rx = parse_regex(pattern)
    assert isinstance(rx, CharRanges), rx
    out = np.zeros(0x110000, dtype=bool)
    for lo, hi in rx.ranges:
        out[lo:hi + 1] = True
    return out


@pytest.mark.parametrize("pattern", [
    r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", r"(?a)\w", r"(?a)\s", r"(?a)\D", r"[^\d\s]",
    "(?i)k", "(?i)s", "(?i)ß", "(?i)σ", "(?i)ı", "(?i)i", "(?i)İ", "(?i)ǅ", "(?i)[a-z]",
    "(?i)[^a-z]", "(?i)[à-ÿ]", r"(?i)[\W]", r"(?i)[^\Wa]", "(?i)[ά-ώ]", "(?ai)[^k]",
    "(?i)[\U00010400-\U0001044f]", "(?i)[\U00010400x]", "(?i)\U00010400", "(?i)[ᾀ-ᾯ]",
    "(?i)[^\u0130-\u0131]", "(?i)[\u0100-\u017f]", "(?i)\u212a", "(?i)[\u1e00-\u1eff]",
])
def test_char_sets_exact_over_all_codepoints(pattern):
    assert np.array_equal(_ast_set(pattern), _re_set(pattern))


def test_unicode_categories_match_re_per_codepoint():
    """Check \\d \\w \\s against re.fullmatch for every code point, and against the str
    predicates that re uses."""
    codepoints = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    chars = list(map(chr, codepoints))
    predicates = {"d": str.isdecimal, "w": lambda ch: ch.isalnum() or ch == "_", "s": str.isspace}
    for k, predicate in predicates.items():
        ours = _ast_set("\\" + k)[codepoints].tolist()
        fullmatch = re.compile("\\" + k).fullmatch
        assert ours == [fullmatch(ch) is not None for ch in chars], k
        assert ours == list(map(predicate, chars)), k


def test_case_points_cover_everything_sre_treats_as_cased():
    _sre = pytest.importorskip("_sre")
    points = set(map(ord, regex_mod._case_points()[0]))
    for c in range(0x110000):
        if _sre.unicode_iscased(c) or _sre.unicode_tolower(c) != c:
            assert c in points and _sre.unicode_tolower(c) in points, hex(c)
    try:
        from re._casefix import _EXTRA_CASES
    except ImportError:
        return
    for k, vs in _EXTRA_CASES.items():
        assert k in points and all(v in points for v in vs)


# ------------------------------------------------------------------ anchors


@pytest.mark.parametrize("pattern, needle", [
    ("a^b", "anchor ^"), ("a$b", "anchor $"), (r"a\Ab", r"anchor \A"), (r"a\Zb", r"anchor \Z"),
    (r"\bfoo", r"\b"), (r"a\B", r"\B"), ("(?m)a$\nb", "MULTILINE"), ("(?:a$)*", "anchor $"),
    ("a?^b", "anchor ^"), ("(?:^a)+", "anchor ^"),
])
def test_unsupported_anchors(pattern, needle):
    with pytest.raises(GrammarError) as info:
        parse_regex(pattern)
    assert needle in str(info.value)


def test_anchor_positions():
    err = _err(r"ab\bc")
    assert (err.line, err.column) == (1, 3)
    err = _err("^a^b")  # the first ^ is fine, the second is reported
    assert (err.line, err.column) == (1, 3)
    err = _err("(?m)x\n^y")
    assert (err.line, err.column) == (2, 1)


def test_dollar_before_a_final_newline_under_full_match():
    """Python's ``$`` also matches before a final newline; under full match that only
    matters when something follows the ``$``, which we refuse, so ``a$`` is ``a`` alone."""
    d = compile_regex(parse_regex("a$"))
    assert d.matches(b"a") and not d.matches(b"a\n")
    assert re.fullmatch("a$", "a\n") is None
    assert re.fullmatch("a$\n", "a\n")  # $ then the newline itself: not regular here
    assert (_err("a$\n").line, _err("a$\n").column) == (1, 2)


# ---------------------------------------------------- ECMA-262 case folding


@pytest.mark.parametrize("code, folded", [  # CaseFolding.txt, statuses C and S
    (0x41, 0x61), (0x61, 0x61), (0x17F, 0x73), (0x212A, 0x6B), (0x3A3, 0x3C3), (0x3C2, 0x3C3),
    (0x1E9E, 0xDF),    # S (its F mapping is "ss")
    (0x1F88, 0x1F80),  # S
    (0x1FD3, 0x390),   # S, added in Unicode 15.1
    (0xAB70, 0x13A0),  # C: Cherokee folds to upper case
    (0xDF, 0xDF), (0x130, 0x130), (0x149, 0x149),  # F / T only: no simple folding
    (0x1C5, 0x1C6), (0x10400, 0x10428), (0x30, 0x30),
])
def test_simple_case_folding(code, folded):
    assert regex_mod._simple_fold(code) == folded


def test_simple_folding_negates_after_folding():
    """ECMA-262: [^k] with i is every character but k, K and the Kelvin sign."""
    rx = parse_regex("[^k]", re.I, case_folding="simple")
    d = compile_regex(rx)
    for ch in "kK\u212a":
        assert not d.matches(ch.encode())
    assert d.matches(b"a") and d.matches("\u017f".encode())


# ---------------------------------------------------- unsupported constructs


def _err(pattern: str, flags: int | str = 0) -> GrammarError:
    with pytest.raises(GrammarError) as info:
        parse_regex(pattern, flags, source="<test>")
    assert info.value.source == "<test>"
    return info.value


@pytest.mark.parametrize("pattern, needle, line, column", [
    ("ab(?=c)", "lookahead", 1, 3), ("ab(?!c)", "negative lookahead", 1, 3),
    ("x(?<=a)", "lookbehind", 1, 2), ("x(?<!a)", "negative lookbehind", 1, 2),
    (r"(a)\1", "backreference", 1, 4), ("(?P<n>a)(?P=n)", "backreference", 1, 9),
    ("(a)?(?(1)b|c)", "conditional", 1, 5), ("[(]x(?>a)", "atomic group", 1, 5),
    ("ab*+", "possessive", 1, 3), ("a{2}+", "possessive", 1, 4),
    ("(?x) a # (?=\n (?=b)", "lookahead", 2, 2), ("a|b\n|(?<=x)", "lookbehind", 2, 2),
])
def test_unsupported_constructs(pattern, needle, line, column):
    if "(?>" in pattern or "*+" in pattern or "}+" in pattern:
        try:
            re.compile(pattern)
        except re.error:
            pytest.skip("this Python has no atomic groups / possessive quantifiers")
    err = _err(pattern)
    assert needle in err.message
    assert "not supported" in err.message
    assert (err.line, err.column) == (line, column)


@pytest.mark.parametrize("pattern, line, column", [
    ("ab(c", 1, 3), ("a\n(b", 2, 1), ("[a-", 1, 1), ("*a", 1, 1), ("a{2,1}", 1, 3),
    ("a)", 1, 2), (r"\q", 1, 1), ("(?P<n>a)(?P<n>b)", 1, 13), ("a\nb\n[z-a]", 3, 2),
])
def test_malformed_patterns(pattern, line, column):
    err = _err(pattern)
    assert "invalid regex" in err.message
    assert (err.line, err.column) == (line, column)


def test_huge_repeats_raise_quickly():
    for pattern in ("a{100000}", "(a{1000}){1000}", "(?:(?:a{100}){100}){100}", "[^a]{60000}",
                    "a{4294967294}"):
        start = time.perf_counter()
        with pytest.raises((CompileLimitError, GrammarError)):
            parse_regex(pattern)
        assert time.perf_counter() - start < 1.0
    with pytest.raises(GrammarError):
        parse_regex("a{99999999999999999999}")
    parse_regex("a{1,1000}")


def test_deep_nesting():
    with pytest.raises((GrammarError, CompileLimitError)):
        parse_regex("(" * 5000 + "a" + ")" * 5000)
    assert compile_regex(parse_regex("(" * 50 + "a" + ")" * 50)).matches(b"a")


@settings(max_examples=500, deadline=2000)
@given(st.text(alphabet=st.sampled_from(list("ab()[]{}|*+?^$\\.-,:=!<>#0129dwsSbBAZPiamx \n\u00e9")) | st.characters(),
               max_size=16))
def test_fuzz_never_crashes(pattern):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rx = parse_regex(pattern)
        except (GrammarError, CompileLimitError):
            return
        try:
            d = compile_regex(rx, max_states=2000)
        except CompileLimitError:
            return
        for s in ("", "a", "ab", "aab", "\n", "é", "0", "-", "ba"):
            assert d.matches(s.encode()) == bool(re.fullmatch(pattern, s)), (pattern, s)


@pytest.fixture(autouse=True, scope="module")
def _warm_caches():
    """Unicode class tables are built once per process; keep that out of deadlines."""
    parse_regex(r"(?i)[\w\d\s]")
