"""The Lark frontend: same language as lark's Earley parser, clear errors otherwise.

``ir_language`` is a deliberately naive recogniser over the IR (all splits into lexemes,
lexemes decided by their DFAs, a fixpoint over spans for the rules), used as the oracle
here and in the GBNF tests.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

import pytest
from lark import Lark
from lark.exceptions import LarkError

from gramgen.automata.dfa import compile_regex
from gramgen.errors import GrammarError
from gramgen.grammar.ir import GrammarIR
from gramgen.grammar.lark import lark_to_ir

SHARED = Path(__file__).resolve().parents[2] / "shared"
LARK_DIR = SHARED / "data" / "lark"


# ------------------------------------------------------------------ brute-force oracle


def all_strings(alphabet: str, max_len: int):
    for n in range(max_len + 1):
        for t in itertools.product(alphabet, repeat=n):
            yield "".join(t)


def ir_language(ir: GrammarIR, alphabet: str, max_len: int) -> set[str]:
    """Every string over ``alphabet`` of length <= ``max_len`` that ``ir`` accepts.

    Spans derived inside a string depend only on that substring, so one fixpoint per
    string of length ``max_len`` decides all its prefixes; shorter strings are prefixes.
    """
    dfas = {name: compile_regex(rx) for name, rx in ir.lexemes.items()}
    out: set[str] = set()
    words = [""] if max_len == 0 else ("".join(t) for t in itertools.product(alphabet, repeat=max_len))
    for s in words:
        for k in _accepted_prefixes(ir, dfas, s):
            out.add(s[:k])
    return out


def _lexeme_spans(dfa, chunks: list[bytes]) -> dict[int, list[int]]:
    """For each start i, the ends j such that the DFA accepts chunks[i:j]."""
    rows, accepting, n = dfa.rows, dfa.accepting, len(chunks)
    spans: dict[int, list[int]] = {}
    for i in range(n + 1):
        ends, state, j = [], (0 if dfa.n_states else -1), i
        while state >= 0:
            if accepting[state]:
                ends.append(j)
            if j == n:
                break
            for b in chunks[j]:
                state = rows[state][b]
                if state < 0:
                    break
            j += 1
        spans[i] = ends
    return spans


def _accepted_prefixes(ir: GrammarIR, dfas, s: str) -> list[int]:
    n = len(s)
    chunks = [c.encode() for c in s]
    lex = {name: _lexeme_spans(dfa, chunks) for name, dfa in dfas.items()}
    ignore_reach = {}  # i -> ends of ignore* starting at i
    for i in range(n, -1, -1):
        reach = {i}
        for name in ir.ignore:
            for j in lex[name][i]:
                if j > i:
                    reach |= ignore_reach[j]
        ignore_reach[i] = reach
    # table[sym][i] = ends k such that sym derives s[i:k] followed by ignore*
    table: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for name, spans in lex.items():
        for i, ends in spans.items():
            for j in ends:
                table[name][i] |= ignore_reach[j]
    rules = ir.rules[::-1]  # helpers usually follow their users: children first converges faster
    changed = True
    while changed:
        changed = False
        for r in rules:
            lhs_row = table[r.lhs]
            for i in range(n + 1):
                ends = {i}
                for sym in r.rhs:
                    row = table[sym]
                    ends = set().union(*[row[e] for e in ends if e in row])
                    if not ends:
                        break
                if ends and not ends <= lhs_row[i]:
                    lhs_row[i] |= ends
                    changed = True
    row = table[ir.start]
    return sorted({k for i in ignore_reach[0] if i in row for k in row[i]})


def lark_language(text: str, alphabet: str, max_len: int, start: str = "start") -> set[str]:
    # dynamic_complete also tries the shorter matches of each terminal, which is the
    # "any split" reading of the grammar that gramgen implements
    parser = Lark(text, parser="earley", lexer="dynamic_complete", start=start)
    out = set()
    for s in all_strings(alphabet, max_len):
        try:
            parser.parse(s)
        except LarkError:
            continue
        out.add(s)
    return out


# ------------------------------------------------------------------ equivalence with lark

EQUIVALENCE_CASES = {
    "templates": ("""
        start: _sep{item, ","}
        _sep{x, sep}: x (sep x)*
        item: "a" | "b" "b"?
        """, "ab,", 6),
    "inline_rules_and_repeat": ("""
        start: x~2..3 | y
        ?x: "a" | "[" y "]"
        y: "b"~0..2
        """, "ab[]", 5),
    "ignore_and_import_common": ("""
        %import common.WS_INLINE
        %ignore WS_INLINE
        start: word+
        ?word: "ab" | "b"
        """, "ab ", 6),
    "string_flags": ("""
        start: "ab"i "a"? B
        B: "b"i | /a+/i
        """, "aAbB", 5),
    "common_int_and_recursion": ("""
        %import common.INT
        start: list
        list: "(" [INT ("," INT)*] ")" | "(" list ")"
        """, "1(),", 5),
    "optional_and_alias": ("""
        start: expr
        ?expr: expr "+" atom -> add | atom
        atom: "a" | "(" expr ")"
        """, "a+()", 5),
    "priorities_do_not_change_language": ("""
        start: (A | B)+
        A.2: "a"
        B.-1: /a+b?/
        """, "ab", 6),
    "terminal_composition": ("""
        start: NUM
        NUM: DIGIT+ ("." DIGIT+)?
        DIGIT: "0".."1"
        """, "01.", 6),
    "ignore_comment_regex": ("""
        start: "a" "b"*
        COMMENT: /#[^\\n]*\\n/
        %ignore COMMENT
        """, "ab#\n", 5),
    "override_and_extend": ("""
        start: x
        x: "a"
        %override x: "b" x?
        %extend x: "c"
        """, "abc", 5),
}


@pytest.mark.parametrize("name", sorted(EQUIVALENCE_CASES))
def test_same_language_as_lark(name):
    text, alphabet, max_len = EQUIVALENCE_CASES[name]
    ir = lark_to_ir(text)
    ir.validate()
    expected = lark_language(text, alphabet, max_len)
    assert expected and len(expected) < len(list(all_strings(alphabet, max_len)))  # not vacuous
    assert ir_language(ir, alphabet, max_len) == expected


def test_any_split_is_a_superset_of_lark_dynamic():
    # lark's plain "dynamic" lexer keeps only re's (greedy) match of A; any split does not
    text = "start: A A\nA: /a+/"
    ir = lark_to_ir(text)
    assert ir_language(ir, "a", 4) == {"aa", "aaa", "aaaa"}
    with pytest.raises(LarkError):
        Lark(text, parser="earley", lexer="dynamic").parse("aa")


def test_zero_width_terminal_is_allowed_and_not_a_lexeme():
    ir = lark_to_ir('start: "a" B "a"\nB: /b*/')
    ir.validate()
    assert all(not compile_regex(rx).nullable for rx in ir.lexemes.values())
    assert ir_language(ir, "ab", 4) == {"aa", "aba", "abba"}


def test_nullable_ignore_loses_only_its_empty_match():
    ir = lark_to_ir('start: "a" "a"\nSP: / */\n%ignore SP')
    assert ir_language(ir, "a ", 4) == {"aa", " aa", "a a", "aa ", "  aa", " a a", " aa ",
                                        "a  a", "a a ", "aa  "}


def test_names_and_ignore_are_kept():
    ir = lark_to_ir('start: item+\nitem: WORD\nWORD: /[a-z]+/\n%import common.WS\n%ignore WS')
    assert ir.start == "start"
    assert {"start", "item"} <= {r.lhs for r in ir.rules}
    assert ir.ignore == ("WS",)
    assert set(ir.lexemes) == {"WORD", "WS"}
    assert not set(ir.lexemes) & {r.lhs for r in ir.rules}


def test_other_start_symbol():
    text = 'start: "a"\nother: "b" "b"'
    assert ir_language(lark_to_ir(text, start="other"), "ab", 3) == {"bb"}


def test_import_paths(tmp_path):
    (tmp_path / "mylib.lark").write_text('WORD: "x"+\n')
    ir = lark_to_ir("%import mylib.WORD\nstart: WORD", import_paths=[str(tmp_path)])
    assert ir_language(ir, "xy", 3) == {"x", "xx", "xxx"}


# ------------------------------------------------------------------ errors


def _error(text: str, **kw) -> GrammarError:
    with pytest.raises(GrammarError) as info:
        lark_to_ir(text, **kw)
    err = info.value
    assert err.line >= 1 and err.column >= 1
    return err


def test_syntax_error_has_position():
    err = _error('start: "a"\nfoo: ) "b"\n')
    assert err.line == 2


def test_undefined_rule_is_located():
    err = _error('start: "a" missing\n')
    assert "missing" in err.message and err.line == 1 and err.column == 12


def test_unknown_start():
    assert "nope" in _error('start: "a"', start="nope").message


def test_declared_terminal_needs_a_postlexer():
    err = _error('start: _INDENT "a"\n%declare _INDENT\n')
    assert "_INDENT" in err.message and "postlexer" in err.message
    assert err.line == 2


def test_lookahead_in_terminal_is_rejected_with_its_name():
    err = _error('start: A\nA: /a(?!b)/\n')
    assert "A" in err.message and err.line == 2


def test_missing_import():
    err = _error("%import nosuchgrammar.X\nstart: X\n")
    assert "nosuchgrammar" in err.message


def test_relative_import_from_text():
    err = _error("%import .sibling.X\nstart: X\n")
    assert "relative" in err.message


# ------------------------------------------------------------------ shared grammars

LARK_FILES = sorted(LARK_DIR.rglob("*.lark")) if LARK_DIR.is_dir() else []
LARK_STARTS = {"lark-1.3.1/python.lark": "file_input"}  # python.lark files: lark's PythonIndenter (IndentedMatcher)
LARK_EXPECTED_FAILURES = {
    "lark-1.3.1/common.lark": "start rule 'start' is not defined",  # a library, no start
    "lark-1.3.1/unicode.lark": "start rule 'start' is not defined",  # a library, no start
    "lark-1.3.1/lark.lark": "lookahead",  # OP: /[+*]|[?](?![a-z])/ looks past the token
    # its indenter is supported; its COMMENT holds a docstring pattern with lookbehinds
    "syncode/python.lark": "lookbehind",
}


SHARED_SMALL = {"syncode/calc.lark": ("1+ (*)", 4), "syncode/json.lark": ("[]1, ", 4),
                "syncode/tiny.lark": ("cd", 6)}


@pytest.mark.parametrize("rel", sorted(SHARED_SMALL))
def test_shared_grammar_same_language_as_lark(rel):
    text = (LARK_DIR / rel).read_text(encoding="utf-8")
    alphabet, max_len = SHARED_SMALL[rel]
    assert ir_language(lark_to_ir(text), alphabet, max_len) == lark_language(text, alphabet, max_len)


def test_shared_lark_grammars_are_present():
    assert len(LARK_FILES) >= 10, "../shared/data/lark not found or incomplete"


@pytest.mark.parametrize("path", LARK_FILES, ids=lambda p: str(p.relative_to(LARK_DIR)))
def test_shared_lark_grammars(path):
    rel = str(path.relative_to(LARK_DIR))
    text = path.read_text(encoding="utf-8")
    start = LARK_STARTS.get(rel, "start")
    if rel in LARK_EXPECTED_FAILURES:
        with pytest.raises(GrammarError, match=LARK_EXPECTED_FAILURES[rel]) as info:
            lark_to_ir(text, start=start, source=str(path))
        assert info.value.line >= 1 and info.value.column >= 1
        return
    ir = lark_to_ir(text, start=start, source=str(path))
    ir.validate()
    for name, rx in ir.lexemes.items():
        dfa = compile_regex(rx, max_states=50_000)
        assert not dfa.nullable, name
