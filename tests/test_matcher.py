"""Matcher behaviour beyond single masks: EOS, rejection, rollback, fork, forced tokens,
bitmasks, threads, and the finite-language enumeration oracle."""

from __future__ import annotations

import itertools
import random
import re
import threading

import numpy as np
import pytest

import gramgen
from conftest import hf_tokenizer, vocabulary
from gramgen.automata.bitmask import n_words, unpack
from textgen import WordSampler, tokenize


def small_vocab(pieces: list[str]) -> gramgen.Vocabulary:
    tokens = [p.encode() for p in pieces] + [b""]
    return gramgen.Vocabulary(tokens, eos_token_ids=[len(tokens) - 1])


def enumerate_language(cg, max_tokens: int = 8) -> set[bytes]:
    """Every text reachable by following masks to EOS (depth-first over token sequences)."""
    words: set[bytes] = set()
    eos = cg.vocab.eos_token_ids[0]

    def dfs(m, depth):
        allowed = np.flatnonzero(m.mask())
        for t in allowed.tolist():
            if t == eos:
                words.add(m.text_bytes())
            elif depth < max_tokens:
                m.advance(t)
                dfs(m, depth + 1)
                m.rollback(1)

    dfs(cg.matcher(), 0)
    return words


@pytest.mark.parametrize("pattern", [r"(ab|c)(d|ef)?x{0,2}", r"(?:a|bc){1,3}", r"[a-c]{2}(?:d|)"])
def test_finite_language_enumeration_equals_language(pattern):
    pieces = ["a", "b", "c", "d", "e", "f", "x", "ab", "bc", "cd", "ef", "efx", "xx", "abc", "ca"]
    cg = gramgen.compile(gramgen.Grammar.from_regex(pattern), small_vocab(pieces))
    got = enumerate_language(cg)
    alphabet = "abcdefx"
    expected = {"".join(w).encode() for n in range(0, 7) for w in itertools.product(alphabet, repeat=n)
                if re.fullmatch(pattern, "".join(w))}
    assert got == expected


def test_finite_lark_grammar_enumeration():
    text = 'start: "(" item ("," item)~0..2 ")"\nitem: "x" | "yz" | "x" "y"\n%ignore " "'
    pieces = ["(", ")", ",", "x", "y", "z", "yz", "xy", " ", "(x", "),", ", ", "x)", "( "]
    cg = gramgen.compile(gramgen.Grammar.from_lark(text), small_vocab(pieces))
    got = {w for w in enumerate_language(cg, max_tokens=7) if b" " not in w}
    items = ["x", "yz", "xy"]
    expected = {f"({','.join(c)})".encode() for n in (1, 2, 3) for c in itertools.product(items, repeat=n)
                if len(f"({','.join(c)})") <= 7}
    assert expected <= got
    assert all(re.fullmatch(rb"\((x|yz|xy)(,(x|yz|xy)){0,2}\)", w) for w in got)


@pytest.fixture(scope="module")
def json_cg():
    return gramgen.compile(gramgen.Grammar.builtin("json"), vocabulary("gpt2"))


TEXT = '{"name": "Zoë 日本😀", "tags": [1, -2.5e3, true, null], "nested": {"a": []}}'


def test_eos_only_when_complete_and_termination(json_cg):
    vocab = vocabulary("gpt2")
    eos = vocab.eos_token_ids[0]
    ids = tokenize(TEXT.encode(), hf_tokenizer("gpt2"), vocab)
    m = json_cg.matcher()
    for i, t in enumerate(ids):
        assert m.mask()[eos] == m.is_accepting() == False  # noqa: E712 - incomplete until the end
        with pytest.raises(gramgen.TokenRejected):
            m.advance(eos)
        m.advance(t)
    assert m.is_accepting() and m.mask()[eos] and m.check(eos)
    m.advance(eos)
    assert m.is_terminated() and not m.mask().any()
    with pytest.raises(gramgen.TokenRejected):
        m.advance(ids[0])
    m.rollback(1)
    assert not m.is_terminated() and m.is_accepting()


def test_rejected_token_leaves_state_unchanged(json_cg):
    vocab = vocabulary("gpt2")
    m = json_cg.matcher()
    m.advance_many(tokenize(b'{"a": ', hf_tokenizer("gpt2"), vocab))
    before = m.mask()
    bad = int(np.flatnonzero(~before)[5])
    with pytest.raises(gramgen.TokenRejected) as info:
        m.advance(bad)
    assert info.value.token == bad and info.value.position == len(m.tokens)
    assert np.array_equal(m.mask(), before)
    assert not m.check(bad)


def test_rollback_and_fork_against_fresh_matchers(json_cg):
    vocab = vocabulary("gpt2")
    rng = random.Random(3)
    ids = tokenize(TEXT.encode(), hf_tokenizer("gpt2"), vocab)
    for _ in range(10):
        k = rng.randrange(1, len(ids))
        j = rng.randrange(0, k + 1)
        m = json_cg.matcher()
        m.advance_many(ids[:k])
        fork = m.fork()
        m.rollback(j)
        fresh = json_cg.matcher()
        fresh.advance_many(ids[: k - j])
        assert np.array_equal(m.mask(), fresh.mask())
        assert m.is_accepting() == fresh.is_accepting()
        # the fork kept the state before the rollback and is independent of the original
        other = json_cg.matcher()
        other.advance_many(ids[:k])
        assert np.array_equal(fork.mask(), other.mask())
        fork.advance_many(ids[k:])
        assert fork.is_accepting()
        assert np.array_equal(m.mask(), fresh.mask())


def test_mask_is_independent_of_cache_history(json_cg):
    """The same state reached after different texts gives the same mask as a fresh compile."""
    vocab = vocabulary("gpt2")
    ids = tokenize(TEXT.encode(), hf_tokenizer("gpt2"), vocab)
    cold = gramgen.compile(json_cg.grammar, vocab)
    a, b = json_cg.matcher(), cold.matcher()
    for t in ids:
        assert np.array_equal(a.mask(), b.mask())
        a.advance(t)
        b.advance(t)


def test_fill_bitmask_numpy_and_torch(json_cg):
    torch = pytest.importorskip("torch")
    vocab = vocabulary("gpt2")
    m = json_cg.matcher()
    m.advance_many(tokenize(b'{"k": [1, ', hf_tokenizer("gpt2"), vocab))
    expected = m.mask()
    arr = np.full((2, n_words(vocab.size) + 1), -1, dtype=np.int32)
    m.fill_bitmask(arr, row=1)
    assert np.array_equal(unpack(arr[1, : n_words(vocab.size)].view(np.uint32), vocab.size), expected)
    assert (arr[0] == -1).all()
    tensor = gramgen.allocate_token_bitmask(3, vocab.size)
    m.fill_bitmask(tensor, row=2)
    got = unpack(tensor[2].numpy().view(np.uint32), vocab.size)
    assert np.array_equal(got, expected)
    assert isinstance(tensor, torch.Tensor)


def test_forced_tokens_are_the_only_choice():
    vocab = vocabulary("gpt2")
    g = gramgen.Grammar.from_lark('start: "{\\"answer\\": \\"" WORD "\\"}"\nWORD: /[a-z]+/')
    cg = gramgen.compile(g, vocab)
    m = cg.matcher()
    assert m.forced_bytes() == b'{"answer": "'
    forced = m.forced_tokens()
    assert forced, "the opening of the object is forced"
    probe = cg.matcher()
    for t in forced:
        assert probe.check(t)
        probe.advance(t)
    spelled = probe.text_bytes()
    assert b'{"answer": "'.startswith(spelled) and len(spelled) >= 8
    assert m.tokens == []  # forced_tokens does not move the matcher
    m.advance_many(tokenize(b'{"answer": "yes', hf_tokenizer("gpt2"), vocab))
    assert m.forced_bytes() == b"" and m.forced_tokens() == []  # more letters or the end


def test_utf8_partial_tokens_against_brute_force():
    from reference import ReferenceGrammar, brute_force_mask

    vocab = vocabulary("qwen2")
    g = gramgen.Grammar.from_regex(r'"[^"]*"')
    cg, ref = gramgen.compile(g, vocab), ReferenceGrammar(g.ir)
    text = '"日本語のテキスト😀👍🏽 émoji"'.encode()
    ids = tokenize(text, hf_tokenizer("qwen2"), vocab)
    m, chart = cg.matcher(), ref.initial()
    for t in ids[:6]:
        assert set(np.flatnonzero(m.mask()).tolist()) == brute_force_mask(ref, chart, vocab)
        m.advance(t)
        for b in vocab.token_bytes(t):
            chart = ref.feed(chart, b)
    # a token holding half a UTF-8 character is accepted exactly when the rest can follow
    partial = [i for i in range(vocab.size) if vocab.token_bytes(i) == b"\xe6"]
    if partial:
        assert m.check(partial[0])


def test_shared_compiled_grammar_across_threads(json_cg):
    vocab = vocabulary("gpt2")
    rng = random.Random(5)
    sampler = WordSampler(json_cg.grammar.ir)
    texts = [tokenize(sampler.word(rng, 6), hf_tokenizer("gpt2"), vocab) for _ in range(6)]
    expected = []
    for ids in texts:
        cg = gramgen.compile(json_cg.grammar, vocab)
        m = cg.matcher()
        row = []
        for t in ids:
            row.append(np.flatnonzero(m.mask()).tolist())
            m.advance(t)
        expected.append(row)
    results: dict[int, list] = {}

    def run(i):
        m = json_cg.matcher()
        row = []
        for t in texts[i]:
            row.append(np.flatnonzero(m.mask()).tolist())
            m.advance(t)
        results[i] = row

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [results[i] for i in range(len(texts))] == expected


def test_special_tokens_never_allowed(json_cg):
    vocab = vocabulary("gpt2")
    m = json_cg.matcher()
    mask = m.mask()
    for t in vocab.special_ids:
        if t not in vocab.eos_token_ids:
            assert not mask[t]


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_masks_without_the_native_kernel_equal_native_ones(monkeypatch, tokenizer):
    """Without the C extension every vocabulary pass falls back to numpy and the exit walk's
    lexeme pass and jump plan to Python (``lexeme_tokens.NATIVE`` off): the masks along
    texts of a schema with nested objects, counted strings and keys other than the declared
    ones must equal the native ones, state by state (each mode compiles its own grammar, so
    no cache is shared)."""
    from gramgen.automata import lexeme_tokens

    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 70}, "n": {"type": "integer", "minimum": -3},
        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}},
        "additionalProperties": {"type": "boolean"}}
    texts = ['{"name":"a \\"quoted\\" word, then more","n":12,"tags":[{"k":"x"},{"k":"y, z"}],"extra":true}',
             '{"name":"","n":-3,"tags":[],"other":false}']
    vocab = vocabulary(tokenizer)
    grammar = gramgen.Grammar.from_json_schema(schema, whitespace="flexible")
    masks = {}
    for native in (True, False):
        monkeypatch.setattr(lexeme_tokens, "NATIVE", native)
        cg = gramgen.compile(grammar, vocab, precompute=False)
        rows = []
        for text in texts:
            m = cg.matcher()
            for t in tokenize(text.encode(), hf_tokenizer(tokenizer), vocab):
                rows.append(m.mask())
                m.advance(t)
            rows.append(m.mask())
        masks[native] = rows
    assert len(masks[True]) == len(masks[False]) > 30
    for i, (a, b) in enumerate(zip(masks[True], masks[False])):
        assert np.array_equal(a, b), i


# -- bad arguments -----------------------------------------------------------------------------

def string_matcher():
    """A matcher inside a JSON-like string over 32 tokens: EOS first, then ``"`` and 30
    letters, so that the last token (id 31) is allowed in the string and the packed mask
    is exactly one word (a negative id would read its top bit)."""
    letters = [chr(c) for c in range(ord("a"), ord("a") + 26)] + ["A", "B", "C", "D"]
    vocab = gramgen.Vocabulary([b""] + [p.encode() for p in ['"', *letters]], eos_token_ids=[0])
    assert vocab.size == 32
    m = gramgen.compile(gramgen.Grammar.from_regex(r'"[a-zA-D]*"'), vocab).matcher()
    m.advance(1)
    return m


@pytest.mark.parametrize("bad", [-1, -32, 32, 10**6, "5", None, 1.5, True, b"\x01", [3]])
def test_token_ids_that_are_no_vocabulary_ids_are_configuration_errors(bad):
    m = string_matcher()
    assert m.mask()[31]  # the mask is cached: check() reads it
    before = m.tokens
    for call in (m.check, m.advance, lambda t: m.advance_many([2, t])):
        with pytest.raises(gramgen.ConfigurationError, match="token id"):
            call(bad)
    assert m.tokens == before + [2]  # advance_many applied the good id before the bad one
    assert m.check(np.int64(31)) and m.check(31)  # numpy ints are ids too
    m.advance(np.int32(31))
    assert m.tokens == before + [2, 31]


def test_advance_many_needs_an_iterable_of_ids():
    m = string_matcher()
    for bad in (None, 5, "ab"):
        with pytest.raises(gramgen.ConfigurationError, match="advance_many"):
            m.advance_many(bad)
    m.advance_many(np.array([2, 3], dtype=np.int64))
    assert m.text_bytes() == b'"ab'


@pytest.mark.parametrize("bad", [-1, 4, 0.5, "1", None])
def test_rollback_beyond_the_start_or_not_an_int(bad):
    m = string_matcher()
    m.advance_many([2, 3])
    with pytest.raises(gramgen.ConfigurationError, match="roll back|n_tokens"):
        m.rollback(bad)
    assert m.text_bytes() == b'"ab'
    m.rollback(np.int64(2))
    assert m.text_bytes() == b'"'


def test_fill_bitmask_takes_only_int32_rows_in_range():
    torch = pytest.importorskip("torch")
    m = string_matcher()
    good = np.full((2, 1), -1, dtype=np.int32)
    m.fill_bitmask(good, 1)
    assert unpack(good[1].view(np.uint32), 32).tolist() == m.mask().tolist() and good[0, 0] == -1
    bad = [(np.zeros((2, 1), dtype=np.float32), 0, "int32"),        # float: silently converted before
           (np.zeros((2, 1), dtype=np.int64), 0, "int32"),
           (np.zeros((2, 1), dtype=np.uint32), 0, "int32"),
           (np.zeros(2, dtype=np.int32), 0, "shape"),
           (np.zeros((2, 0), dtype=np.int32), 0, "shape"),
           (np.zeros((2, 1, 1), dtype=np.int32), 0, "shape"),
           (np.zeros((2, 1), dtype=np.int32), 2, "row 2"),
           (np.zeros((2, 1), dtype=np.int32), -1, "row -1"),
           (np.zeros((2, 1), dtype=np.int32), 0.0, "row must be an int"),
           (np.zeros((2, 1), dtype=np.int32), None, "row must be an int"),
           ([[0], [0]], 0, "numpy array or torch tensor"),
           (torch.zeros((2, 1)), 0, "int32"),
           (torch.zeros((2, 1), dtype=torch.int32), 5, "row 5")]
    for target, row, message in bad:
        snapshot = target.copy() if isinstance(target, np.ndarray) else None
        with pytest.raises(gramgen.ConfigurationError, match=message):
            m.fill_bitmask(target, row)
        if snapshot is not None:
            assert np.array_equal(target, snapshot)  # nothing written
    read_only = np.zeros((1, 1), dtype=np.int32)
    read_only.flags.writeable = False
    with pytest.raises(gramgen.ConfigurationError, match="read-only"):
        m.fill_bitmask(read_only)


def test_forced_bytes_limit_and_matcher_argument():
    m = string_matcher()
    assert m.forced_bytes(np.int64(3)) == b""
    for bad in (-1, "4", None, 2.0):
        with pytest.raises(gramgen.ConfigurationError, match="limit"):
            m.forced_bytes(bad)
    with pytest.raises(gramgen.ConfigurationError, match="CompiledGrammar"):
        gramgen.Matcher(gramgen.Grammar.from_regex("a"))
