"""The grammars shipped with gramgen (``Grammar.builtin``) accept their sample texts and reject invalid ones.

Everything here is checked with lark itself (Earley + dynamic lexer), which is
the reference for what a shipped grammar means.  Where a second opinion exists
it is used too, so that a wrong grammar *and* a wrong sample cannot cancel out:
JSON samples must also load with :func:`json.loads`, Python samples must parse
with :func:`ast.parse`, and every "invalid" text must also be rejected by those.
"""

from __future__ import annotations

import ast
import functools
import json
import random
import warnings
from pathlib import Path

import pytest
from lark import Lark
from lark.exceptions import UnexpectedInput

from gramgen.grammar.sources import builtin_grammar_text

DATA = Path(__file__).resolve().parent / "data"

JSON_FILES = sorted((DATA / "json").glob("*.json"))
PYTHON_FILES = sorted((DATA / "python").glob("*.py"))
SQL_FILES = sorted((DATA / "sql").glob("*.sql"))


@functools.lru_cache(maxsize=None)
def parser(name: str) -> Lark:
    text = builtin_grammar_text(name)
    return Lark(text, parser="earley", lexer="dynamic")


def accepts(name: str, text: str) -> bool:
    try:
        parser(name).parse(text)
    except UnexpectedInput:
        return False
    return True


def strict_json_loads(text: str):
    """json.loads without Python's extensions (NaN, Infinity, -Infinity)."""
    def no_constants(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=no_constants)


def python_parse(text: str):
    """ast.parse, without the warnings some valid literals (e.g. '\\d') raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text)


def read(path: Path) -> str:
    # newline="" keeps \r\n exactly as written in the file
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def test_sample_sets_present():
    assert len(JSON_FILES) >= 20
    assert len(PYTHON_FILES) >= 12
    assert len(SQL_FILES) >= 15


@pytest.mark.parametrize("name", ["json", "python_subset", "sql"])
def test_grammar_loads_with_start_rule(name):
    p = parser(name)
    assert "start" in {r.origin.name for r in p.rules}


# ---------------------------------------------------------------------- JSON


@pytest.mark.parametrize("path", JSON_FILES, ids=lambda p: p.name)
def test_json_sample_parses(path):
    text = read(path)
    strict_json_loads(text)  # the sample really is JSON
    parser("json").parse(text)


def _random_string(rng: random.Random) -> str:
    pool = ("abcxyzABC019 _-/\\\"'" "\t\n\r\b\f\x00\x01\x1f\x7f"
            "éü中文Жπ€\u2028\U0001F600\U0001D11E")
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))


def _random_number(rng: random.Random):
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randint(-10, 10)
    if kind == 1:
        return rng.randint(-(10**25), 10**25)
    if kind == 2:
        return rng.uniform(-1000, 1000)
    if kind == 3:
        return rng.choice([0.0, -0.0, 1e-7, 2.5e-300, 6.02e23, -1.5e308, 123456789.0])
    return rng.random() * 10 ** rng.randint(-20, 20)


def _random_value(rng: random.Random, depth: int):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return _random_string(rng)
    if kind == 1:
        return _random_number(rng)
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind == 4:
        return rng.randint(0, 999)
    if kind in (5, 6):
        return {_random_string(rng): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def _random_documents():
    rng = random.Random(20240501)
    docs = []
    for i in range(12):
        value = _random_value(rng, 0) if i % 3 else {"k": _random_value(rng, 1), "l": [_random_value(rng, 2)]}
        docs.append(json.dumps(value))
        docs.append(json.dumps(value, indent=2, ensure_ascii=False))
        docs.append(json.dumps(value, separators=(",", ":"), ensure_ascii=bool(i % 2)))
    return docs


@pytest.mark.parametrize("text", _random_documents())
def test_json_random_document_parses(text):
    parser("json").parse(text)


JSON_INVALID = [
    '[1, 2,]',                 # trailing comma in array
    '{"a": 1,}',               # trailing comma in object
    '01',                      # leading zero
    '[-01]',
    '"line\nbreak"',           # raw control character in a string
    '"tab\there"',
    '"nul\x00"',
    "{'a': 1}",                # single quotes
    '{a: 1}',                  # unquoted key
    '{"a" 1}',                 # missing colon
    '[1 2]',                   # missing comma
    '1.',                      # fraction without digits
    '.5',
    '+1',
    '1e',
    '0x10',
    '"\\x41"',                 # invalid escape
    '"\\u12"',                 # short unicode escape
    'True',                    # Python spelling
    'nul',
    'NaN',
    '-Infinity',
    '[1] [2]',                 # two values
    '',
    '   ',
    '{"a": [1, 2}',            # mismatched brackets
    '"unterminated',
]


@pytest.mark.parametrize("text", JSON_INVALID)
def test_json_invalid_rejected(text):
    with pytest.raises(ValueError):
        strict_json_loads(text)
    assert not accepts("json", text)


# -------------------------------------------------------------------- Python


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda p: p.name)
def test_python_sample_parses(path):
    text = read(path)
    python_parse(text)  # the sample really is Python
    parser("python_subset").parse(text)


PYTHON_VALID = [
    "x = 1",
    "pass\n",
    "x = 1  # comment",
    "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\nx = 1\n\n\n",
    "x = 1\r\ny = 2\r\n",
    "if x: pass\nelif y: pass\nelse: pass\n",
    "x = 1; y = 2;\n",
    "def f(a, /, b, *, c=1, **k): pass\n",
    "def f(a, b=1, /, c=2, *args, d, e=3, **kw) -> None: ...\n",
    "def f(\n    a,\n    b: int = 2,\n):\n    return a\n",
    "f = lambda: 0\ng = lambda *a, k=1, **kw: (a, k, kw)\n",
    "@decorator\nclass A(B, metaclass=M):\n    '''Doc.'''\n\n    x: int = 0\n\n    def m(self): return self.x\n",
    "@d(1)\n@e.f\nasync def f():\n    async with a as b:\n        await g()\n",
    "def g():\n    x = yield\n    y = yield from z\n    return\n",
    "a = b = c = 0\na[i] += 1\n(a, b), c = x\n[a, *b] = c\nself.x: int = 0\n",
    "x = {**a, 'b': 1}\ny = {1, 2}\nz = {k: v for k, v in d}\ne = {}\n",
    "print(*args, sep='', end=\"\\n\", **kw)\n",
    "f(a, *b, c=1, *d, **e, g=2)\nf(x for x in y)\nf(\n    a,\n    b=2,\n)\n",
    "x = '\\N{BULLET} \\x41 \\u00e9 \\U0001F600 \\d' + b'\\xff\\u'\n",
    "x = a if b else c if d else e\n",
    "x = a not in b and c is not d or not e\n",
    "x = 0 < a <= b == c != d > e >= f\n",
    "x = [i for i in range(10) if i % 2 if i > 3 for j in k]\n",
    "try:\n    pass\nfinally:\n    pass\n",
    "try:\n    a\nexcept (A, B) as e:\n    b\nexcept:\n    c\nelse:\n    d\nfinally:\n    e\n",
    "with a as b, c as (d, e):\n    pass\n",
    "from . import x\nfrom ..a import b\nfrom .c.d import (e as f,\n    g,)\nfrom x import *\n",
    "import a.b as c, d\n",
    "global a, b\n",
    "del a[0], b.c\n",
    "assert x, 'message'\n",
    "raise\n",
    "raise E('x') from e\n",
    "x = '''a\n'b'\n''c'''\n",
    'x = """"quoted" inside"""\n',
    "x = r'\\'' + b'\\x00' + f'{a!r:>10}' + Rb'x' + u'y'\n",
    "x = 'implicit' \"concatenation\"\n",
    "x = 0x_ff + 0o7 + 0b1 + 1_0.5e-3j + 0.0 + 00 + 1. + .5 + 1e10 + 3J\n",
    "x = a.b.c(d)[e:f:g, ::, ...]\n",
    "x = -1 ** -2 * ~3 @ m // 4 % 5 << 6 >> 7 & 8 ^ 9 | 10\n",
    "while (n := n - 1) > 0:\n    pass\nelse:\n    pass\n",
    "x = 1 + \\\n    2\n",
    "x = (1 +\n  # a comment inside brackets\n  2)\n",
    "for x in a, b:\n    continue\nelse:\n    pass\n",
    "def f():\n    # a comment line first\n    return 1\n# a comment at the end, no newline",
    "match = case = type = _ = 1\n",
    "if a:\n    if b:\n        if c:\n            if d:\n                if e:\n                    if f:\n"
    "                        g = 1\n",
]


@pytest.mark.parametrize("text", PYTHON_VALID)
def test_python_snippet_accepted(text):
    python_parse(text)
    assert accepts("python_subset", text)


PYTHON_INVALID = [
    "def f(:\n    pass\n",
    "def f():\nreturn 1\n",                # body not indented
    "x = 1\n    y = 2\n",                  # unexpected indent
    "if x:\n        a\n    b\n",           # dedent to a level that never existed
    "if x\n    pass\n",                    # missing colon
    "def f()\n    pass\n",
    "else:\n    pass\n",                   # else without if
    "try:\n    pass\n",                    # try without except/finally
    "x = 1 +\n",
    "x = = 1\n",
    "x = 1 2\n",
    "f(a b)\n",
    "x = 1 if y\n",                        # conditional without else
    "x = [1, 2\n",                         # unclosed bracket
    "x = (1,\n",
    "print(\"unterminated)\n",
    "x = '''abc\n",
    "x = 'abc\ndef'\n",                    # newline inside a short string
    "if = 3\n",                            # keyword as a name
    "True = 1\n",
    "1 = x\n",
    "f() = 1\n",
    "a, b += 1\n",
    "import\n",
    "class :\n    pass\n",
    "for x in :\n    pass\n",
    "def f(a=1, b):\n    pass\n",          # non-default after default
    "def f(*):\n    pass\n",               # bare * without keyword-only parameters
    "lambda x: \n",
    "x = 007\n",
    "x = 1__0\n",
    "x = 1.real\n",
    "x = 1 # comment\n  y = 2\n",
    "x = b'bytes' 'text'\n",             # bytes and str literals mixed
    "x = 'bad \\x4 escape'\n",
    "x = '\\U00110000'\n",               # escape beyond U+10FFFF
    "x = b'caf\u00e9'\n",                # non-ASCII in bytes
    "f(a=1, b)\n",                        # positional after keyword argument
    "f(**k, *a)\n",
    "f(a, x for x in y)\n",               # unparenthesised generator, not alone
]


@pytest.mark.parametrize("text", PYTHON_INVALID)
def test_python_invalid_rejected(text):
    with pytest.raises(SyntaxError):
        python_parse(text)
    assert not accepts("python_subset", text)


# Valid Python that python.lark deliberately leaves out (see its header).
PYTHON_OUTSIDE_SUBSET = [
    "if x:\n      y = 1\n",                # indentation other than 4 spaces
    "if x:\n\ty = 1\n",                    # tab indentation
    "def f():\n    return(1)\n",           # keyword directly followed by a bracket
    "x = f(y)and z\n",                     # infix keyword directly after a bracket
    "x = 'a''b'\n",                        # adjacent strings without a space
    "match x:\n    case 1:\n        pass\n",
    "if a:\n    if b:\n        if c:\n            if d:\n                if e:\n"
    "                    if f:\n                        if g:\n"
    "                            h = 1\n",  # nesting deeper than 6 blocks
]


@pytest.mark.parametrize("text", PYTHON_OUTSIDE_SUBSET)
def test_python_outside_subset_rejected(text):
    python_parse(text)
    assert not accepts("python_subset", text)


# ----------------------------------------------------------------------- SQL


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: p.name)
def test_sql_sample_parses(path):
    parser("sql").parse(read(path))


SQL_VALID = [
    "select 1",
    "SeLeCt A.* FrOm A",
    "SELECT COUNT(*), count(DISTINCT x), SUM(a + b) FROM t GROUP BY c;",
    "SELECT a FROM t WHERE b IS NOT NULL AND c NOT BETWEEN 1 AND 2",
    "SELECT a x, b AS y, c \"z\" FROM s.t u",
    "SELECT * FROM a JOIN b USING (id) LEFT JOIN c ON c.k = b.k",
    "SELECT 'it''s' AS s, -1.5e3 AS n, TRUE, FALSE, NULL",
]


@pytest.mark.parametrize("text", SQL_VALID)
def test_sql_snippet_accepted(text):
    assert accepts("sql", text)


SQL_INVALID = [
    "SELECT FROM t",
    "SELECT * FROM",
    "SELECT a, FROM t",
    "SELECT * FROM t WHERE",
    "SELECT * FROM t WHERE a =",
    "SELECT * FROM t ORDER a",
    "SELECT * FROM t GROUP a",
    "SELECT * FROM t LIMIT",
    "SELECT 'unterminated FROM t",
    "SELECT select FROM t",                # keyword as a column name
    "SELECT a FROM t t2 t3",
    "SELECT a b c FROM t",
    "SELECT * FROM t JOIN u",              # join without ON / USING
    "SELECT COUNT(* FROM t",
    "SELECT * FROM t WHERE a IN ()",
    "SELECT * FROM t WHERE a BETWEEN 1",
    "SELECT * FROM t UNION",
    "FROM t SELECT *",
    "SELECT * FROM t;;",
]


@pytest.mark.parametrize("text", SQL_INVALID)
def test_sql_invalid_rejected(text):
    assert not accepts("sql", text)
