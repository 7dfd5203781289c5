"""Byte DFA construction: exact sizes, UTF-8 validity, trimming, limits, determinism."""

from __future__ import annotations

import itertools
import os
import re
import time
from collections import deque

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gramgen.automata.dfa import ByteDFA, compile_regex
from gramgen.automata.utf8 import encode_sequences, utf8_automaton
from gramgen.errors import CompileLimitError
from gramgen.grammar.ir import (EMPTY, NOTHING, Alt, Automaton, ByteRanges, CharRanges, Repeat, Seq,
                                byte_literal, literal, normalize_ranges)
from gramgen.grammar.regex import parse_regex

UNIVERSE = ((0, 0xD7FF), (0xE000, 0x10FFFF))
JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
PY_LONG_STRING = r'(?s)"""(?:[^"\\]|\\.|""?(?:[^"\\]|\\.))*"""'


def dfa(pattern: str, flags: int | str = 0) -> ByteDFA:
    return compile_regex(parse_regex(pattern, flags))


def all_codepoint_matches(d: ByteDFA) -> np.ndarray:
    """bool per code point (surrogates False): does ``d`` accept its UTF-8 encoding?

    Vectorized stepping so the whole code space is checked in well under a second."""
    cps = np.arange(0x110000, dtype=np.int64)
    out = np.zeros(0x110000, dtype=bool)
    table = np.vstack([d.transitions, np.full((1, 256), -1, np.int32)]).astype(np.int64)
    dead = d.n_states
    table[table < 0] = dead
    accepting = np.append(d.accepting, False)
    for lo, hi, n in ((0, 0x7F, 1), (0x80, 0x7FF, 2), (0x800, 0xFFFF, 3), (0x10000, 0x10FFFF, 4)):
        c = cps[lo:hi + 1]
        c = c[(c < 0xD800) | (c > 0xDFFF)]
        if n == 1:
            enc = [c]
        else:
            lead = (0xC0, 0xE0, 0xF0)[n - 2] | (c >> (6 * (n - 1)))
            enc = [lead] + [0x80 | ((c >> (6 * k)) & 0x3F) for k in range(n - 2, -1, -1)]
        state = np.zeros(len(c), dtype=np.int64) if d.n_states else np.full(len(c), dead)
        for byte in enc:
            state = table[state, byte]
        out[c] = accepting[state]
    return out


def is_trimmed(d: ByteDFA) -> bool:
    n = d.n_states
    seen = {0} if n else set()
    queue = deque(seen)
    while queue:
        for t in set(d.rows[queue.popleft()]):
            if t >= 0 and t not in seen:
                seen.add(t)
                queue.append(t)
    preds: dict[int, set[int]] = {}
    for s in range(n):
        for t in set(d.rows[s]):
            preds.setdefault(t, set()).add(s)
    live = {s for s in range(n) if d.accepting[s]}
    queue = deque(live)
    while queue:
        for p in preds.get(queue.popleft(), ()):
            if p not in live:
                live.add(p)
                queue.append(p)
    return seen == set(range(n)) == live


# ----------------------------------------------------------------- exact results


@pytest.mark.parametrize("pattern, n_states", [
    ("ab|ac", 3),
    ("a*", 1),
    ("", 1),
    ("a", 2),
    ("abc", 4),
    ("(?:a|b)*abb", 4),
    ("a{2,4}", 5),
    ("[ab]{3}", 4),
    ("[^\"\\\\]", 9),       # any other code point: start, 4 lead kinds, 3 tails, final
    (".", 9),
    ("é", 3),
    ("\U0001F600", 5),
    ("(?:ab)+", 3),
])
def test_exact_state_counts(pattern, n_states):
    d = dfa(pattern)
    assert d.n_states == n_states
    assert is_trimmed(d)


def test_ab_ac_table():
    d = dfa("ab|ac")
    assert d.rows[0][ord("a")] == 1
    assert d.rows[1][ord("b")] == d.rows[1][ord("c")] == 2
    assert sum(t >= 0 for row in d.rows for t in row) == 3
    assert d.accepting.tolist() == [False, False, True]
    assert not d.nullable and not d.is_empty


def test_empty_and_nothing():
    e = compile_regex(EMPTY)
    assert e.n_states == 1 and e.nullable and e.matches(b"") and not e.matches(b"a")
    for rx in (NOTHING, CharRanges(()), Seq((literal("a"), NOTHING)), Repeat(NOTHING, 1, 3)):
        d = compile_regex(rx)
        assert d.is_empty and d.n_states == 0 and d.transitions.shape == (0, 256)
        assert not d.matches(b"") and not d.is_live_prefix(b"")
    assert compile_regex(Repeat(NOTHING, 0, 3)).matches(b"")
    assert compile_regex(CharRanges(((0xD800, 0xDFFF),))).is_empty  # surrogates only


def test_arrays_are_consistent_and_immutable():
    d = dfa(JSON_STRING)
    assert d.transitions.dtype == np.int32 and d.transitions.shape == (d.n_states, 256)
    assert d.accepting.dtype == bool and d.accepting.shape == (d.n_states,)
    assert d.rows == d.transitions.tolist()
    with pytest.raises(ValueError):
        d.transitions[0, 0] = 5
    with pytest.raises(AttributeError):
        d.n_states = 3


def test_pickle_roundtrip():
    import pickle

    d = dfa(JSON_NUMBER)
    e = pickle.loads(pickle.dumps(d))
    assert np.array_equal(d.transitions, e.transitions) and e.rows == d.rows
    assert e.matches(b"-1.5e3") and not e.transitions.flags.writeable


def test_deterministic_and_canonical():
    a, b = dfa(JSON_STRING), dfa(JSON_STRING)
    assert np.array_equal(a.transitions, b.transitions)
    assert np.array_equal(a.accepting, b.accepting)
    # equivalent regexes give the identical (canonical) automaton
    for p, q in [("(a|b)*", "[ab]*"), ("a(?:ba)*", "(?:ab)*a"), ("x{2,3}", "xxx?"), (r"\d+", r"\d\d*")]:
        assert np.array_equal(dfa(p).transitions, dfa(q).transitions), (p, q)


def test_byte_ranges_are_raw_bytes():
    d = compile_regex(Seq((byte_literal(b"\xff\x00"), Repeat(ByteRanges(((0x80, 0xBF),)), 0, None))))
    assert d.matches(b"\xff\x00") and d.matches(b"\xff\x00\x80\xbf")
    assert not d.matches(b"\xff") and not d.matches(b"\xff\x00\xc0")
    mixed = compile_regex(Alt((literal("é"), ByteRanges(((0xC3, 0xC3),)))))
    assert mixed.matches("é".encode()) and mixed.matches(b"\xc3") and not mixed.matches(b"\xa9")


# ------------------------------------------------------------------------- UTF-8


def test_utf8_sequences_of_everything():
    seqs = encode_sequences(UNIVERSE)
    assert [[(hex(a), hex(b)) for a, b in s] for s in seqs] == [
        [("0x0", "0x7f")],
        [("0xc2", "0xdf"), ("0x80", "0xbf")],
        [("0xe0", "0xe0"), ("0xa0", "0xbf"), ("0x80", "0xbf")],
        [("0xe1", "0xec"), ("0x80", "0xbf"), ("0x80", "0xbf")],
        [("0xed", "0xed"), ("0x80", "0x9f"), ("0x80", "0xbf")],
        [("0xee", "0xef"), ("0x80", "0xbf"), ("0x80", "0xbf")],
        [("0xf0", "0xf0"), ("0x90", "0xbf"), ("0x80", "0xbf"), ("0x80", "0xbf")],
        [("0xf1", "0xf3"), ("0x80", "0xbf"), ("0x80", "0xbf"), ("0x80", "0xbf")],
        [("0xf4", "0xf4"), ("0x80", "0x8f"), ("0x80", "0xbf"), ("0x80", "0xbf")],
    ]
    assert len(utf8_automaton(((0x20AC, 0x20AC),))) == 3  # € = E2 82 AC


@pytest.mark.parametrize("ranges", [
    UNIVERSE,
    ((0x41, 0x5A), (0x61, 0x7A)),
    ((0x7F, 0x80), (0x7FF, 0x800), (0xFFFF, 0x10000), (0x10FFFF, 0x10FFFF)),
    ((0xD7FF, 0xE000),),              # straddles the surrogates
    ((0x3B1, 0x3C9), (0x4E00, 0x9FFF), (0x1F600, 0x1F64F)),
    ((0x100, 0x1234), (0x5678, 0x12345), (0x54321, 0x10FFFE)),
])
def test_charranges_exact_over_all_codepoints(ranges):
    got = all_codepoint_matches(compile_regex(CharRanges(ranges)))
    want = np.zeros(0x110000, dtype=bool)
    for lo, hi in ranges:
        want[lo:hi + 1] = True
    want[0xD800:0xE000] = False
    assert np.array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0x7F), st.integers(0, 0x7F)).map(sorted).map(tuple),
                min_size=1, max_size=6), st.booleans())
def test_ascii_classes_are_encoded_as_their_utf8_automaton(ranges, as_lists):
    """The program encoder writes an ASCII class directly (one state, its ranges as edges):
    the same words as from its UTF-8 automaton, for unsorted, overlapping, adjacent ranges
    given as tuples or lists."""
    from gramgen.automata.dfa import _Program
    from gramgen.automata.utf8 import EXIT

    rx = CharRanges([list(r) for r in ranges] if as_lists else tuple(ranges))
    automaton = utf8_automaton(normalize_ranges(ranges))
    want = [_Program.CHARS, len(automaton)]
    for edges in automaton:
        want.append(len(edges))
        for lo, hi, target in edges:
            want += (lo, hi, -1 if target == EXIT else target)
    assert _Program()._leaf_words(rx) == want


def _valid_utf8_char(data: bytes) -> bool:
    try:
        return len(data.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


def test_invalid_utf8_never_matches_exhaustive_short():
    d = compile_regex(CharRanges(UNIVERSE))
    for n in (1, 2):
        for data in itertools.product(range(256), repeat=n):
            b = bytes(data)
            assert d.matches(b) == _valid_utf8_char(b), b
    for bad in (b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80",
                b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
                b"\xf5\x80\x80\x80", b"\xff", b"\x80"):
        assert not d.matches(bad) and not d.is_live_prefix(bad), bad


ANY_TEXT = dfa(r"(?s).*")
NON_A = dfa(r"[^a]*é?")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=12))
def test_invalid_utf8_never_matches_random(data):
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert ANY_TEXT.matches(data) == valid
    assert not NON_A.matches(data) or valid


# ------------------------------------------------------------ live prefixes


@pytest.mark.parametrize("pattern", ["ab|ac", "a(?:bc)*d", "(?:ab|a)c?", "[ab]{2,3}c", "a*b?a",
                                     "(?:a|bb)+c", "(?:ab){2}|b"])
def test_live_prefix_brute_force(pattern):
    d = dfa(pattern)
    alphabet = "abcd"
    words = ["".join(t) for n in range(9) for t in itertools.product(alphabet, repeat=n)]
    members = [w for w in words if re.fullmatch(pattern, w)]
    viable = {m[:i] for m in members for i in range(len(m) + 1)}
    for prefix in words:
        if len(prefix) <= 4:  # every viable prefix here has a completion of length <= 4
            assert d.is_live_prefix(prefix.encode()) == (prefix in viable), (pattern, prefix)
        assert d.matches(prefix.encode()) == bool(re.fullmatch(pattern, prefix))


@pytest.mark.parametrize("pattern", [JSON_STRING, JSON_NUMBER, PY_LONG_STRING, r"[^\W\d]\w*",
                                     r"(?i)select|from", r"\s+", r"[^\x00-\x7f]{2,3}"])
def test_every_state_is_live(pattern):
    assert is_trimmed(dfa(pattern))


# ------------------------------------------------------------ limits and speed


def test_max_states_limit():
    with pytest.raises(CompileLimitError, match="max_states"):
        dfa("(?:a|b)*a(?:a|b){13}")  # 2**14 states
    with pytest.raises(CompileLimitError):
        compile_regex(parse_regex("(?:a|b)*a(?:a|b){8}"), max_states=100)
    assert compile_regex(parse_regex("(?:a|b)*a(?:a|b){5}"), max_states=100).n_states == 64


def test_huge_repeats_fail_fast():
    for rx in (Repeat(literal("a"), 100_000, 100_000),
               Repeat(Repeat(literal("a"), 1000, 1000), 1000, 1000),
               Repeat(CharRanges(UNIVERSE), 0, 50_000)):
        start = time.perf_counter()
        with pytest.raises(CompileLimitError):
            compile_regex(rx)
        assert time.perf_counter() - start < 2.0


def test_long_chain_is_exact():
    d = compile_regex(Repeat(literal("a"), 2000, 2000))
    assert d.n_states == 2001
    assert d.matches(b"a" * 2000) and not d.matches(b"a" * 1999) and not d.matches(b"a" * 2001)


@pytest.mark.parametrize("pattern, budget_ms", [(JSON_STRING, 50), (JSON_NUMBER, 50),
                                                (PY_LONG_STRING, 50), (r"[^\W\d]\w*", 500)])
def test_compile_time(pattern, budget_ms):
    rx = parse_regex(pattern)
    compile_regex(rx)  # warm caches
    start = time.perf_counter()
    compile_regex(rx)
    assert (time.perf_counter() - start) * 1000 < budget_ms


def test_big_classes_stay_small():
    assert dfa(r'[^"\\]').n_states == 9
    assert dfa(r'[^"\\]*').n_states < 10
    assert dfa(JSON_STRING).n_states < 30
    assert dfa(r"\w").n_states < 400


def test_equal_regexes_share_one_dfa_within_a_byte_budget(monkeypatch):
    """compile_regex reuses the DFA of an equal regex (the same bounded string under many
    properties), keyed by the regex and the state budget, and keeps the cache under its
    byte budget; a hit gives the same arrays as a fresh construction; clear_cache forgets."""
    from gramgen._lru import SizedLRU
    from gramgen.automata import dfa as dfa_module

    cache = SizedLRU(dfa_module.DFA_CACHE_BYTES, lambda d: d.transitions.nbytes)
    monkeypatch.setattr(dfa_module, "_cache", cache)
    rx = parse_regex(r'"[^"\\]{0,40}"')
    first = compile_regex(rx)
    again = compile_regex(parse_regex(r'"[^"\\]{0,40}"'))
    assert again is first
    fresh = dfa_module._compile_regex(rx, 10_000)
    assert (fresh.transitions == first.transitions).all() and (fresh.accepting == first.accepting).all()
    assert compile_regex(rx, max_states=5_000) is not first  # another budget, another key
    cache.budget = 4 * first.transitions.nbytes
    for n in range(100, 120):
        compile_regex(parse_regex(f'"[a-z]{{0,{n}}}"'))
        assert cache.total <= cache.budget
        assert cache.total == sum(d.transitions.nbytes for d in cache.values())
    assert compile_regex(rx) is not first  # evicted by the later ones
    kept = compile_regex(rx)
    assert compile_regex(rx) is kept
    dfa_module.clear_cache()
    assert cache.total == 0 and not len(cache)
    assert compile_regex(rx) is not kept


# ------------------------------------------------------- native builder == Python


def _native_module():
    from gramgen.automata import dfa as dfa_module

    if dfa_module._dfabuild is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native DFA builder was not built"
        pytest.skip("gramgen.automata._dfabuild was not built (no C compiler at install)")
    return dfa_module


def _same_outcome(rx, max_states: int) -> None:
    """Both builders give identical tables, or both stop at a limit."""
    dfa_module = _native_module()
    outcomes = []
    for native in (True, False):
        try:
            d = dfa_module._compile_regex(rx, max_states, native=native)
            outcomes.append((d.transitions.tolist(), d.accepting.tolist()))
        except CompileLimitError as exc:
            outcomes.append(("limit", "max_states" in str(exc)))
    assert outcomes[0] == outcomes[1], rx


_leaf = st.one_of(
    st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 0x2FF)), max_size=3).map(
        lambda rs: CharRanges(tuple(sorted((lo, min(lo + w, 0x10FFFF)) for lo, w in rs)))),
    st.sampled_from("abc\u00e9\u4e2d").map(literal),
    st.lists(st.tuples(st.integers(0, 255), st.integers(0, 40)), min_size=1, max_size=3).map(
        lambda rs: ByteRanges(tuple((lo, min(lo + w, 255)) for lo, w in rs))),
)


def _extend(inner):
    return st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: Seq(tuple(xs))),
        st.lists(inner, max_size=4).map(lambda xs: Alt(tuple(xs))),
        st.tuples(inner, st.integers(0, 4), st.one_of(st.none(), st.integers(0, 6))).map(
            lambda t: Repeat(t[0], t[1], t[2])),
        st.tuples(st.lists(st.tuples(st.integers(0, 3), inner, st.integers(0, 3)), max_size=6),
                  st.lists(st.integers(0, 3), max_size=3)).map(
            lambda t: Automaton(4, 0, tuple(t[0]), tuple(sorted(set(t[1]))))),
    )


@settings(max_examples=300, deadline=None)
@given(st.recursive(_leaf, _extend, max_leaves=14), st.sampled_from([10_000, 30]))
def test_native_builder_equals_python_random(rx, max_states):
    """The C pipeline (``_dfabuild``: Thompson NFA, subset construction, trim, Hopcroft,
    canonical numbering) against the Python one on random regex trees, with a state budget
    small enough that some of them stop at it."""
    _same_outcome(rx, max_states)


def _encoded(rxs, native: bool):
    """The program of ``rxs`` (one _Program, roots in turn) and their offsets."""
    from gramgen.automata import dfa as dfa_module

    program = dfa_module._Program()
    roots = [program.node(rx) if native else program.node_py(rx) for rx in rxs]
    return roots, program.code.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.recursive(_leaf, _extend, max_leaves=14), min_size=1, max_size=3))
@example([Repeat(CharRanges(((97, 97),)), 1, 1)])   # (a repeat that a literal prefix reads, the encoder not)
def test_native_encoder_equals_python(rxs):
    """The C encoder of regex trees into the builder's program (``_dfabuild.encode``)
    writes the words of the Python one (``_Program.node_py``), with shared subtrees and
    equal classes once, for several roots in one program."""
    _native_module()
    rxs = rxs + [Seq((rxs[0], rxs[-1], rxs[0]))]  # subtrees shared by identity
    assert _encoded(rxs, True) == _encoded(rxs, False)


_ascii_ranges = st.lists(st.tuples(st.integers(0, 130), st.integers(0, 12)), min_size=0, max_size=4).map(
    lambda rs: tuple((lo, lo + w) for lo, w in rs))
_ascii_leaf = st.one_of(
    _ascii_ranges.map(lambda rs: CharRanges(tuple(sorted(rs)))),   # (sorted: maybe overlapping, adjacent)
    _ascii_ranges.map(CharRanges),                                  # (in any order)
    _ascii_ranges.map(lambda rs: ByteRanges(tuple(sorted(rs)))),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ascii_leaf, min_size=1, max_size=6), st.data())
def test_native_encoder_ascii_classes_equal_python(leaves, data):
    """Classes near ASCII, which the C encoder writes itself when they are normalized and
    within 0..127 (equal ones once, looked up by kind and ranges): the words of the Python
    encoder, for normalized and unnormalized ranges, classes across 127 / 128, a character
    class and a byte class with the same ranges, and the same class twice."""
    _native_module()
    twin = [ByteRanges(x.ranges) if isinstance(x, CharRanges) else CharRanges(x.ranges) for x in leaves]
    rxs = [Seq(tuple(leaves)), Alt(tuple(twin + leaves)), Repeat(data.draw(st.sampled_from(leaves)), 0, 2)]
    rxs += [CharRanges(tuple(x.ranges)) for x in leaves]   # (equal classes, other objects)
    assert _encoded(rxs, True) == _encoded(rxs, False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.recursive(_leaf, _extend, max_leaves=14), min_size=1, max_size=3))
def test_native_regex_key_equals_frozen_key(rxs):
    """The C key of the DFA cache (``_dfabuild.frozen_key``, via ``dfa.regex_key``) is
    the tuple ``ir.frozen_key`` builds, with or without a memo shared by several roots;
    keys of different regexes differ as theirs do."""
    _native_module()
    from gramgen.automata import _dfabuild
    from gramgen.grammar.ir import Regex, frozen_key

    rxs = rxs + [Seq((rxs[0], rxs[-1], rxs[0]))]  # subtrees shared by identity
    memo_py, memo_c = {}, {}
    keys = []
    for rx in rxs:
        want = frozen_key(rx)
        assert _dfabuild.frozen_key(rx, None, Regex) == want
        assert _dfabuild.frozen_key(rx, memo_c, Regex) == frozen_key(rx, memo_py) == want
        keys.append(want)
    for a, ka in zip(rxs, keys):
        for b, kb in zip(rxs, keys):
            assert (ka == kb) == (a == b)


def test_native_regex_key_odd_nodes():
    """Unhashable ranges raise TypeError, a subclass is keyed by its own name (as in
    Python), a non-node is refused, and a tree nested too deeply raises RecursionError."""
    _native_module()
    from gramgen.automata import _dfabuild
    from gramgen.grammar.ir import Regex, frozen_key

    class MySeq(Seq):
        pass

    for rx in (MySeq((literal("ab"),)), Repeat(literal("x"), 0, None), Alt(()),
               Automaton(2, 0, ((0, literal("a"), 1), (1, Seq(()), 0)), (1,))):
        assert _dfabuild.frozen_key(rx, None, Regex) == frozen_key(rx)
    assert _dfabuild.frozen_key(MySeq((literal("a"),)), None, Regex) != frozen_key(Seq((literal("a"),)))
    for rx in (CharRanges([[97, 99]]), Seq((literal("a"), CharRanges([(1, 2)])))):
        with pytest.raises(TypeError):
            frozen_key(rx)
        with pytest.raises(TypeError):
            _dfabuild.frozen_key(rx, None, Regex)
    with pytest.raises(TypeError):
        _dfabuild.frozen_key("a", None, Regex)
    deep = literal("a")
    for _ in range(5000):
        deep = Repeat(Seq((deep, literal("b"))), 0, 1)
    with pytest.raises(RecursionError):
        _dfabuild.frozen_key(deep, None, Regex)


def test_native_encoder_odd_nodes():
    """Ranges given as lists (not hashable), subclasses of the node types, a non-node and
    a regex nested too deeply behave as in Python."""
    _native_module()

    class MySeq(Seq):
        pass

    odd = [CharRanges([(97, 97)]), CharRanges([[97, 99], [0x4E2D, 0x4E2D]]), ByteRanges([(0, 255)]),
           MySeq((literal("ab"), CharRanges([(0x10000, 0x10FFFF)]))), Seq(()), Alt(()),
           Repeat(literal("x"), 0, None), Seq((literal("\u00e9"), ByteRanges(((200, 200),)), literal("z")))]
    assert _encoded(odd, True) == _encoded(odd, False)
    for native in (True, False):
        with pytest.raises(TypeError):
            _encoded([Seq((literal("a"), "b"))], native)
    deep = literal("a")
    for _ in range(5000):
        deep = Repeat(Seq((deep, literal("b"))), 0, 1)
    for native in (True, False):
        with pytest.raises(RecursionError):
            _encoded([deep], native)


def test_native_builder_equals_python_on_real_lexemes():
    """Every lexeme of the shipped grammars and of schemas with bounded strings, formats,
    patterns and numeric ranges, plus the patterns above."""
    import json

    import gramgen
    from gramgen.grammar import builtin_grammars

    grammars = [gramgen.Grammar.builtin(name) for name in builtin_grammars()]
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 40},
        "mail": {"type": "string", "format": "email", "maxLength": 64},
        "when": {"type": "string", "format": "date-time"},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
        "n": {"type": "integer", "minimum": -250, "maximum": 99999},
        "x": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 1e6},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 4}}}
    grammars.append(gramgen.Grammar.from_json_schema(json.dumps(schema), whitespace="flexible"))
    rxs = [rx for g in grammars for rx in g.ir.lexemes.values()]
    rxs += [parse_regex(p) for p in (JSON_STRING, JSON_NUMBER, PY_LONG_STRING, r"[^\W\d]\w*", "(?:a|b)*a(?:a|b){9}")]
    assert len(rxs) >= 60
    for rx in rxs:
        _same_outcome(rx, 10_000)
    _same_outcome(parse_regex("(?:a|b)*a(?:a|b){9}"), 500)  # both stop at max_states


def test_native_builder_limits_and_malformed_programs():
    """Budgets end the C build with the Python errors; a malformed program (offsets out of
    range, unknown kinds, cycles) is a ValueError or a limit, never a crash."""
    dfa_module = _native_module()
    build = dfa_module._dfabuild.compile_program
    with pytest.raises(CompileLimitError, match="NFA states"):
        dfa_module._compile_regex(Repeat(Repeat(literal("a"), 1000, 1000), 1000, 1000), 10_000, native=True)
    with pytest.raises(CompileLimitError, match="max_states"):
        dfa_module._compile_regex(parse_regex("(?:a|b)*a(?:a|b){13}"), 10_000, native=True)
    from array import array

    assert build(array("i", [2, 2, 0, 0]), 0, 1000, 100, 10**6)[0] == 6  # Seq that contains itself
    for program, root in ([array("i", [9, 0])], 0), ([array("i", [0, 5, 1, 2])], 0), \
                         ([array("i", [2, 1, 77])], 0), ([array("i", [0, 1, 300, 400])], 0), \
                         ([array("i", [1, 2, 1, 0, 0, 5])], 0), ([array("i", [0, 0])], 9):
        with pytest.raises(ValueError):
            build(program[0], root, 1000, 100, 10**6)
    rng = np.random.default_rng(0)
    for _ in range(3000):
        program = array("i", rng.integers(-2, 12, size=rng.integers(1, 24)).tolist())
        try:
            status = build(program, 0, 5000, 100, 10**6)[0]
        except ValueError:
            continue
        assert status in (0, 1, 2, 5, 6)


def test_clear_all_empties_every_automaton_cache():
    """``gramgen._lru.clear_all()`` (what the bench and `--cold` call) empties the DFA and
    the code-point automata caches alike: the next compile builds anew."""
    from gramgen._lru import clear_all
    from gramgen.automata import dfa as dfa_module
    from gramgen.grammar import cpdfa

    rx = parse_regex(r"[a-z]{2,7}@x")
    d, c = compile_regex(rx), cpdfa.from_regex(rx)
    assert compile_regex(rx) is d and cpdfa.from_regex(rx) is c
    clear_all()
    assert not len(dfa_module._cache) and not len(cpdfa._cache)
    assert compile_regex(rx) is not d and cpdfa.from_regex(rx) is not c


def test_cached_automata_are_keyed_by_frozen_regexes():
    """The DFA and code-point automaton caches live as long as the process: their keys are
    the regexes as nested tuples (frozen_key), which the garbage collector stops tracking,
    not the regex trees; an equal regex built anew still finds the entry."""
    import gc

    from gramgen.automata import dfa as dfa_module
    from gramgen.grammar import cpdfa
    from gramgen.grammar.ir import CharRanges, Repeat, Seq, frozen_key

    def make():
        return Seq((CharRanges(((97, 122), (0xE9, 0xE9))), Repeat(CharRanges(((48, 57),)), 2, 7)))

    a = dfa_module.compile_regex(make())
    assert dfa_module.compile_regex(make()) is a
    assert cpdfa.from_regex(make()) is cpdfa.from_regex(make())
    key = frozen_key(make())
    assert key == frozen_key(make()) and key != frozen_key(Seq((CharRanges(((97, 122),)),)))
    for cache in (dfa_module._cache, cpdfa._cache):
        keys = list(cache._items)
        assert keys and all(isinstance(k[0], tuple) for k in keys)
    for _ in range(8):   # (one level of nesting untracked per collection at least)
        gc.collect()
    assert not gc.is_tracked(key)
    kept = cpdfa.from_regex(make())
    assert isinstance(kept.edges, tuple) and not any(gc.is_tracked(e) for e in kept.edges)


# ------------------------------------------------- literal prefix + a kept tail DFA


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\"é中\x00", min_size=1, max_size=4),
       st.recursive(_leaf, _extend, max_leaves=10), st.sampled_from([10_000, 12]))
def test_prefix_composition_equals_the_builder(word, tail, max_states):
    """A lexeme that starts with single characters is made as a chain of states before the
    DFA of the rest: where that is the minimal DFA it is the builder's, table, numbering
    and acceptance alike, with a sink table and byte classes that agree with it; where it
    is not (or the rest is empty or too big), with_prefix says so and the builder is used."""
    from gramgen.automata import dfa as dfa_module

    rx = Seq(tuple(literal(c) for c in word) + (tail,))
    split = dfa_module.literal_prefix(rx)
    assert split is not None and split[0].startswith(word.encode())
    try:
        ref = dfa_module._compile_regex(rx, 10_000)
        tail_dfa = dfa_module._compile_regex(split[1], 10_000)
    except CompileLimitError:
        return
    got = dfa_module.with_prefix(split[0], tail_dfa, max_states)
    native, dfa_module.NATIVE = dfa_module.NATIVE, False
    try:   # the same without the native builder (numpy)
        plain = dfa_module.with_prefix(split[0], tail_dfa, max_states)
    finally:
        dfa_module.NATIVE = native
    assert (plain is None) == (got is None)
    if got is None:
        return
    assert np.array_equal(plain.transitions, got.transitions) and np.array_equal(plain.accepting, got.accepting)
    assert got.n_states <= max_states
    assert np.array_equal(got.transitions, ref.transitions) and np.array_equal(got.accepting, ref.accepting)
    sink, sink_acc = got.sink_table()
    n = got.n_states
    assert np.array_equal(sink[:n], np.where(got.transitions < 0, n, got.transitions)) and (sink[n] == n).all()
    assert np.array_equal(sink_acc[:n], got.accepting) and not sink_acc[n]
    classes = got.byte_classes()
    for c in np.unique(classes):
        cols = got.transitions[:, classes == c]
        assert (cols == cols[:, :1]).all()


class _MyChars(CharRanges):
    pass


_prefix_item = st.one_of(
    st.sampled_from([0, 0x22, 0x61, 0x7F, 0x80, 0xE9, 0x7FF, 0x800, 0xD800, 0xDFFF, 0xFFFF, 0x10000, 0x10FFFF,
                     0x110000, -1]).map(lambda c: CharRanges(((c, c),))),
    st.integers(-1, 256).map(lambda b: ByteRanges(((b, b),))),
    st.sampled_from([CharRanges(((97, 98),)), CharRanges(((97, 97), (99, 99))), CharRanges(()),
                     _MyChars(((97, 97),)), Repeat(CharRanges(((97, 97),)), 0, 1), Seq(()),
                     # a character a fixed number of times (``ll`` merged into l{2}), and not
                     Repeat(CharRanges(((97, 97),)), 2, 2), Repeat(CharRanges(((0xE9, 0xE9),)), 3, 3),
                     Repeat(CharRanges(((0x10000, 0x10000),)), 1, 1), Repeat(ByteRanges(((200, 200),)), 2, 2),
                     Repeat(CharRanges(((97, 97),)), 2, 3), Repeat(CharRanges(((97, 97),)), 0, 0),
                     Repeat(CharRanges(((97, 97),)), 4096, 4096), Repeat(CharRanges(((97, 97),)), 4097, 4097),
                     Repeat(CharRanges(((0xD800, 0xD800),)), 2, 2), Repeat(CharRanges(((97, 98),)), 2, 2),
                     Repeat(Repeat(CharRanges(((97, 97),)), 2, 2), 2, 2), Repeat(_MyChars(((97, 97),)), 2, 2),
                     Repeat(CharRanges(((97, 97),)), True, True), Repeat(CharRanges(((97, 97),)), 2, 2.0)]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_prefix_item, min_size=1, max_size=6))
def test_literal_prefix_native_equals_python(items):
    """The run of single characters at the start of a sequence, read in C
    (``_dfabuild.literal_run``), is what the Python reading gives: code points on both sides
    of each UTF-8 length, surrogates and out-of-range values (not literals), bytes, classes
    of several characters, a subclass, other nodes, a character repeated a fixed number of
    times (up to 4,096) and repeats that are not that."""
    from gramgen.automata import dfa as dfa_module

    _native_module()
    rx = Seq(tuple(items))
    got = dfa_module.literal_prefix(rx)
    native, dfa_module.NATIVE = dfa_module.NATIVE, False
    try:
        want = dfa_module.literal_prefix(rx)
    finally:
        dfa_module.NATIVE = native
    assert got == want


def test_prefix_composition_reads_repeated_characters():
    """A key whose name doubles a letter (``seq`` merges the ``ll`` of ``"gallery"`` into
    ``l{2}``, the ``ooo`` of ``"booo"`` into ``o{3}``) is still a chain of states before the
    rest: the builder's table."""
    from gramgen.automata import dfa as dfa_module
    from gramgen.grammar.simplify import seq

    for word in ('"gallery"', '"booo"', '"ééx"'):
        rx = seq([*(literal(c) for c in word), parse_regex(r"[ \t]{0,3}:")])
        assert any(isinstance(i, Repeat) and i.min == i.max for i in rx.items)
        data, rest = dfa_module.literal_prefix(rx)
        assert data == word.encode()
        got = dfa_module.with_prefix(data, dfa_module._compile_regex(rest, 10_000))
        want = dfa_module._compile_regex(rx, 10_000)
        assert np.array_equal(got.transitions, want.transitions) and np.array_equal(got.accepting, want.accepting)


def test_prefix_composition_declines_when_not_minimal():
    """``ab(ab)*c``: after the chain ``ab`` the tail ``(ab)*c`` has a state (after its own
    ``a``) that equals the chain's last one; with_prefix declines and compile_regex gives
    the builder's minimal DFA (4 states); ``ba(ab)*c`` composes."""
    from gramgen.automata import dfa as dfa_module

    tail = parse_regex("(ab)*c")
    tail_dfa = dfa_module._compile_regex(tail, 10_000)
    assert dfa_module.with_prefix(b"ab", tail_dfa) is None
    assert dfa_module.with_prefix(b"xb", tail_dfa) is None   # (the same: only the last byte counts)
    ba = dfa_module.with_prefix(b"ba", tail_dfa)   # (no state of the tail has only an 'a' into its start)
    ref = dfa_module._compile_regex(Seq((literal("b"), literal("a"), tail)), 10_000)
    assert ba is not None and np.array_equal(ba.transitions, ref.transitions)
    rx = Seq((literal("a"), literal("b"), tail))
    dfa_module.clear_cache()
    got = compile_regex(rx)
    ref = dfa_module._compile_regex(rx, 10_000)
    assert np.array_equal(got.transitions, ref.transitions) and got.n_states == 4


def test_keys_share_the_dfa_of_their_value():
    """The lexemes of a schema's properties of one type ("name": string, "city": string)
    are made from one DFA of what follows the key, kept in the DFA cache: built once."""
    from gramgen.automata import dfa as dfa_module

    dfa_module.clear_cache()
    built = []
    real = dfa_module._compile_regex

    def counted(rx, *a, **k):
        built.append(rx)
        return real(rx, *a, **k)

    import gramgen
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in ("name", "city", "street", "zip")},
              "required": ["name", "city", "street", "zip"]}
    ir = gramgen.Grammar.from_json_schema(schema).ir
    dfa_module._compile_regex = counted
    try:
        dfas = dict(zip(ir.lexemes, dfa_module.compile_regexes(ir.lexemes.values())))
    finally:
        dfa_module._compile_regex = real
    for name, rx in ir.lexemes.items():
        ref = real(rx, 10_000)
        assert np.array_equal(dfas[name].transitions, ref.transitions), name
    assert len(built) < len(ir.lexemes), (len(built), len(ir.lexemes))


# ------------------------------------------------- a DFA's words without some prefixes


def _accepts(d: ByteDFA, word: bytes) -> bool:
    q = 0 if d.n_states else -1
    for b in word:
        if q < 0:
            return False
        q = int(d.transitions[q, b])
    return q >= 0 and bool(d.accepting[q])


@settings(max_examples=250, deadline=None)
@given(st.recursive(_leaf, _extend, max_leaves=10), st.randoms(use_true_random=False),
       st.sampled_from([10_000, 10]))
def test_without_prefixes_is_the_difference(rx, rng, max_states):
    """``without_prefixes(F, P)`` accepts exactly F's words that start with no word of P:
    every word up to 4 bytes over the bytes that matter (a byte of each of F's classes and
    the prefixes' bytes), with prefixes taken along F's paths (some of them words of F,
    some the empty word, some outside F). The result is minimal and numbered canonically:
    the C and Python versions give the same tables, and minimizing it again changes
    nothing. Past ``max_states`` states in the product both say so."""
    from gramgen.automata import dfa as dfa_module

    _native_module()
    try:
        F = dfa_module._compile_regex(rx, 10_000)
    except CompileLimitError:
        return
    prefixes = []
    for _ in range(rng.randint(0, 5)):
        q, word = 0, b""
        for _ in range(rng.randint(0, 4)):
            if q < 0 or not F.n_states:
                break
            live = np.flatnonzero(F.transitions[q] >= 0)
            b = int(rng.choice(live.tolist())) if len(live) and rng.random() < 0.9 else rng.randrange(256)
            word += bytes([b])
            q = int(F.transitions[q, b])
        if word or rng.random() < 0.1:
            prefixes.append(word)
    outcomes = []
    for native in (True, False):
        saved, dfa_module.NATIVE = dfa_module.NATIVE, native
        try:
            outcomes.append(dfa_module.without_prefixes(F, prefixes, max_states))
        except CompileLimitError:
            outcomes.append(None)
        finally:
            dfa_module.NATIVE = saved
    got, plain = outcomes
    assert (got is None) == (plain is None)
    if got is None:
        return
    assert np.array_equal(got.transitions, plain.transitions) and np.array_equal(got.accepting, plain.accepting)
    if got.n_states:
        trans, _ = dfa_module._minimize(got.transitions.tolist(), got.accepting.tolist())
        assert len(trans) == got.n_states
    _, reps = np.unique(F.byte_classes(), return_index=True)
    alphabet = sorted(set(reps.tolist()) | {b for p in prefixes for b in p})
    alphabet = alphabet[:4] + sorted(rng.sample(alphabet[4:], max(0, min(4, len(alphabet) - 4))))
    for n in range(5):
        for word in itertools.product(alphabet, repeat=n):
            w = bytes(word)
            want = _accepts(F, w) and not any(w.startswith(p) for p in prefixes)
            assert _accepts(got, w) == want, (w, prefixes)


def test_without_prefixes_edges():
    """The empty prefix leaves nothing; no prefix leaves the DFA as it is; a prefix that
    is a whole word removes just what starts with it; the empty DFA stays empty; bad
    input is refused."""
    from gramgen.automata import dfa as dfa_module

    _native_module()
    F = dfa("ab*c|abd")
    assert dfa_module.without_prefixes(F, [b""]).n_states == 0
    same = dfa_module.without_prefixes(F, [])
    assert np.array_equal(same.transitions, F.transitions) and np.array_equal(same.accepting, F.accepting)
    cut = dfa_module.without_prefixes(F, [b"abb", b"zz"])
    assert [_accepts(cut, w) for w in (b"ac", b"abc", b"abbc", b"abd", b"abbbc")] == [True, True, False, True, False]
    empty = dfa_module.without_prefixes(dfa_module.compile_regex(NOTHING), [b"a"])
    assert empty.n_states == 0
    sink, acc = F.sink_table()
    with pytest.raises(ValueError):
        dfa_module._dfabuild.without_prefixes(sink[:-1], acc[:F.n_states], F.byte_classes(), [], 100)
    with pytest.raises(TypeError):
        dfa_module._dfabuild.without_prefixes(sink, acc[:F.n_states], F.byte_classes(), ["ab"], 100)
    bad = sink.copy()
    bad[0, 0] = F.n_states + 5
    with pytest.raises(ValueError):
        dfa_module._dfabuild.without_prefixes(bad, acc[:F.n_states], F.byte_classes(), [], 100)


@settings(max_examples=300, deadline=None)
@given(st.recursive(_leaf, _extend, max_leaves=12))
def test_fewest_bytes_random(rx):
    """On random regex trees (classes across every UTF-8 length, bytes, automata, empty
    languages): ``fewest_bytes`` is the DFA's shortest word, or below it where a class
    has a range of surrogates only (no word spells them)."""
    from gramgen.grammar.simplify import fewest_bytes
    from test_counted_chains import _shortest_word

    try:
        want = _shortest_word(compile_regex(rx))
    except CompileLimitError:
        return
    got = fewest_bytes(rx)
    assert got <= want
    if not _surrogates_only(rx):
        assert got == want, rx


def _surrogates_only(rx) -> bool:
    """Whether some character class in the tree has a range of surrogates only."""
    if isinstance(rx, CharRanges):
        return any(0xD800 <= lo <= hi <= 0xDFFF for lo, hi in rx.ranges)
    if isinstance(rx, (Seq, Alt)):
        return any(_surrogates_only(i) for i in rx.items)
    if isinstance(rx, Repeat):
        return _surrogates_only(rx.item)
    if isinstance(rx, Automaton):
        return any(_surrogates_only(label) for _, label, _ in rx.edges)
    return False
