"""The GBNF frontend and the collapse_regular pass: languages, errors, shared grammars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gramgen.automata.dfa import compile_regex
from gramgen.errors import GrammarError
from gramgen.grammar.gbnf import gbnf_to_ir
from gramgen.grammar.ir import EMPTY, Alt, GrammarIR, Repeat, Rule, literal
from gramgen.grammar.simplify import collapse_regular, split_nullable_lexemes
from test_lark_frontend import all_strings, ir_language

SHARED = Path(__file__).resolve().parents[2] / "shared"
GBNF_DIR = SHARED / "data" / "gbnf"


def re_language(pattern: str, alphabet: str, max_len: int) -> set[str]:
    rx = re.compile(pattern, re.S)
    return {s for s in all_strings(alphabet, max_len) if rx.fullmatch(s)}


# ------------------------------------------------------------------ regular grammars vs re

REGULAR_CASES = {
    "classes_and_groups": ('root ::= "a" [bc]* ("d" | "e"){1,2}\n', r"a[bc]*(d|e){1,2}", "abcd", 5),
    "counted": ('root ::= "a"{2} "b"{1,} "c"{,2} "d"{0}\n', r"aab+c{0,2}", "abc", 6),
    "escapes": ('root ::= "\\x61" [^a-b\\n] "\\u00e9"?\n', "a[^ab\n]\u00e9?", "ab\n\u00e9", 4),
    "any_char": ('root ::= . "x" | "\\"" [\\]\\[]\n', '.x|"[\\]\\[]', 'x"[]', 4),
    "continuation_and_comments": ("""
        # leading comment
        root ::= a # trailing comment
          | b
        a ::= "a"
        b ::= (
            "b" |
            "bb"
        )
        """, r"a|bb?", "ab", 4),
    "unicode_ranges": ('root ::= [\\u00e0-\\u00ff]+ [\\U0001F600-\\U0001F64F]?\n',
                       "[\u00e0-\u00ff]+[\U0001F600-\U0001F64F]?", "a\u00e9\u00ff\u0100\U0001F601", 3),
    "nested_repeats": ("root ::= (x y?)+ | \"\"\nx ::= \"a\"\ny ::= \"b\"*\n", r"(ab*)*", "ab", 6),
    "empty_alternatives": ('root ::= | "a" |\n', r"a?", "ab", 3),
    "underscore_names": ('root ::= my_rule\nmy_rule ::= "a"+\n', r"a+", "ab", 4),
    "windows_newlines": ('root ::= a\r\na ::= "a" "b"?\r\n', r"ab?", "ab", 3),
}


@pytest.mark.parametrize("collapse", [True, False], ids=["collapsed", "plain"])
@pytest.mark.parametrize("name", sorted(REGULAR_CASES))
def test_regular_grammar_matches_re(name, collapse):
    text, pattern, alphabet, max_len = REGULAR_CASES[name]
    ir = gbnf_to_ir(text, collapse=collapse)
    ir.validate()
    expected = re_language(pattern, alphabet, max_len)
    assert expected, "the case should not be vacuous"
    assert ir_language(ir, alphabet, max_len) == expected


def test_regular_grammar_collapses_to_one_lexeme():
    ir = gbnf_to_ir('root ::= string\nstring ::= "\\"" [^"]* "\\""\n')
    assert [r.rhs for r in ir.rules] == [(next(iter(ir.lexemes)),)]
    assert ir.start == "root" and ir.rules[0].lhs == "root"
    assert len(ir.lexemes) == 1


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += 1 if c == "(" else -1
        if depth < 0:
            return False
    return depth == 0


@pytest.mark.parametrize("collapse", [True, False])
def test_recursive_grammar(collapse):
    ir = gbnf_to_ir('root ::= p ws\np ::= ("(" p ")")*\nws ::= " "?\n', collapse=collapse)
    def ok(s: str) -> bool:  # a balanced word, then at most one space
        body = s[:-1] if s.endswith(" ") else s
        return " " not in body and _balanced(body)

    expected = {s for s in all_strings("() ", 6) if ok(s)}
    assert ir_language(ir, "() ", 6) == expected


def test_left_recursion_is_supported():
    ir = gbnf_to_ir('root ::= root "+" "1" | "1"\n')
    assert ir_language(ir, "1+", 5) == {"1", "1+1", "1+1+1"}


# ------------------------------------------------------------------ collapse_regular

SHARED_SMALL = {  # file -> (alphabet, max_len): collapsed and plain IR must agree
    "llama.cpp/arithmetic.gbnf": ("1+(", 5),
    "llama.cpp/list.gbnf": ("- a\n", 5),
    "llama.cpp/json.gbnf": ('{}"1', 4),
    "transformers-cfg/balanced_parentheses.ebnf": ("()", 6),
}


@pytest.mark.parametrize("rel", sorted(SHARED_SMALL))
def test_collapse_preserves_shared_languages(rel):
    text = (GBNF_DIR / rel).read_text(encoding="utf-8")
    alphabet, max_len = SHARED_SMALL[rel]
    plain = gbnf_to_ir(text, collapse=False)
    collapsed = gbnf_to_ir(text)
    assert len(collapsed.rules) <= len(plain.rules)
    assert ir_language(collapsed, alphabet, max_len) == ir_language(plain, alphabet, max_len)


_LEXEMES = {"a": literal("a"), "b": literal("b"), "ab": literal("ab"),
            "a+": Repeat(literal("a"), 1, None), "b?": Alt((EMPTY, literal("b")))}
_NTS = ["S", "A", "B", "C"]


@st.composite
def random_grammars(draw, nullable_lexemes: bool = False):
    """Small random IRs; with ``nullable_lexemes``, also nullable lexemes and a nullable
    ``" "`` lexeme that rules may use and that may be ignored."""
    lexemes = dict(_LEXEMES)
    if nullable_lexemes:
        lexemes[" "] = Repeat(literal(" "), 0, 2)
    else:
        del lexemes["b?"]
    symbols = _NTS + sorted(lexemes)
    rules = []
    for nt in _NTS:
        for _ in range(draw(st.integers(1, 3))):
            rules.append(Rule(nt, tuple(draw(st.lists(st.sampled_from(symbols), max_size=3)))))
    ignore = (" ",) if nullable_lexemes and draw(st.booleans()) else ()
    return GrammarIR(rules=rules, lexemes=lexemes, start="S", ignore=ignore)


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_grammars())
def test_collapse_regular_preserves_random_languages(ir):
    out = collapse_regular(ir)
    out.validate()
    assert out.start == "S" and any(r.lhs == "S" for r in out.rules)
    assert ir_language(out, "ab", 5) == ir_language(ir, "ab", 5)


@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_grammars(nullable_lexemes=True))
def test_split_nullable_lexemes_preserves_random_languages(ir):
    out = split_nullable_lexemes(ir)
    out.validate()
    assert all(not compile_regex(rx).nullable for rx in out.lexemes.values())
    assert ir_language(out, "ab ", 4) == ir_language(ir, "ab ", 4)


def test_collapse_leaves_ignore_grammars_alone():
    ir = GrammarIR(rules=[Rule("S", ("a",))], lexemes={"a": literal("a"), " ": literal(" ")},
                   start="S", ignore=(" ",))
    assert collapse_regular(ir) is ir


def test_collapse_respects_the_size_limit():
    plain = gbnf_to_ir('root ::= x x\nx ::= y y\ny ::= "ab"\n', collapse=False)
    limited = collapse_regular(plain, max_regex_nodes=4)
    limited.validate()
    assert {"root", "x"} <= {r.lhs for r in limited.rules}
    assert "y" in limited.lexemes
    assert ir_language(limited, "ab", 8) == {"abababab"}


# ------------------------------------------------------------------ errors


def _error(text: str, **kw) -> GrammarError:
    with pytest.raises(GrammarError) as info:
        gbnf_to_ir(text, **kw)
    assert info.value.line >= 1 and info.value.column >= 1
    return info.value


def test_undefined_rule_is_located():
    err = _error('root ::= a\na ::= "x" missing\n')
    assert "missing" in err.message and (err.line, err.column) == (2, 11)


def test_missing_start_rule():
    assert "root" in _error('a ::= "x"\n').message
    assert "main" in _error('root ::= "x"\n', start="main").message


def test_token_syntax_is_rejected_by_name():
    err = _error('root ::= <think> "x"\n')
    assert "<think>" in err.message and err.column == 10
    assert "<[1234]>" in _error('root ::= "x" <[1234]>\n').message


@pytest.mark.parametrize("text, fragment", [
    ('root ::= "a\\q"\n', "unknown escape"),
    ('root ::= "abc\n', "unterminated"),
    ('root ::= [abc\n', "unterminated"),
    ('root ::= * "a"\n', "before"),
    ('root ::= "a"{3,1}\n', "max < min"),
    ('root ::= "a"{9999999}\n', "limit"),
    ('root ::= ("a"\n', "expecting ')'"),
    ('root ::= "a")\n', "unmatched"),
    ('root := "a"\n', "::="),
    ('root ::= "a"\nroot ::= "b"\n', "defined twice"),
    ('root ::= "\\x4"\n', "hex"),
    ('root ::= "a" {x}\n', "{"),
])
def test_malformed(text, fragment):
    assert fragment in _error(text).message


# ------------------------------------------------------------------ shared grammars

GBNF_FILES = sorted(p for p in GBNF_DIR.rglob("*") if p.suffix in (".gbnf", ".ebnf")) \
    if GBNF_DIR.is_dir() else []
GBNF_EXPECTED_FAILURES: dict[str, str] = {}  # every shared grammar converts today


def test_shared_gbnf_grammars_are_present():
    assert len(GBNF_FILES) >= 30, "../shared/data/gbnf not found or incomplete"


@pytest.mark.parametrize("path", GBNF_FILES, ids=lambda p: str(p.relative_to(GBNF_DIR)))
def test_shared_gbnf_grammars(path):
    rel = str(path.relative_to(GBNF_DIR))
    text = path.read_text(encoding="utf-8")
    if rel in GBNF_EXPECTED_FAILURES:
        with pytest.raises(GrammarError, match=GBNF_EXPECTED_FAILURES[rel]):
            gbnf_to_ir(text, source=str(path))
        return
    ir = gbnf_to_ir(text, source=str(path))
    ir.validate()
    assert any(r.lhs == "root" for r in ir.rules)
    for name, rx in ir.lexemes.items():
        assert not compile_regex(rx, max_states=50_000).nullable, name
