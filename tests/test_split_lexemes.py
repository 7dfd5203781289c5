"""Lexemes too big for one DFA become rules over smaller lexemes (gramgen.grammar.split):
the language stays the same, counted repetition costs O(log n) rules and parser items, and
masks stay exact (against the independent reference recogniser of the unsplit grammar)."""

from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gramgen
import gramgen.grammar.split as split
from conftest import vocabulary
from gramgen.testing import accepts
from reference import ReferenceGrammar, brute_force_mask

#: regexes whose DFAs pass a small state limit: compiled with it, each is split
REGEXES = [
    "(ab){2,50}c",
    "(a|bc){3,17}",
    "[ab]*a[ab]{6}",
    "(x[0-9]{2,5}y){0,9}",
    "(ab){7}",
    "a{0,33}b{5,}",
    "((ab){2,3}c){4,6}",
    "(a{3}|b{2}){5,}",
    "(é|ab){0,40}",
]


def _split_and_whole(regex: str, max_states: int, vocab):
    grammar = gramgen.Grammar.from_regex(regex)
    small = gramgen.compile(grammar, vocab, max_dfa_states=max_states)
    whole = gramgen.compile(grammar, vocab)
    return small, whole


@pytest.fixture(params=[3, split.CHUNK], ids=["chunk3", "chunk-default"])
def chunk(request, monkeypatch):
    monkeypatch.setattr(split, "CHUNK", request.param)
    return request.param


BYTES = gramgen.Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])


def accepts_bytes(cg, text) -> bool:
    """Whether ``cg`` itself (compiled for BYTES, with its own options) accepts ``text``
    (``gramgen.testing.accepts`` would recompile the grammar with the default options)."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    m = cg.matcher()
    try:
        m.advance_many(list(data))
    except gramgen.TokenRejected:
        return False
    return m.is_accepting()


@pytest.mark.parametrize("regex", REGEXES)
def test_split_language_is_the_regex_language(regex, chunk):
    small, whole = _split_and_whole(regex, 12, BYTES)
    assert len(small.ir.rules) > 1, "the state limit should have split the lexeme"
    assert max(d.n_states for d in small.tables.lex_dfas) <= 12
    alphabet = sorted({c for c in regex if c.isalnum() or c == "é"} | {"z"})
    rng = random.Random(regex)
    texts = ["".join(t) for n in range(7) for t in itertools.product(alphabet[:3], repeat=n)]
    for _ in range(150):
        text = _member(regex, rng)
        texts.append(text)
        if text:  # one edit away, mostly outside the language
            i = rng.randrange(len(text))
            texts.append(text[:i] + text[i + 1:])
            texts.append(text[:i] + rng.choice(alphabet) + text[i:])
    for text in texts:
        expected = re.fullmatch(regex, text) is not None
        assert accepts_bytes(small, text) == expected, (regex, text)


def _member(regex: str, rng: random.Random) -> str:
    """A random word of ``regex``: random strings over its characters until one matches is
    hopeless for long counts, so expand the pattern with sre's parse tree."""
    import re._parser as sre  # type: ignore[import-not-found]

    def gen(tree) -> str:
        out = []
        for op, av in tree:
            name = str(op)
            if name == "LITERAL":
                out.append(chr(av))
            elif name == "IN":
                chars = []
                for kind, value in av:
                    if str(kind) == "LITERAL":
                        chars.append(chr(value))
                    elif str(kind) == "RANGE":
                        chars.extend(chr(c) for c in range(value[0], value[1] + 1))
                    elif str(kind) == "CATEGORY":
                        chars.extend("0123456789")
                out.append(rng.choice(chars))
            elif name == "BRANCH":
                out.append(gen(rng.choice(av[1])))
            elif name == "SUBPATTERN":
                out.append(gen(av[3]))
            elif name in ("MAX_REPEAT", "MIN_REPEAT"):
                lo, hi, sub = av
                hi = lo + 6 if hi == sre.MAXREPEAT else hi
                out.extend(gen(sub) for _ in range(rng.randint(lo, hi)))
            else:  # pragma: no cover - not in REGEXES
                raise AssertionError(f"no generator for {name}")
        return "".join(out)

    text = gen(sre.parse(regex))
    assert re.fullmatch(regex, text), (regex, text)
    return text


@settings(max_examples=40, deadline=None)
@given(count=st.integers(0, 300), extra=st.integers(0, 300), n=st.integers(0, 700))
def test_counted_repeat_counts_exactly(count, extra, n):
    """x{lo,hi} split into chunks counted by O(log n) rules accepts exactly lo..hi copies."""
    regex = f"(ab){{{count},{count + extra}}}c"
    cg = gramgen.compile(gramgen.Grammar.from_regex(regex), BYTES, max_dfa_states=40)
    assert accepts_bytes(cg, "ab" * n + "c") == (count <= n <= count + extra)
    assert not accepts_bytes(cg, "ab" * n + "ac")


@pytest.mark.parametrize("regex", ["(ab){2,50}c", "[ab]*a[ab]{6}", "(x[0-9]{2,5}y){0,9}", "(é|ab){0,40}"])
@pytest.mark.parametrize("tname", ["gpt2", "llama2"])
def test_split_masks_equal_brute_force_of_the_unsplit_grammar(regex, tname, chunk):
    """The split grammar's masks against the reference recogniser of the original, one
    lexeme (byte-level BPE and SentencePiece with byte fallback)."""
    vocab = vocabulary(tname)
    grammar = gramgen.Grammar.from_regex(regex)
    cg = gramgen.compile(grammar, vocab, max_dfa_states=12)
    assert len(cg.ir.rules) > 1
    ref = ReferenceGrammar(grammar.ir)
    rng = random.Random(f"{regex}/{tname}/{chunk}")
    for walk in range(2):
        m, chart = cg.matcher(), ref.initial()
        for step in range(14):
            got = set(np.flatnonzero(m.mask()).tolist())
            expected = brute_force_mask(ref, chart, vocab)
            assert got == expected, (regex, m.text_bytes(), sorted(got ^ expected)[:5])
            choices = sorted(t for t in got if t not in vocab.eos_token_ids)
            if not choices:
                break
            t = rng.choice(choices)
            m.advance(t)
            for b in vocab.token_bytes(t):
                chart = ref.feed(chart, b)


GBNF_ROWS = 'root ::= "[" row{150} "]"\nrow ::= "(" cell{130} ")" sep\ncell ::= [0-9]\nsep ::= ","\n'


@pytest.mark.parametrize("name, grammar, member, non_members", [
    ("regex (ab){2,50000}c", lambda: gramgen.Grammar.from_regex("(ab){2,50000}c"),
     "ab" * 50000 + "c", ["abc", "ab" * 777 + "ac", "ab" * 9000]),
    ("lark terminal", lambda: gramgen.Grammar.from_lark("start: X\nX: /(ab){2,50000}c/"),
     "ab" * 4321 + "c", ["abc", "ab" * 4321 + "cc"]),
    ("gbnf {0,2048}", lambda: gramgen.Grammar.from_gbnf("root ::= [a-zа-я一-龥]{0,2048}"),
     "я一b" * 682 + "xy", ["я一b" * 683, "A"]),
    ("gbnf {0,1900}", lambda: gramgen.Grammar.from_gbnf("root ::= [a-zа-я一-龥]{0,1900}"),
     "z" * 1900, ["z" * 1901]),
    ("gbnf rows of cells", lambda: gramgen.Grammar.from_gbnf(GBNF_ROWS),
     "[" + ("(" + "7" * 130 + "),") * 150 + "]", ["[" + ("(" + "7" * 130 + "),") * 149 + "]",
                                                  "[" + ("(" + "7" * 129 + "),") * 150 + "]"]),
])
def test_the_size_cliffs_of_other_libraries_suites(name, grammar, member, non_members):
    """Grammars that failed on limits (GBNF repeat limit, DFA state limit, expanded size):
    they compile, accept and reject the right texts, and masks agree with brute force."""
    vocab = vocabulary("gpt2")
    cg = gramgen.compile(grammar(), vocab)
    assert accepts(cg, member)
    for text in non_members:
        assert not accepts(cg, text), text[:40]
    gramgen.testing.assert_masks_exact(cg, steps=6)


def test_counted_repeat_costs_log_rules_and_items():
    """(ab){2,10^9}c: rules and lexemes grow with log n, and each Earley set stays small
    along a long text (the count is never unrolled into items or states)."""
    for count in (50_000, 10 ** 9):
        cg = gramgen.compile(gramgen.Grammar.from_regex(f"(ab){{2,{count}}}c"), BYTES)
        assert len(cg.ir.rules) <= 4 * count.bit_length()
        assert len(cg.ir.lexemes) <= 8
        assert sum(d.n_states for d in cg.tables.lex_dfas) <= 4 * split.CHUNK
    m = cg.matcher()
    m.advance_text(b"ab" * 3000)
    assert max(len(s.items) for s in m._chart) <= 4 * count.bit_length()
    m.advance_text(b"c")
    assert m.is_accepting()


IGNORING = [
    'start: X (";" X)*\nX: /(ab){2,40}c/\n%ignore " "',
    'start: X (";" X)*\nX: /(ab){2,40}/\n%ignore " "',  # X may end where it may go on
    'start: item+\nitem: WORD | NUM\nWORD: /[a-z]{3,30}/\nNUM: /[0-9]{1,20}(\\.[0-9]{2,25})?/\n%ignore /[ \\n]+/',
]


@pytest.mark.parametrize("source", IGNORING)
def test_ignored_lexemes_never_come_inside_a_split_lexeme(source):
    """Lark's %ignore may come between terminals, not inside one split into rules: the
    language of the split grammar is the original one (ignore expanded by the reference)."""
    grammar = gramgen.Grammar.from_lark(source)
    small = gramgen.compile(grammar, BYTES, max_dfa_states=9)
    assert len(small.ir.rules) > len(grammar.ir.rules), "the state limit should have split a terminal"
    ref = ReferenceGrammar(grammar.ir)
    rng = random.Random(source)
    texts = []
    for _ in range(60):  # walks of the split grammar, then a space put at every position
        m = small.matcher()
        out = bytearray()
        for _ in range(rng.randint(1, 30)):
            allowed = [b for b in range(256) if m.check(b)]
            if not allowed:
                break
            b = rng.choice(allowed)
            m.advance(b)
            out.append(b)
        texts.append(bytes(out))
        texts.extend(out[:i] + b" " + out[i:] for i in range(len(out) + 1))
    texts.extend(bytes(rng.choice(b"ab c;xyz09. \n") for _ in range(rng.randint(0, 20))) for _ in range(300))
    for data in texts:
        chart = ref.run(data)
        expected = chart is not None and ref.accepting(chart)
        assert accepts_bytes(small, data) == expected, (source, data)


@pytest.mark.parametrize("tname", ["llama2"])
def test_split_masks_with_ignored_lexemes_equal_brute_force(tname):
    vocab = vocabulary(tname)
    grammar = gramgen.Grammar.from_lark(IGNORING[2])
    cg = gramgen.compile(grammar, vocab, max_dfa_states=9)
    ref = ReferenceGrammar(grammar.ir)
    rng = random.Random(tname)
    m, chart = cg.matcher(), ref.initial()
    for step in range(8):
        got = set(np.flatnonzero(m.mask()).tolist())
        expected = brute_force_mask(ref, chart, vocab)
        assert got == expected, (m.text_bytes(), sorted(got ^ expected)[:5])
        choices = sorted(t for t in got if t not in vocab.eos_token_ids)
        t = rng.choice(choices)
        m.advance(t)
        for b in vocab.token_bytes(t):
            chart = ref.feed(chart, b)


def test_an_ignored_lexeme_too_big_for_one_dfa_is_an_error():
    g = gramgen.Grammar.from_lark('start: "x"+\n%ignore /(ab){2,50000}c/')
    with pytest.raises(gramgen.CompileLimitError, match=r"max_states=10000.*ignored lexeme"):
        gramgen.compile(g, BYTES)


def test_a_single_character_class_cannot_be_split():
    g = gramgen.Grammar.from_regex("[\u0100-\U0010ffff]")
    with pytest.raises(gramgen.CompileLimitError, match="single character class"):
        gramgen.compile(g, BYTES, max_dfa_states=2)


def test_gbnf_counts_cost_log_rules():
    g = gramgen.Grammar.from_gbnf('root ::= item{3,100000}\nitem ::= "(" root? ")"')
    assert len(g.ir.rules) <= 120  # recursive, so the count stays rules: O(log n) of them
    cg = gramgen.compile(g, BYTES)
    assert accepts(cg, "()()()") and accepts(cg, "()()(()()())") and accepts(cg, "()" * 1000)
    assert not accepts(cg, "()()") and not accepts(cg, "()()(())")
    small = gramgen.compile(gramgen.Grammar.from_gbnf('root ::= item{3,999}\nitem ::= "(" root? ")"'), BYTES)
    assert accepts(small, "()" * 999) and not accepts(small, "()" * 1000)


def test_infilling_keeps_ignored_lexemes_out_of_split_lexemes():
    """The lattice parser (Infiller) resumes no parse inside a split lexeme after ignored
    text either: feasibility of texts with holes equals trying every filling."""
    grammar = gramgen.Grammar.from_lark(IGNORING[1])
    cg = gramgen.compile(grammar, BYTES, max_dfa_states=9)
    infiller = gramgen.Infiller(cg)
    ref = ReferenceGrammar(grammar.ir)
    alphabet = b"abc; "
    fillings = [bytes(p) for n in range(3) for p in itertools.product(alphabet, repeat=n)]

    def viable_word(data: bytes) -> bool:
        chart = ref.run(data)
        return chart is not None and ref.accepting(chart)

    rng = random.Random(7)
    seen_feasible = seen_infeasible = 0
    for _ in range(120):
        text = bytes(rng.choice(alphabet) for _ in range(rng.randint(4, 16)))
        if rng.random() < 0.6:
            text = b"ab" * rng.randint(1, 4) + bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 3))) \
                + b"abab" + b"c" * rng.randint(0, 1)
        i = rng.randint(0, len(text))
        j = rng.randint(i, len(text))
        left, right = text[:i], text[j:]
        expected = any(viable_word(left + f + right) for f in fillings)
        got = infiller.check([left, gramgen.Hole(max_bytes=2), right]).feasible
        assert got == expected, (left, right)
        seen_feasible += expected
        seen_infeasible += not expected
    assert seen_feasible >= 10 and seen_infeasible >= 10
