"""Where triggers fire (PythonScanner, against Python's own tokenize), and one monitor's
state over a sequence: ``mask()`` equals ``allows()`` token by token on real vocabularies,
in documents that end idle, armed, inside identifiers, strings, calls, imports and inside a
UTF-8 character."""

from __future__ import annotations

import io
import keyword
import random
import token as tokens
import tokenize
from pathlib import Path

import numpy as np
import pytest
from conftest import vocabulary
from test_monitors import DictMonitor, described, fires

from gramgen.monitors import MonitorState, PythonScanner, Session
from gramgen.monitors.names import index_for

# -- triggers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ['"a.b"', "'a.b'", "# x.y\n", "x = 1.5", "y = 1.", '"""a.\nb"""',
                                  "x = r'a.b'", "f'a.b{c}'", "from . import", "x[...]", "1e5"])
def test_no_member_trigger_inside_strings_comments_or_numbers(text):
    assert [k for _, k in fires(text) if k.name == "member"] == []


@pytest.mark.parametrize("text, at", [("a.b", [1]), ("f(x).y", [4]), ("a[0].y", [4]),
                                      ("'ab'.upper", [4]), ("x = 1.5.real", [7]),
                                      ("(a\n  .b)", [5]), ("a.b.c", [1, 3]), ("{}.keys", [2]),
                                      ("0x1f.real", [4])])
def test_member_trigger_after_an_expression(text, at):
    assert [i for i, k in fires(text) if k.name == "member"] == at


def test_import_and_keyword_triggers():
    assert described("from os import path, sep") == [(14, "import/optional"), (19, "import/optional")]
    assert described("from os import (a,\n b)") == [(14, "import/optional"), (15, "import/optional"),
                                                 (17, "import/optional")]
    assert described("import os.path") == [(9, "import/member")]
    assert described("from xml.dom import") == [(8, "import/member")]
    assert described("f(a, b=1)") == [(1, "keyword/keyword"), (3, "keyword/keyword")]
    assert described("obj.m(x)") == [(3, "member/member"), (5, "keyword/keyword")]
    # definitions, subscripts and plain parentheses are not calls
    assert described("def f(a, b=1): pass") == []
    assert described("class A(B, metaclass=M): pass") == []
    assert described("x = (a, b)\ny = [a, b]") == []
    assert described("yield from x") == []


def _fstring_fires(text: str) -> list[tuple[int, str]]:
    """:func:`fires` as (index, name), the scanner fed one character at a time from a copy
    made at each step (it must carry everything it needs)."""
    scanner, out = PythonScanner(), []
    for i, char in enumerate(text):
        scanner = scanner.copy()
        kind = scanner.feed(char)
        if kind is not None:
            out.append((i, kind.name))
    return out


@pytest.mark.parametrize("text, at", [
    ('s = 1\nx = f"{s.', [(14, "member")]),                         # the evaluation's repro
    ('f"{s.__class__.name}"', [(4, "member"), (14, "member")]),
    ("f'{a.b}'.upper", [(4, "member"), (8, "member")]),             # after the f-string too
    ('F"{d[0].x(1, k=2)}"', [(7, "member"), (9, "keyword"), (11, "keyword")]),
    ('rf"{x.y!r:>10}.z"', [(5, "member")]),                         # a conversion, a spec
    ('fR"{x:{w.a}.{p}f} {y.b}"', [(8, "member"), (20, "member")]),  # fields nested in a spec
    ('f"{{a.b}} {{{c.d}}}"', [(14, "member")]),                     # "{{" / "}}" are braces
    ('f"""x.\n{ a.b }\n.c""".d', [(10, "member"), (20, "member")]),  # triple, over lines
    ('f"{a=}.{b.c}"', [(9, "member")]),                             # self-documenting "="
    ('f"{ {1: 2}[k.v] }"', [(12, "member")]),                       # ":" in a dict, not a spec
    ("f\"{'.'.join(a.b)}\"", [(6, "member"), (11, "keyword"), (13, "member")]),
    ("f\"{f'{a.b}'.c}\"", [(7, "member"), (11, "member")]),         # nested f-strings (3.12)
    ('f"\\N{FULL STOP}.{a.b}"', [(18, "member")]),                  # a character's name
    ('rf"\\N{a.b}"', [(7, "member")]),                               # raw: "\N" then a field
    ('f"{x:.2f}" + y.z', [(14, "member")]),
    ('f"{x:\'.a"\nq.r', [(11, "member")]),                          # the quote ends the spec
    ('f"{lambda: a.b}"\nc.d', [(18, "member")]),                    # ":" starts the spec
])
def test_triggers_inside_f_string_replacement_fields(text, at):
    assert _fstring_fires(text) == at
    assert [(i, k.name) for i, k in fires(text)] == at


@pytest.mark.parametrize("text", ['f"a.b"', 'f"{x:.2f}"', 'f"{{a.b}}"', "f'{x:{w}.3}'",
                                  'f"""a.\nb.c"""', 'f"{x!r:.>3}."', 'f"{x}.{y}."'])
def test_no_trigger_in_the_literal_parts_or_format_specs_of_f_strings(text):
    assert fires(text) == []


def test_an_f_string_field_leaves_the_scanner_where_it_was():
    """After f-strings with fields (closed, or broken by a newline) the scanner reads code
    as it did before them: what it knows equals a fresh scanner's after a line break."""
    def state(text):
        scanner = PythonScanner()
        for char in text:
            scanner.feed(char)
        return tuple(getattr(scanner, name) for name in ("mode", "word", "last", "stack", "statement",
                                                          "fields", "brace", "escape", "continued"))

    fresh = state("x = 1\n")
    for text in ['x = f"{a:{b}>{c.d}}{{"\n', "x = f'{a:>\n", 'x = f"""{a[1]}\n{b!r}"""\n']:
        assert state(text) == fresh, text
    assert hash(state('x = f"{a(1, b=')) is not None


def test_configured_kinds_only():
    scanner = PythonScanner({"member": PythonScanner().kinds["member"]})
    kinds = [scanner.feed(c) for c in "from os import path\nf(x).y"]
    assert [k.name for k in kinds if k] == ["member"]


def _tokenize_triggers(source: str) -> tuple[set[int], set[int]]:
    """Character offsets just after each '.' that follows an expression, and each '(' that
    follows a name or a closing bracket outside def/class headers, as tokenize reads them."""
    line_starts = [0]
    for line in source.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    dots, calls = set(), set()
    previous = None
    before_previous = None
    # Python 3.12+ tokenizes f-strings into parts; the scanner reads them whole, as strings
    fstring_start, fstring_end = getattr(tokenize, "FSTRING_START", -1), getattr(tokenize, "FSTRING_END", -1)
    strings = (tokens.STRING, tokens.NUMBER, fstring_end)
    inside_fstring = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (fstring_start, fstring_end):
            inside_fstring += 1 if tok.type == fstring_start else -1
            if inside_fstring:
                continue
        elif inside_fstring:
            continue
        if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
            if tok.type == tokenize.NEWLINE:
                previous = before_previous = None
            continue
        offset = line_starts[tok.start[0] - 1] + tok.start[1]
        if tok.type == tokens.OP and tok.string in (".", "(") and previous is not None:
            is_name = previous.type == tokens.NAME and (not keyword.iskeyword(previous.string)
                                                        or previous.string in ("True", "False", "None"))
            closing = previous.type == tokens.OP and previous.string in ")]}"
            if tok.string == "." and (is_name or closing or previous.type in strings):
                dots.add(offset + 1)
            definition = before_previous is not None and before_previous.string in ("def", "class")
            if tok.string == "(" and (closing or (is_name and previous.string not in ("True", "False", "None")
                                                  and not definition)):
                calls.add(offset + 1)
        before_previous, previous = previous, tok
    return dots, calls


@pytest.mark.parametrize("module", ["json/decoder.py", "textwrap.py", "argparse.py", "tokenize.py"])
def test_member_and_call_triggers_agree_with_tokenize_on_the_standard_library(module):
    source = (Path(tokenize.__file__).parent / module).read_text(encoding="utf-8")
    dots, calls = _tokenize_triggers(source)
    fired = fires(source)
    got_dots = {i + 1 for i, k in fired if k.mode == "member" and source[i] == "."}
    got_calls = {i + 1 for i, k in fired if k.name == "keyword" and source[i] == "("}
    assert len(dots) > 50 and len(calls) > 50
    assert got_dots == dots, (sorted(got_dots - dots)[:5], sorted(dots - got_dots)[:5])
    assert got_calls == calls, (sorted(got_calls - calls)[:5], sorted(calls - got_calls)[:5])


# -- mask() equals allows() --------------------------------------------------------------------

TABLE = {
    "obj.": {"append", "apply", "app", "count", "__len__", "café", "日本"},
    "f(": {"key", "value"}, "f(x,": {"key", "value"},
    "import ": {"path", "sep"}, "os.": {"path"},
}
DOCUMENTS = ["x = obj", "x = obj.", "x = obj.ap", "x = obj.app", "y = f(x, ke", "from os import",
             "from os import ", "x = obj.caf", "s = 'obj", "x = obj.\n", "y = f", "y = f(x, ke ",
             "y = f(key\n  "]
FULL = ["x = obj", "x = obj.", "x = obj.app", "y = f(x, ke", "from os import", "x = obj.caf"]


def assert_mask_is_allows(state: MonitorState, vocab, ids=None) -> None:
    mask = state.mask()
    ids = range(vocab.size) if ids is None else ids
    wrong = [(t, vocab.tokens[t], bool(mask[t])) for t in ids if state.allows(t) != mask[t]]
    assert not wrong, wrong[:6]


def _sample(vocab, state, rng, n=1500) -> list[int]:
    """Random tokens plus every token a trigger can fire inside or at the start of."""
    index = index_for(vocab)
    rank_to_id = index.table.rank_to_id
    ids = set(rng.sample(range(vocab.size), n))
    ids.update(rank_to_id[index.mid_ranks].tolist())
    for b in b".(, ":
        lo, hi = index.range(bytes([b]))
        ids.update(rank_to_id[lo:min(hi, lo + 400)].tolist())
    ids.update(vocab.eos_token_ids)
    return sorted(ids)


@pytest.mark.parametrize("vocab_name", ["gpt2", "llama2"])
@pytest.mark.parametrize("lookahead", [False, True])
def test_mask_equals_allows_on_documents(vocab_name, lookahead):
    vocab = vocabulary(vocab_name)
    rng = random.Random(0)
    for document in DOCUMENTS:
        state = MonitorState.start(Session(DictMonitor(TABLE, lookahead), vocab), document)
        full = document in FULL and not lookahead
        assert_mask_is_allows(state, vocab, None if full else _sample(vocab, state, rng))


def test_what_the_masks_allow():
    vocab = vocabulary("gpt2")
    monitor = DictMonitor(TABLE)

    def allowed(document):
        state = MonitorState.start(Session(monitor, vocab), document)
        mask = state.mask()
        return {vocab.tokens[t] for t in np.flatnonzero(mask) if vocab.tokens[t]}, state

    after_dot, state = allowed("x = obj.")
    assert {b"app", b"append", b"apply", b"count"} <= after_dot and b"(" not in after_dot
    assert not state.end_ok()                     # nothing ends right after "obj."
    in_name, _ = allowed("x = obj.app")
    assert {b"(", b".", b"end", b"ly", b" ="} <= in_name and b"s" not in in_name
    idle, _ = allowed("x = 1")
    assert len(idle) > 50000                      # no trigger: nothing refused
    imports, _ = allowed("from os import")
    assert b" path" in imports and b" sep" in imports and b" pathlib" not in imports
    assert b" " in imports and b"s" in imports     # "imports" is just a longer name


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_token_that_carries_a_trigger_and_a_name(lookahead):
    """``.append`` after ``obj`` fires the trigger mid-token: with lookahead the name is
    checked against the names of ``obj.``; without, it is refused unchecked (and ``.`` then
    ``append`` is the way)."""
    from gramgen import Vocabulary

    pieces = [".append", ".apend", ".", "append", "apend", "obj", " ", ".)", "x"]
    vocab = Vocabulary([p.encode() for p in pieces] + [b""], eos_token_ids=[len(pieces)])
    monitor = DictMonitor(TABLE, lookahead)
    state = MonitorState.start(Session(monitor, vocab), "x = obj")
    allowed = {pieces[t] for t in np.flatnonzero(state.mask()) if t < len(pieces)}
    if lookahead:
        assert ".append" in allowed and ".apend" not in allowed and ".)" not in allowed
        assert [t.text for t in monitor.asked] == ["x = obj."]
    else:
        assert ".append" not in allowed and ".apend" not in allowed and ".)" in allowed
        assert monitor.asked == []
    assert {".", "x", " "} <= allowed
    assert_mask_is_allows(state, vocab)


@pytest.mark.parametrize("vocab_name", ["gpt2", "llama2"])
def test_a_spaced_keyword_argument_is_checked(vocab_name):
    """``name = value`` in a call: the name is checked at ``=`` whatever whitespace comes
    between (newlines too, inside the call); ``name == value`` and positional names pass."""
    vocab = vocabulary(vocab_name)
    monitor = DictMonitor(TABLE)
    equals = [t for t in range(vocab.size) if vocab.tokens[t] in (b"=", b" =", b"==", b" ==")]

    def allowed(document):
        state = MonitorState.start(Session(monitor, vocab), document)
        assert_mask_is_allows(state, vocab, _sample(vocab, state, random.Random(3), 300) + equals)
        mask = state.mask()
        return {vocab.tokens[t] for t in equals if mask[t]}, state

    for document in ["y = f(x, kex", "y = f(x, kex ", "y = f(x,\n kex\n   ", "y = f(kex\t"]:
        got, state = allowed(document)
        assert b"=" not in got and b"==" in got, document
        assert state.restricting
        if document.endswith(" "):
            assert b" =" not in got and b" ==" in got
    for document in ["y = f(x, key ", "y = f(x,\n value\n"]:
        got, _ = allowed(document)
        assert b"=" in got and b" =" in got
    for document in ["y = f(kex ,", "y = f(kex )", "y = f(kex + 1"]:
        state = MonitorState.start(Session(monitor, vocab), document)
        assert document.endswith(",") or not state.restricting   # positional: nothing checked


def test_mask_equals_allows_inside_a_utf8_character():
    """Llama 2 spells "é" with byte tokens: after <0xC3> the text ends inside a character."""
    vocab = vocabulary("llama2")
    c3 = vocab.tokens.index(b"\xc3")
    for document in ["x = obj.caf", "x = obj.", "s = 'caf"]:
        state = MonitorState.start(Session(DictMonitor(TABLE), vocab), document)
        state.advance(c3)
        assert state.pending == b"\xc3"
        mask = state.mask()
        e_acute = vocab.tokens.index(b"\xa9")
        if document == "x = obj.caf":
            assert mask[e_acute] and not mask[vocab.tokens.index(b"\xa8")]   # é, not è
        assert_mask_is_allows(state, vocab, _sample(vocab, state, random.Random(1)))


@pytest.mark.parametrize("vocab_name", ["gpt2", "llama2"])
def test_mask_equals_allows_along_random_walks(vocab_name):
    """Emit random allowed tokens (favouring the interesting ones) and compare at each step."""
    vocab = vocabulary(vocab_name)
    rng = random.Random(7)
    index = index_for(vocab)
    interesting = [t for t in range(vocab.size)
                   if vocab.tokens[t] and (vocab.tokens[t][:1] in (b".", b"(", b",", b"a", b"c", b"=", b" ")
                                           or vocab.tokens[t][0] >= 0x80)]
    checked = 0
    for document in ["x = obj", "y = f(", "from os import", "x = obj.ca"]:
        state = MonitorState.start(Session(DictMonitor(TABLE), vocab), document)
        for _ in range(6):
            mask = state.mask()
            assert_mask_is_allows(state, vocab, _sample(vocab, state, rng, 300))
            checked += 1
            pool = [t for t in interesting if mask[t]] or np.flatnonzero(mask).tolist()
            pick = rng.choice(pool)
            if pick in vocab.eos_token_ids:
                break
            state.advance(pick)
    assert checked >= 12 and index.n_ranks > 0
