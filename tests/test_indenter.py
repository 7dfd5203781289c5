"""lark's python.lark with its indenter (``Grammar.builtin("python")``, IndentedMatcher).

Oracles: Python's own parser (``ast.parse``) and lark's LALR parser with its
``PythonIndenter`` for which texts are in the language; trying every token one by one
(scanner + chart, no grouping) for the masks; a fresh advance for a Document's updates.
"""

from __future__ import annotations

import ast
import functools
import random
from pathlib import Path

import numpy as np
import pytest

import gramgen
from conftest import SCALE, hf_tokenizer, vocabulary
from gramgen.grammar.lark import DEDENT_MARKER, INDENT_MARKER
from gramgen.runtime.indenter import INITIAL, IndentedMatcher, scan

DATA = Path(__file__).resolve().parent / "data" / "python"
FILES = sorted(DATA.glob("*.py"))


@functools.cache
def compiled(name: str = "smollm2"):
    return gramgen.compile(gramgen.Grammar.builtin("python"), vocabulary(name))


@functools.cache
def lark_parser():
    from lark import Lark
    from lark.indenter import PythonIndenter

    return Lark.open_from_package("lark", "python.lark", ["grammars"], parser="lalr",
                                  postlex=PythonIndenter(), start="file_input")


def accepts(text: str) -> bool:
    m = compiled().matcher()
    try:
        m.advance_text(text)
    except gramgen.TextRejected:
        return False
    return m.is_accepting()


def lark_accepts(text: str) -> bool:
    try:
        lark_parser().parse(text if text.endswith("\n") else text + "\n")
        return True
    except Exception:
        return False


def python_accepts(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


VALID = [
    "x = 1\n", "x = 1", "pass", "def f(x):\n    return x\n",
    "def f(x):\n  if x:\n        return (1,\n 2)\n  return 3\n",          # any width per block
    'x = """a\n  b"""\ny = 2\n', "if x:\n\tpass\nelse:\n        pass\n",  # a tab is 8
    "x = [1,  # c\n 2]\n", "x = 1 + \\\n  2\n", "f(\n)\n",
    "class A:\n    # c\n\n    def f(self): pass\n# end",
    "for i in range(3):\n    if i:\n        while i:\n            with a as b:\n                try:\n"
    "                    if c:\n                        if d:\n                            x = 1\n"
    "                except E:\n                    pass\n",            # 7 levels deep
    "return(x)\n", "y = f(x)and z\n", "if(x):\n  pass\n",               # the old subset's gaps
    "s = 'a' \"b\" '''c\nd''' r'\\''\n", "d = {1: [2, (3,\n4)]}\n",
    "match p:\n    case [a, b]:\n        pass\n", "async def f():\n    await g()\n",
    "x = 1\n\n\n   \n# only a comment, indented oddly\n        # another\ny = 2\n",
    'x = ""\ny = """"a" """\n',
    'x = "a\\\n  b"\n',                   # a backslash-newline inside a string (lark: no)
]
INVALID = [
    "def f(x):\n    return x\n  y = 2\n",   # dedent to no level
    "x = 1\n    y = 2\n",                    # unexpected indent
    "x = (1\n", "x = 1)\n", "if x:\npass\n", "def f(:\n    pass\n",
    "x = 'abc\n'\n",                         # a newline inside a one-line string
    "if x:\n    pass\n  else:\n    pass\n",
    "x = 1 \\ y\n", "class A:\n", "x = [1,\n2\ny = 3\n",
    "  x = 1\n",                             # an indented first line (lark's indenter: yes)
]


@pytest.mark.parametrize("text", VALID)
def test_valid_python_is_accepted(text):
    assert python_accepts(text)
    assert accepts(text)


@pytest.mark.parametrize("text", INVALID)
def test_invalid_python_is_rejected(text):
    assert not python_accepts(text)
    assert not accepts(text)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_sample_files_parse(path):
    text = path.read_text()
    assert python_accepts(text) and lark_accepts(text)
    assert accepts(text)


def _mutants(text: str, rng: random.Random, n: int):
    """Texts one edit away from ``text``: a character deleted, duplicated or replaced, or
    a line's indentation changed."""
    lines = text.split("\n")
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 3:
            i = rng.randrange(len(lines))
            changed = list(lines)
            changed[i] = " " * rng.choice([1, 2, 3, 5, 8]) + changed[i]
            yield "\n".join(changed)
            continue
        i = rng.randrange(len(text))
        if kind == 0:
            yield text[:i] + text[i + 1:]
        elif kind == 1:
            yield text[:i] + text[i] + text[i:]
        else:
            yield text[:i] + rng.choice("():,.=[]{}'\"#\\ \n\tx1") + text[i + 1:]


def test_mutated_files_agree_with_lark():
    """On single-edit mutants of the sample files, gramgen accepts exactly what lark's own
    LALR parser with its PythonIndenter accepts, and rejects every mutant both Python and
    lark reject."""
    rng = random.Random(7)
    checked = rejected = 0
    for path in FILES:
        for text in _mutants(path.read_text(), rng, max(4, int(6 * SCALE))):
            ours, lark, python = accepts(text), lark_accepts(text), python_accepts(text)
            if not lark and not python:
                assert not ours, text
                rejected += 1
            elif python:
                assert ours, text
            else:   # only lark accepts: lark's checks Python makes after parsing, or an
                # indented first line, which gramgen refuses as Python does
                assert ours == (lark and not text[:1].isspace()), text
            checked += 1
    assert checked >= 50 and rejected >= 20


def test_scanner_emits_the_indenters_markers():
    layout, out = scan(INITIAL, b"if x:\n    y\n        z\n    w\n")
    assert out == b"if x:\n    \xfey\n        \xfez\n    \xffw\n"
    assert layout[3] == (0, 4)
    found = scan(INITIAL, b"if x:\n    if y:\n        z\nw")
    assert found is not None
    layout, out = found
    assert out.count(bytes([INDENT_MARKER])) == 2 and out.count(bytes([DEDENT_MARKER])) == 2
    assert out.endswith(b"\n" + bytes([DEDENT_MARKER]) * 2 + b"w")
    assert layout[3] == (0,)
    assert scan(INITIAL, b"if x:\n    y\n  z") is None          # dedent to no level
    assert scan(INITIAL, b"x)") is None                         # a bracket too many
    layout, out = scan(INITIAL, b"f(a,\n  # c\n b)")
    assert b"\n" not in out and out.count(b"\xfd") == 2         # bracket newlines are ignored
    assert scan(INITIAL, b"x = '\xfd'") is None                  # never a marker in the text


def test_rejection_names_line_and_column():
    m = compiled().matcher()
    with pytest.raises(gramgen.TextRejected) as info:
        m.advance_text("def f(x):\n    return x\n  y = 2\n")
    assert (info.value.line, info.value.column) == (3, 3)
    assert len(m._chart) == 1   # unchanged


def _walk_states(name: str, text: str, picks: int, seed: int):
    """(matcher, next token) at ``picks`` random token positions of ``text``."""
    tok = hf_tokenizer(name)
    ids = tok.encode(text, add_special_tokens=False)
    rng = np.random.default_rng(seed)
    where = set(rng.choice(len(ids), size=min(picks, len(ids)), replace=False).tolist())
    m = compiled(name).matcher()
    assert isinstance(m, IndentedMatcher)
    for i, t in enumerate(ids):
        if i in where:
            yield m, t
        m.advance(t)
    assert m.is_accepting()


# (a comment first: a SentencePiece tokenizer spells the text's first word with a leading
# space, which would indent the first line, which Python and this grammar refuse)
CODE = "# a stack, then a class\n" + (DATA / "02_stack.py").read_text() + "\n\nclass Box:\n    def f(self, a=(1,\n" \
    "                       2)):\n        if a:  # c\n            return [\n                a]\n" \
    "        return '''x\n  y'''\n"


@pytest.mark.parametrize("name", ["gpt2", "llama2", "deepseek-coder"])
def test_mask_equals_trying_every_token(name):
    """Every token of a byte-level BPE and a SentencePiece vocabulary, at random states of
    real code (line starts, inside brackets and strings, after dedents): the grouped mask
    equals the scanner and chart run on each token alone."""
    vocab = vocabulary(name)
    eos = set(vocab.eos_token_ids)
    for m, nxt in _walk_states(name, CODE, max(2, int(2 * SCALE)), seed=len(name)):
        mask = m.mask()
        assert mask[nxt]
        for t in range(vocab.size):
            if t in eos:
                assert mask[t] == m.is_accepting()
            elif t in vocab.special_ids:
                assert not mask[t]
            else:
                assert mask[t] == m._try(vocab.token_bytes(t)), (t, vocab.token_bytes(t))


def test_eos_only_where_the_file_can_end():
    m = compiled().matcher()
    m.advance_text("def f():\n    return (1")
    assert not m.is_accepting()
    close, = hf_tokenizer("smollm2").encode(")", add_special_tokens=False)
    m.advance(close)
    assert m.is_accepting()   # an implicit line end, then the dedent


def test_fork_rollback_and_validate():
    tok = hf_tokenizer("smollm2")
    ids = tok.encode("def f(x):\n    return x\n", add_special_tokens=False)
    m = compiled().matcher()
    assert m.validate(ids) == len(ids)
    fork = m.fork()
    fork.advance_many(ids)
    assert fork.is_accepting() and m.is_accepting()   # (an empty file is a Python file)
    assert m.tokens == [] and fork.layout != m.layout
    fork.rollback(len(ids))
    assert fork.layout == m.layout and np.array_equal(fork.mask(), m.mask())
    bad = tok.encode("def f(x):\n    return x\n  y", add_special_tokens=False)
    assert m.validate(bad) < len(bad)


def test_document_advances_only_over_what_changed():
    cg = compiled()
    text = "".join(p.read_text() for p in FILES[:4])
    doc = gramgen.Document(cg)
    doc.update(text)
    first = doc.bytes_advanced
    assert first == len(text.encode())
    lines = text.split("\n")
    k = len(lines) - 5
    edited = "\n".join(lines[:k] + ["x = compute(1)"] + lines[k:])
    m = doc.update(edited + "y = x.")
    assert doc.bytes_advanced - first < 400   # from the edited line on, not the whole file
    fresh = cg.matcher()
    fresh.advance_text(edited + "y = x.")
    assert np.array_equal(m.mask(), fresh.mask())
    with pytest.raises(gramgen.TextRejected) as info:
        doc.update(edited + "y = x.)")
    assert info.value.line == edited.count("\n") + 1
    assert doc.text == (edited + "y = x.").encode()   # kept up to the last place it knew
    with pytest.raises(gramgen.TextRejected):
        doc.update(edited + "y = x.)\nz = 1\n")
    before = doc.bytes_advanced
    assert np.array_equal(doc.update(edited + "y = x.").mask(), fresh.mask())   # still usable
    assert doc.bytes_advanced - before <= len("y = x.")


def test_matcher_after_reuses_documents():
    cg = compiled()
    text = (DATA / "09_graph.py").read_text()
    a = cg.matcher_after(text + "g = Graph(")
    b = cg.matcher_after(text + "g = Graph(")
    assert np.array_equal(a.mask(), b.mask())
    with pytest.raises(gramgen.TextRejected):
        cg.matcher_after(text + "  )")


def _token_layout_by_loop(vocab):
    """The per-token layout facts, token by token (the reference for _TokenLayout)."""
    from gramgen.runtime import indenter as I

    n = vocab.size
    facts = (np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, np.int64), np.zeros(n, np.int8))
    for t in range(n):
        data = vocab.token_bytes(t)
        if t in vocab.special_ids or not data:
            continue
        facts[0][t] = b"\n" in data or b"\r" in data
        facts[1][t] = max(data) >= I.BRACKET_NEWLINE
        i, w = 0, 0
        while i < len(data) and data[i] in (32, 9):
            w += 1 if data[i] == 32 else I.TAB_WIDTH
            i += 1
        facts[2][t] = w
        facts[3][t] = 0 if i == len(data) else (1 if data[i] in (35, 10, 13) else 2)
    return facts


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama2", None])
def test_token_layout_facts_equal_the_per_token_loop(tokenizer):
    from gramgen.runtime.indenter import _TokenLayout

    if tokenizer is None:   # tabs, markers, blank-line starts, empty and special tokens
        tokens = [b"  x", b"\t\t#c", b" \n", b"\r\n  ", b"\xfe", b"a\xfd", b"", b"    ", b"\t", b"#", b"ab",
                  b" \t \x00", b"\n\n\n", b"</s>"]
        vocab = gramgen.Vocabulary(tokens, eos_token_ids=[13], special_ids=[13])
    else:
        from conftest import vocabulary

        vocab = vocabulary(tokenizer)
    facts = _TokenLayout(vocab)
    want = _token_layout_by_loop(vocab)
    for got, expected in zip((facts.has_line_end, facts.has_marker, facts.lead_width, facts.lead_kind), want):
        assert (got == expected).all()
