"""Malformed grammars never crash a frontend: they convert, or raise GrammarError with a
1-based position (CompileLimitError for inputs that are merely too big), quickly."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gramgen.errors import CompileLimitError, GrammarError
from gramgen.grammar import Grammar

SHARED = Path(__file__).resolve().parents[2] / "shared"

FUZZ = settings(max_examples=200, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

LARK_SEEDS = [
    'start: _sep{item, ","}\n_sep{x, sep}: x (sep x)*\nitem: "a" | "b" "b"?\n',
    'start: x~2..3 | y\n?x: "a" | "[" y "]"\ny: "b"~0..2\n',
    '%import common.WS_INLINE\n%ignore WS_INLINE\nstart: word+\n?word: "ab"i | /b+/s\n',
    'start: NUM\nNUM: DIGIT+ ("." DIGIT+)?\nDIGIT: "0".."9"\nA.2: "a"\n%declare B\n',
    '?start: expr\n?expr: expr "+" atom -> add | atom\natom: "a" | "(" expr ")"\n'
    '%override atom: "b"\n%extend atom: "c"\n',
]
GBNF_SEEDS = [
    'root ::= "a" [bc]* ("d" | "e"){1,2}\n',
    'root ::= "\\x61" [^a-b\\n] "\\u00e9"? . "\\U0001F600"\n',
    '# c\nroot ::= a # t\n  | b\na ::= "a"{2,} "b"{,3}\nb ::= (\n  "b" |\n  "bb"\n)\n',
    'root ::= value\nvalue ::= "[" ws (value ("," ws value)*)? "]" | [0-9]+\nws ::= [ \\t\\n]*\n',
]
REGEX_SEEDS = [r"a[bc]*(d|e){1,2}", r"(?i)ab\d+\s?", r"[^\W\d_]+(?:-\w+)*", r"\"([^\"\\]|\\.)*\"",
               r"(?s:.)x{2,5}|y+?", r"(?P<n>a)(?:b|c)[\u00e0-\u00ff]"]

for _path in [SHARED / "data" / "lark" / "syncode" / "calc.lark",
              SHARED / "data" / "lark" / "syncode" / "json.lark"]:
    if _path.is_file():
        LARK_SEEDS.append(_path.read_text(encoding="utf-8"))
for _path in [SHARED / "data" / "gbnf" / "llama.cpp" / "json.gbnf",
              SHARED / "data" / "gbnf" / "llama.cpp" / "arithmetic.gbnf"]:
    if _path.is_file():
        GBNF_SEEDS.append(_path.read_text(encoding="utf-8"))

LARK_CHARS = 'abzAZ_09 \n\t:|()[]{}*+?~."/\\%!-><#,=i'
GBNF_CHARS = 'abzAZ_09 \n\t:=|()[]{}*+?"\\.#<>^-,xuU'
REGEX_CHARS = "ab09 ()[]{}*+?|^$\\.-,:=!<>PdDwWsSbBuxN'?#"


@st.composite
def mutated(draw, seeds: list[str], chars: str) -> str:
    """A seed with a few characters deleted, inserted, swapped or duplicated."""
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "swap", "duplicate"]))
        i = draw(st.integers(0, max(len(text) - 1, 0)))
        if op == "delete":
            text = text[:i] + text[i + 1:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(chars)) + text[i:]
        elif op == "swap" and i + 1 < len(text):
            text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
        else:
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:j] + text[i:j] + text[j:]
    return text


def random_text(chars: str):
    return st.text(st.one_of(st.sampled_from(chars), st.characters()), max_size=80)


def _check(build, text: str) -> None:
    try:
        build(text)
    except GrammarError as exc:
        assert exc.line >= 1 and exc.column >= 1, exc
        assert exc.message
    except CompileLimitError:
        pass


Grammar.from_lark('start: "a"')  # build lark's own grammar parser outside the deadline


@FUZZ
@given(mutated(LARK_SEEDS, LARK_CHARS))
def test_lark_mutations(text):
    _check(Grammar.from_lark, text)


@FUZZ
@given(random_text(LARK_CHARS))
def test_lark_random_text(text):
    _check(Grammar.from_lark, text)


@FUZZ
@given(mutated(GBNF_SEEDS, GBNF_CHARS))
def test_gbnf_mutations(text):
    _check(Grammar.from_gbnf, text)


@FUZZ
@given(random_text(GBNF_CHARS))
def test_gbnf_random_text(text):
    _check(Grammar.from_gbnf, text)


@FUZZ
@given(mutated(REGEX_SEEDS, REGEX_CHARS))
def test_regex_mutations(text):
    _check(Grammar.from_regex, text)


@FUZZ
@given(random_text(REGEX_CHARS))
def test_regex_random_text(text):
    _check(Grammar.from_regex, text)
