"""The C recogniser (gramgen.automata._earley) against the Python one it replaces: the same
sets (kernel items, scans with their origins, predictions), the same allowed bytes and
acceptance, the same reads beyond a horizon, byte by byte along random walks of many
grammars (ambiguous, left-recursive, nullable, %ignore, lexemes split into rules)."""

from __future__ import annotations

import os
import collections
import random

import numpy as np
import pytest

import gramgen
from gramgen.automata import earley
from gramgen.automata.dfa import compile_lexemes
from gramgen.automata.earley import ParserTables, tracked_view

pytestmark = pytest.mark.skipif(earley._earley is None and not os.environ.get("GRAMGEN_REQUIRE_NATIVE"),
                                reason="the native recogniser is not built (no C compiler)")

GRAMMARS = {
    "json": lambda: gramgen.Grammar.builtin("json"),
    "python": lambda: gramgen.Grammar.builtin("python"),
    "sql": lambda: gramgen.Grammar.builtin("sql"),
    "ambiguous": lambda: gramgen.Grammar.from_lark(r'''
        start: e
        e: e "+" e | e e | "(" e ")" | NUM | ID |
        NUM: /[0-9]+/
        ID: /[a-z]+/ | "x"
        %ignore " "
    '''),
    "nullable": lambda: gramgen.Grammar.from_gbnf(r'''
        root ::= a b a "!" | b*
        a ::= "x"? c
        b ::= ("y" | "yy" | "") c
        c ::= "" | "z" c
    '''),
    "left-recursive": lambda: gramgen.Grammar.from_lark(r'''
        start: list
        list: list "," item | item
        item: WORD | "[" list "]" | "[" "]"
        WORD: /[a-c]{1,3}/
        %ignore /[ \t]+/
    '''),
    "split": lambda: gramgen.Grammar.from_lark(r'''
        start: X (" " X)*
        X: /(ab){2,40}c/
        %ignore "_"
    '''),
    "schema": lambda: gramgen.Grammar.from_json_schema({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 6},
                       "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3},
                       "n": {"type": "integer", "minimum": -5}},
        "required": ["name"]}, whitespace="flexible"),
}


def _pair(name: str, max_states: int = 10_000):
    """(C tables, Python tables) of one grammar, over the same lexeme DFAs."""
    ir, dfas = compile_lexemes(GRAMMARS[name]().ir, max_states=max_states)
    return ParserTables(ir, dfas, native=True), ParserTables(ir, dfas, native=False)


def _same(c_set, py_set, tables, pos: int):
    assert set(c_set.items) == set(py_set.items), pos
    assert {k: frozenset(v) for k, v in c_set.scans.items()} == dict(py_set.scans), pos
    assert {s: sorted(v) for s, v in c_set.waiting.items()} == {s: sorted(v) for s, v in py_set.waiting.items()}
    assert {s: tuple(v) for s, v in c_set.pred.items()} == {s: tuple(v) for s, v in py_set.pred.items()}


def _walk(c_tab, py_tab, rng: random.Random, length: int):
    c_chart, py_chart = [c_tab.initial_set()], [py_tab.initial_set()]
    _same(c_chart[0], py_chart[0], c_tab, 0)
    for pos in range(length):
        allowed = py_tab.allowed_bytes(py_chart[-1])
        assert c_tab.allowed_bytes(c_chart[-1]) == allowed, pos
        assert c_tab.is_accepting(c_chart[-1]) == py_tab.is_accepting(py_chart[-1]), pos
        # a byte that is not allowed: both say None
        outside = [b for b in range(256) if not (allowed >> b) & 1]
        if outside:
            b = rng.choice(outside)
            assert c_tab.step(c_chart, b) is None and py_tab.step(py_chart, b) is None
        if not allowed:
            break
        choices = [b for b in range(256) if (allowed >> b) & 1]
        b = rng.choice(choices)
        c_next, py_next = c_tab.step(c_chart, b), py_tab.step(py_chart, b)
        assert (c_next is None) == (py_next is None), pos   # a live scan can always go on
        if c_next is None:
            break
        _same(c_next, py_next, c_tab, pos + 1)
        c_chart.append(c_next)
        py_chart.append(py_next)
        # the reads beyond a horizon, and what a completion there reaches, agree too
        if pos % 3 == 0:
            _horizons(c_tab, py_tab, c_chart, py_chart)
    return c_chart, py_chart


def _horizons(c_tab, py_tab, c_chart, py_chart):
    j = len(c_chart) - 1
    for depth in (1, 2, 3):
        c_view, c_reads = tracked_view(c_chart, j, depth)
        py_view, py_reads = tracked_view(py_chart, j, depth)
        # the native horizon: the positions the view wraps, as a list
        far = c_tab.native.horizon(c_chart, j, depth)
        assert far == sorted(idx for idx, _, _ in py_reads.wrapped), (j, depth)
        for (k, q), origins in py_chart[j].scans.items():
            a = c_tab.completes_within(c_view, c_reads, k, origins)
            b = py_tab.completes_within(py_view, py_reads, k, origins)
            assert a == b, (j, depth, k)
            assert c_tab.native.complete_closure(c_chart, k, list(origins), far) == b, (j, depth, k)
        for b in range(256):
            c_reads.read = py_reads.read = False
            c_next, py_next = c_tab.step(c_view, b), py_tab.step(py_view, b)
            assert (c_next is None) == (py_next is None)
            assert c_reads.read == py_reads.read, (j, depth, b)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_native_sets_equal_python_sets(name):
    c_tab, py_tab = _pair(name)
    rng = random.Random(name)
    for _ in range(12):
        _walk(c_tab, py_tab, rng, 60)


def test_split_lexemes_with_ignore_agree():
    c_tab, py_tab = _pair("split", max_states=12)   # small DFAs: X is split, its items glued
    assert py_tab.any_glued
    rng = random.Random(7)
    for _ in range(20):
        _walk(c_tab, py_tab, rng, 120)


def test_signatures_agree():
    """Signatures read the sets' Python views: equal for the two implementations."""
    c_tab, py_tab = _pair("json")
    rng = random.Random(3)
    for _ in range(5):
        c_chart, py_chart = _walk(c_tab, py_tab, rng, 40)
        for j in range(len(c_chart)):
            sig = {}
            assert (c_tab.signature_of(c_chart[j], j, lambda o: sig.setdefault(o, o))
                    == py_tab.signature_of(py_chart[j], j, lambda o: sig.setdefault(o, o)))


def test_inside_lexemes_and_bad_arguments():
    c_tab, _ = _pair("json")
    s = c_tab.initial_set()
    scans = dict(s.scans)
    inner = c_tab.inside_lexemes(scans)
    assert dict(inner.scans) == scans and not inner.items and not inner.n_items
    with pytest.raises(ValueError):
        c_tab.step([s], 256)
    with pytest.raises(ValueError):
        c_tab.step([], 65)
    with pytest.raises(ValueError):
        c_tab.inside_lexemes({(10**6, 0): frozenset({0})})
    with pytest.raises(TypeError):
        c_tab.step([object()], 65)


@pytest.mark.skipif(not earley.NATIVE, reason="GRAMGEN_NATIVE=0: the Python recogniser was asked for")
def test_compiled_grammars_use_the_native_recogniser():
    cg = gramgen.compile(gramgen.Grammar.builtin("json"), gramgen.Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256]))
    assert cg.tables.native is not None
    assert type(cg.matcher()._chart[-1]).__name__ == "Set"


MASK_GRAMMARS = ["json", "python", "sql", "split", "schema", "ambiguous"]


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama2"])
@pytest.mark.parametrize("name", MASK_GRAMMARS)
def test_native_masks_equal_python_masks(name, tokenizer, monkeypatch):
    """Masks (the native exit walk over the native sets) equal those of the Python
    implementation along random walks of allowed tokens."""
    from conftest import vocabulary

    vocab = vocabulary(tokenizer)
    options = {"max_dfa_states": 12} if name == "split" else {}
    monkeypatch.setattr(earley, "NATIVE", True)    # (whatever GRAMGEN_NATIVE says)
    native = gramgen.compile(GRAMMARS[name](), vocab, **options)
    monkeypatch.setattr(earley, "NATIVE", False)
    python = gramgen.compile(GRAMMARS[name](), vocab, **options)
    monkeypatch.undo()
    assert native.tables.native is not None and python.tables.native is None
    rng = random.Random(f"{name}/{tokenizer}")
    for _ in range(3):
        a, b = native.matcher(), python.matcher()
        for _ in range(25):
            mask = a.mask()
            assert (mask == b.mask()).all(), (name, a.text_bytes())
            allowed = [t for t in mask.nonzero()[0].tolist() if t not in vocab.eos_token_ids]
            if not allowed:
                break
            t = rng.choice(allowed)
            a.advance(t)
            b.advance(t)


# a string value of 297 characters (3 short of a maxLength of 300: the last of its blocks
# has 44 characters of room) and a short one with escapes
LONG_VALUE = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
              "Safari/537.36 Edg/120.0 — é 日本 " + "and some plain words to fill the blocks " * 6)[:297]
LONG_TEXT = '{"s": "' + LONG_VALUE + '", "t": "quote \\" and \\\\ escapes"}'


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
@pytest.mark.parametrize("max_length", [300, 5000])
def test_native_masks_equal_python_masks_along_long_strings(tokenizer, max_length, monkeypatch):
    """Strings longer than one lexeme (64-character blocks counted by rules, or, past
    1,000, by a loop): near a block's end most tokens cross it, and the native walk lets the
    rests of plain characters through at a glance (a state's plain chain, as long as the
    room left: the last block of a maxLength of 300 holds 44); its masks equal the Python
    implementation's at every step of a text with ASCII and multi-byte characters that ends
    3 characters short of that maxLength, and a second string with escapes."""
    from conftest import vocabulary

    vocab = vocabulary(tokenizer)
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": max_length},
                                               "t": {"type": "string", "maxLength": 40}}}
    monkeypatch.setattr(earley, "NATIVE", True)
    native = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="flexible"), vocab)
    monkeypatch.setattr(earley, "NATIVE", False)
    python = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace="flexible"), vocab)
    monkeypatch.undo()
    assert native.tables.native is not None and python.tables.native is None
    from conftest import hf_tokenizer

    ids = hf_tokenizer(tokenizer).encode(LONG_TEXT, add_special_tokens=False)
    a, b = native.matcher(), python.matcher()
    for t in ids:
        assert (a.mask() == b.mask()).all(), a.text_bytes()
        a.advance(t)
        b.advance(t)
    assert a.is_accepting()


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_native_masks_equal_python_masks_along_a_counted_lexeme(tokenizer, monkeypatch):
    """A pattern with a maxLength is one lexeme whose DFA counts the characters along a
    chain of states longer than the native walk follows a chain (CHAIN_WALK_MAX). Masks
    equal the Python implementation's at every step of a value that ends 3 characters
    short of the maxLength, and again after a rollback to its middle and a different
    continuation (states met out of order). (Masks here rarely hinge on a chain's exact
    room: test_plain_chains_equal_a_walk_one_step_at_a_time checks the rooms themselves.)"""
    from conftest import hf_tokenizer, vocabulary

    vocab = vocabulary(tokenizer)
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z ]*$", "maxLength": 600}}}
    monkeypatch.setattr(earley, "NATIVE", True)
    native = gramgen.compile(gramgen.Grammar.from_json_schema(schema), vocab)
    monkeypatch.setattr(earley, "NATIVE", False)
    python = gramgen.compile(gramgen.Grammar.from_json_schema(schema), vocab)
    monkeypatch.undo()
    assert native.tables.native is not None and python.tables.native is None
    tok = hf_tokenizer(tokenizer)
    value = ("and some plain words to fill the chain" + " " * 40) * 10
    head = tok.encode('{"s": "' + value[:297], add_special_tokens=False)
    a, b = native.matcher(), python.matcher()
    tail = tok.encode(value[297:597] + '"}', add_special_tokens=False)
    for t in head + tail:
        assert (a.mask() == b.mask()).all(), a.text_bytes()
        a.advance(t)
        b.advance(t)
    assert a.is_accepting()
    for m in (a, b):
        m.rollback(len(tail))
    for t in tok.encode("x" * 150 + "  y" * 50 + '"}', add_special_tokens=False):
        assert (a.mask() == b.mask()).all(), a.text_bytes()
        a.advance(t)
        b.advance(t)
    assert a.is_accepting()


def _reference_chain(trans: np.ndarray, q: int) -> tuple[int | None, bytes]:
    """A state's plain chain walked one step at a time: the plain bytes (those that lead
    to the target most printable ASCII bytes go to, if at least 8 do), and how many of them
    keep the lexeme alive (None: any number, the chain loops), or 0 without a chain."""
    row = trans[q]
    targets = [int(t) for t in row[0x20:0x7F] if t >= 0]
    if not targets:
        return 0, bytes(256)
    best = max(dict.fromkeys(targets), key=targets.count)   # (the first of the most common)
    if targets.count(best) < 8:
        return 0, bytes(256)
    plain = (row == best).astype(np.uint8)
    cols = np.flatnonzero(plain)
    at, room, seen = best, 1, set()
    while True:
        nxt = set(trans[at, cols].tolist())
        if len(nxt) != 1 or nxt == {-1}:
            return room, plain.tobytes()
        to = nxt.pop()
        if to == at or at in seen:
            return None, plain.tobytes()
        seen.add(at)
        at, room = to, room + 1


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_plain_chains_equal_a_walk_one_step_at_a_time(order):
    """The native walk's plain chains (how many plain bytes keep a lexeme alive from a
    state: what lets rests through at a glance) equal a one-step-at-a-time walk, capped
    at CHAIN_WALK_MAX (a chain that loops may show either), whatever order the states are
    first asked in: each chain's walk resumes the runs earlier walks left (a counted
    string's states, asked in the order they count, take one new step each)."""
    WALK_MAX, ROOM_MAX = 256, 4096
    schema = {"type": "object", "properties": {
        "s": {"type": "string", "pattern": "^[a-z ]*$", "maxLength": 600},
        "t": {"type": "string", "maxLength": 90},
        "u": {"type": "string", "pattern": "^[a-z]{300,}$"}}}
    ir, dfas = compile_lexemes(gramgen.Grammar.from_json_schema(schema).ir)
    tables = ParserTables(ir, dfas, native=True)
    native = tables.native
    checked = loops = 0
    for k, dfa in enumerate(tables.lex_dfas):
        trans = np.asarray(dfa.transitions)
        states = list(range(trans.shape[0]))
        if order == "descending":
            states.reverse()
        elif order == "shuffled":
            random.Random(k).shuffle(states)
        for q in states:
            room, plain = native.plain_chain(k, q)
            want, want_plain = _reference_chain(trans, q)
            assert plain == want_plain, (k, q)
            if want is None:
                assert room in (WALK_MAX, ROOM_MAX), (k, q, room)
            else:
                assert room == min(want, WALK_MAX), (k, q, room, want)
            checked += want is not None and want > 4
            loops += want is None
    assert checked > 500 and loops > 100   # the counted chains, and those that end in a loop
    with pytest.raises(ValueError):
        native.plain_chain(0, 10 ** 6)


def test_sets_of_another_grammar_are_refused():
    json_tab, _ = _pair("json")
    sql_tab, _ = _pair("sql")
    s = sql_tab.initial_set()
    with pytest.raises(TypeError, match="this grammar"):
        json_tab.step([s], ord("{"))
    with pytest.raises(TypeError, match="this grammar"):
        json_tab.allowed_bytes(s)


@pytest.mark.parametrize("name", ["json", "python", "ambiguous"])
def test_try_texts_equals_stepping_each_text(name):
    """try_texts (the texts walked in sorted order, sharing their prefixes) answers what
    stepping each text alone through the Python tables answers."""
    c_tab, py_tab = _pair(name)
    rng = random.Random(name)
    c_chart, py_chart = _walk(c_tab, py_tab, rng, 8)
    alphabet = b'{}[]",:0123456789 abe\n\t()+x_-.'
    texts = [b""] + [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(300)]
    texts += [t[:k] for t in texts[:40] for k in range(len(t))]   # shared prefixes
    got = c_tab.native.try_texts(c_chart, texts)

    def takes(text):
        chart = list(py_chart)
        for b in text:
            s = py_tab.step(chart, b)
            if s is None:
                return False
            chart.append(s)
        return True

    assert list(got) == [int(takes(t)) for t in texts]
    assert any(got) and not all(got)


WALK_GRAMMARS = {
    **{name: GRAMMARS[name] for name in ("json", "python", "sql", "ambiguous", "left-recursive")},
    # blanks and comments ignored, names that may touch keywords: runs of blank tokens
    # start an ignored lexeme at every byte
    "code": lambda: gramgen.Grammar.from_lark(r'''
        start: stmt+
        stmt: "int" NAME ("=" expr)? ";" | NAME "(" (expr ("," expr)*)? ")" ";" | "{" stmt* "}"
        expr: expr "+" term | term
        term: NAME | NUM | "(" expr ")" | NAME "." NAME
        NAME: /[a-z_][a-z0-9_]*/
        NUM: /[0-9]+/
        %ignore /[ \t\n]+/
        %ignore /\/\/[^\n]*/
    '''),
    # a string longer than one lexeme holds: blocks of characters counted by rules, where
    # every character leads to the same set and a token may cross a block's end
    "long-string": lambda: gramgen.Grammar.from_json_schema({
        "type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 400}},
        "required": ["s"], "additionalProperties": False}),
}


CODE_TEXTS = [
    b"int a = b + (c.d + 12);\n  f(a,  b ,c) ;{ int x;  // note\n   g( ) ; }\n\n int y=x+1;",
    b"{\n\t{ int  z = ( ( 1 ) ) ;}  h(z.w ,  3 + 4);\n}  // end\n",
    b"f(a)// x\n; g(b,(c))//yy\n ; int q = (r)//z\n+(s) // w\n;",
]


def _substring_vocabulary(texts, longest=10):
    """Every byte, and every piece of the texts up to ``longest`` bytes, as tokens: tokens
    that hold several lexemes, blanks after them, and the same piece at many offsets."""
    pieces = {bytes([b]) for b in range(256)}
    for text in texts:
        for i in range(len(text)):
            for n in range(2, longest + 1):
                if i + n <= len(text):
                    pieces.add(text[i:i + n])
    tokens = sorted(pieces)
    return gramgen.Vocabulary(tokens + [b""], eos_token_ids=[len(tokens)])


def _walk_result(native, chart, far, ranks, tt, *options):
    found, beyond, steps, _ = native.walk_exits(chart, far, ranks, tt.blob, tt.offsets, *options)
    return (sorted(np.frombuffer(found, np.int32).tolist()), sorted(np.frombuffer(beyond, np.int32).tolist()),
            steps)


@pytest.mark.parametrize("name", sorted(WALK_GRAMMARS))
def test_walk_with_remembered_closures_equals_walk_without(name, monkeypatch):
    """The exit walk copies a closure it made before at another node (keyed by the lexemes
    that end, their origins relative to the new set, the kernels of the sets they started
    from); without that memory every closure is made afresh. Both decide every token alike,
    the tokens read beyond a horizon included: on gpt2's vocabulary, and for the C-like
    grammar on pieces of programs (tokens of several lexemes and blank runs, at many
    offsets), along those programs. Also without folding the walk's children whose sets
    are equal (their tokens go on from one set) nor stepping plain runs once (inside a
    string, tokens measured by their plain prefixes): the same tokens, found and beyond,
    and along a long string (blocks counted by rules) folding and runs save steps."""
    from conftest import vocabulary

    if name == "code":
        vocab, texts = _substring_vocabulary(CODE_TEXTS), CODE_TEXTS
    elif name == "long-string":
        # along a string that crosses its first block's end (64 characters)
        vocab, texts = vocabulary("gpt2"), ['{"s": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 é 日本 (KHTML'.encode()]
    else:
        vocab, texts = vocabulary("gpt2"), [None]
    monkeypatch.setattr(earley, "NATIVE", True)    # (whatever GRAMGEN_NATIVE says)
    cg = gramgen.compile(WALK_GRAMMARS[name](), vocab)
    tt = cg.token_table
    native = cg.tables.native
    ranks = list(range(len(tt.sorted_bytes)))
    rng = random.Random(name)
    compared = folded = 0
    for text in texts:
        m = cg.matcher()
        steps = list(text) if text else [None] * 12
        for step in steps:
            chart = list(m._chart)
            j = len(chart) - 1
            for depth in (0, 1, 2):
                far = native.horizon(chart, j, depth) if depth and j else []
                # (found and beyond in any order: how children fold may differ)
                a = _walk_result(native, chart, far, ranks, tt, 1)
                b = _walk_result(native, chart, far, ranks, tt, 0)
                assert a[:2] == b[:2], (name, m.text_bytes(), depth)
                # and each closure copied equals the one made afresh (else RuntimeError)
                assert _walk_result(native, chart, far, ranks, tt, 2)[:2] == a[:2]
                # without folding children of equal sets
                c = _walk_result(native, chart, far, ranks, tt, 1, 0)
                assert a[:2] == c[:2], (name, m.text_bytes(), depth)
                folded += a[2] < c[2]
                compared += 1
            if step is None:
                allowed = [t for t in m.mask().nonzero()[0].tolist() if t not in vocab.eos_token_ids]
                if not allowed:
                    break
                m.advance(rng.choice(allowed))
            else:
                m.advance(tt.rank_to_id[tt.sorted_bytes.index(bytes([step]))])
    assert compared >= 12
    if name == "long-string":
        assert folded   # (the fold took fewer steps somewhere)


def _random_grammar(rng: random.Random) -> gramgen.Grammar:
    """Random rules over up to 8 nonterminals and up to 90 lexemes (more than one 64-bit
    word of lexemes), with empty bodies, left and right recursion, lexemes that match
    nothing and ignored lexemes."""
    from gramgen.grammar.ir import NOTHING, GrammarIR, Rule, literal

    n_nt, n_lex = rng.randint(1, 8), rng.choice([rng.randint(1, 6), rng.randint(60, 90)])
    nts = [f"n{i}" for i in range(n_nt)]
    lexemes = {f"L{k}": (NOTHING if rng.random() < 0.05 else literal(f"x{k}")) for k in range(n_lex)}
    pool = nts + list(lexemes)
    rules = [Rule(nt, (rng.choice(list(lexemes)),)) for nt in nts]
    for _ in range(rng.randint(1, 3 * n_nt + 4)):
        rules.append(Rule(rng.choice(nts), tuple(rng.choice(pool) for _ in range(rng.choice([0, 1, 1, 2, 3, 4])))))
    ignore = [n for n in lexemes if rng.random() < 0.05 and lexemes[n] is not NOTHING][:2]
    return gramgen.Grammar(GrammarIR(rules=rules, lexemes=lexemes, start="n0", ignore=ignore))


@pytest.mark.skipif(not earley.NATIVE, reason="GRAMGEN_NATIVE=0: the Python recogniser was asked for")
def test_native_table_builders_equal_python_ones():
    """``_earley.follow_sets`` (FIRST / FOLLOW of the parser tables in C bit sets, and the
    bytes that may follow each lexeme), ``_earley.nullable_symbols`` and
    ``_earley.item_classes`` (the items' classes for signatures) give what the Python
    references give, on random grammars (some with more than 64 lexemes), the shipped ones,
    grammars with lexemes split into rules (glued items) and a long string's counted chain
    (nonterminals named by aliases)."""
    rng = random.Random(0)
    grammars = [(_random_grammar(rng), 10_000, 0) for _ in range(300)]
    grammars += [(make(), 10_000, 0) for make in GRAMMARS.values()]
    grammars += [(gramgen.Grammar.from_regex(r"(ab|cd){3,40}e|x{5,60}"), 30, 0),
                 (gramgen.Grammar.from_json_schema({"type": "object", "properties": {
                     "s": {"type": "string", "maxLength": 900}, "t": {"type": "string", "minLength": 300}}}),
                  10_000, 16)]
    multiword = glued = aliased = 0
    for g, max_states, window in grammars:
        try:
            ir, dfas = compile_lexemes(g.ir, max_states=max_states)
            tables = ParserTables(ir, dfas, window=window)
        except gramgen.GrammarError:
            continue   # (an empty language)
        got, got_nt = list(tables.follow_lexemes), list(tables._follow_nonterminals)
        assert got == tables._follow_lexemes_py()
        assert list(tables.nullable) == tables._nullable(tables.n_nonterminals,
                                                         [d.nullable for d in tables.lex_dfas])
        # the follow bytes, unioned in C from the lexemes' first bytes
        assert list(tables.follow_bytes) == tables._follow_bytes()
        assert tables.follow_blob == b"".join(f.to_bytes(32, "little") for f in tables.follow_bytes)
        assert got_nt == list(tables._follow_nonterminals)   # (the Python run set it again)
        alias = earley.chain_aliases(ir, list(tables.rule_list), {n: i for i, n in enumerate(tables.nt_names)},
                                     dfas, window)
        named_lhs, named_next = list(tables.item_lhs), list(tables.item_next)
        if alias is not None:
            aliased += alias != list(range(len(alias)))
            named_lhs = [alias[a] for a in named_lhs]
            named_next = [alias[s] if 0 <= s < tables.n_nonterminals else s for s in named_next]
        assert list(tables.item_class) == tables._item_classes_py(named_lhs, named_next)
        multiword += len(tables.lex_dfas) > 64
        glued += any(tables.glued)
    assert multiword >= 20 and glued and aliased


@pytest.mark.skipif(earley._earley is None, reason="the native recogniser is not built")
def test_native_rule_items_equal_python():
    """``_earley.rule_items`` (the parser tables' productive rules, nonterminal numbering
    and item arrays in C) gives what ``earley._rule_items_py`` gives, on random rule lists:
    unproductive nonterminals (only recursive rules, or no rule at all), a symbol twice in
    a body, lexemes that match nothing, the start a nonterminal, a lexeme or undefined, and
    the augmented start's name taken by a rule."""
    from gramgen.grammar.ir import GrammarIR, Rule

    rng = random.Random(2)
    outcomes = collections.Counter()
    for _ in range(600):
        nts = [f"n{i}" for i in range(rng.randint(1, 7))] + (["$start"] if rng.random() < 0.1 else [])
        lexemes = [f"L{k}" for k in range(rng.randint(1, 9))]
        pool = nts + lexemes + ["undefined"]
        rules = []
        for _ in range(rng.randint(0, 4 * len(nts))):
            body = [rng.choice(pool) for _ in range(rng.choice([0, 1, 2, 2, 3, 5]))]
            if body and rng.random() < 0.2:
                body.append(body[0])   # a symbol twice
            rules.append(Rule(rng.choice(nts), tuple(body) if rng.random() < 0.8 else body))
        live = [rng.random() < 0.8 for _ in lexemes]
        start = rng.choice(nts + lexemes[:1] + ["undefined"])
        ir = GrammarIR(rules=rules, lexemes={n: None for n in lexemes}, start=start)
        want = earley._rule_items_py(ir, lexemes, live, "$start")
        got = earley._earley.rule_items(ir.rules, lexemes, live, start, "$start")
        assert (got is None) == (want is None)
        if want is not None:
            assert list(got) == list(want)
            outcomes["kept all" if len(want[0]) == len(rules) + 1 else "pruned"] += 1
        else:
            outcomes["empty language"] += 1
    assert len(outcomes) == 3 and min(outcomes.values()) >= 15, outcomes
    with pytest.raises(TypeError):
        earley._earley.rule_items([Rule("a", (1,))], ["L"], [True], "a", "$start")
    with pytest.raises(ValueError):
        earley._earley.rule_items([Rule("a", ("L",))], ["L"], [True, False], "a", "$start")


@pytest.mark.skipif(earley._earley is None, reason="the native recogniser is not built")
def test_native_follow_bytes_refuse_bad_tables():
    """``_earley.follow_sets`` reads the follow bytes from each live lexeme's start row:
    a table per lexeme, int32, at least one row; anything else is refused."""
    args = (1, [1, earley.END, earley.END], [0, 0, 0], [0, 2], [False, False], [True], [False])
    row = np.full((1, 256), -1, dtype=np.int32)
    row[0, ord("a")] = 0
    _, _, blob = earley._earley.follow_sets(*args, [row])
    assert blob == bytes(32)   # (nothing follows the lexeme)
    for bad in ([], [np.zeros((0, 256), np.int32)], [row.astype(np.int64)], [row, row]):
        with pytest.raises(ValueError):
            earley._earley.follow_sets(*args, bad)


def test_native_item_classes_on_random_tables():
    """``_earley.item_classes`` on random item tables (few symbols, so that suffixes and
    classes repeat; glued flags at random) numbers the classes as the Python reference does,
    and refuses tables whose rules do not cover the items."""
    rng = random.Random(1)
    for _ in range(400):
        n_rules = rng.randint(1, 12)
        lhs, nxt, firsts = [], [], []
        for _ in range(n_rules):
            firsts.append(len(nxt))
            a = rng.randint(0, 3)
            body = [rng.randint(0, 5) for _ in range(rng.randint(0, 4))]
            nxt += body + [earley.END]
            lhs += [a] * (len(body) + 1)
        glued = [rng.random() < 0.3 for _ in nxt]
        accept = rng.randrange(len(nxt))
        fake = type("T", (), {})()
        fake.item_next, fake.glued, fake.accept_item = nxt, glued, accept
        want = ParserTables._item_classes_py(fake, lhs, nxt)
        assert earley._earley.item_classes(lhs, nxt, glued, firsts, accept) == want
    with pytest.raises(ValueError):
        earley._earley.item_classes([0, 0, 0], [1, earley.END, earley.END], [0, 0, 0], [0], 1)
    with pytest.raises(ValueError):
        earley._earley.item_classes([0, 0], [1, earley.END], [0, 0], [1], 1)
