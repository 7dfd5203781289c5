"""The names' mask (gramgen.monitors.names) against the rules written on strings, for every
token of a byte-level BPE (GPT-2) and a SentencePiece (Llama 2) vocabulary.

The oracles below restate the rules of design/05-monitors.md directly on ``typed + bytes(t)``,
knowing nothing of tries or token tables: (a) a prefix of a name, or (b) a name followed by
a character that is not an identifier character (or a character still being written that
can become one). A token ending inside a UTF-8 character is decided by the characters it
can still become, enumerated here by brute force over the continuation bytes.
"""

from __future__ import annotations

import codecs
import functools
import itertools

import numpy as np
import pytest
from conftest import vocabulary

from gramgen.monitors.names import index_for, keyword_allows, name_set

NAMES = {"append", "apply", "app", "count", "__len__"}
TYPED = ["", "ap", "app", "appl", "x"]
#: names with characters outside ASCII, so the walk meets tokens that end inside a character
WIDE_NAMES = {"café", "naïve", "日本語", "count"}
WIDE_TYPED = ["", "caf", "café", "na", "日", "日本"]
VOCABS = ["gpt2", "llama2"]


def _identifier_char(c: str) -> bool:
    return ("a" + c).isidentifier()


@functools.cache
def _can_become_non_identifier(pending: bytes) -> bool:
    size = {0xC: 2, 0xD: 2, 0xE: 3, 0xF: 4}[pending[0] >> 4]
    for tail in itertools.product(range(0x80, 0xC0), repeat=size - len(pending)):
        try:
            char = (pending + bytes(tail)).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not _identifier_char(char):
            return True
    return False


def _first_char_ends_identifier(rest: bytes) -> bool:
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(rest, final=False)
    if text:
        return not _identifier_char(text[0])
    return _can_become_non_identifier(rest)


def member_rule(names, typed: str, token: bytes) -> bool:
    s = typed.encode() + token
    encoded = [n.encode() for n in names]
    if any(e.startswith(s) for e in encoded):                                   # (a)
        return True
    return any(s.startswith(e) and len(s) > len(e) and _first_char_ends_identifier(s[len(e):])
               for e in encoded)                                                # (b)


def optional_rule(names, token: bytes) -> bool:
    """typed == "": whitespace first; then a name by (a)/(b), or anything that does not
    start an identifier."""
    rest = token.lstrip(b" \t\f\r\n")
    if not rest:
        return True
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(rest, final=False)
    if text and not _identifier_char(text[0]):
        return True
    if not text and _can_become_non_identifier(rest):
        return True
    return member_rule(names, "", rest)


def keyword_rule(names, typed: str, token: bytes) -> bool:
    """An identifier followed by "=" (not "=="), directly or after whitespace, must be a
    name; a character still being written at the end of the token decides nothing yet.
    ``typed`` is the identifier and any whitespace written after it."""
    s = typed + codecs.getincrementaldecoder("utf-8")("replace").decode(token, final=False)
    s = s.lstrip(" \t\f\r\n")
    end = 0
    while end < len(s) and _identifier_char(s[end]):
        end += 1
    rest = s[end:].lstrip(" \t\f\r\n")
    if end == 0 or rest[:1] != "=" or rest[1:2] == "=":
        return True
    return s[:end] in names


@pytest.mark.parametrize("vocab_name", VOCABS)
def test_member_mask_equals_the_string_rules_for_every_token(vocab_name):
    vocab = vocabulary(vocab_name)
    index = index_for(vocab)
    for names, typed_list in ((NAMES, TYPED), (WIDE_NAMES, WIDE_TYPED)):
        names_ = name_set(names, vocab)
        for typed in typed_list:
            got = index.to_ids(names_.mask(typed.encode(), "member"), neutral=False)
            want = np.array([bool(t) and member_rule(names, typed, t) for t in vocab.tokens])
            wrong = np.flatnonzero(got != want)
            assert wrong.size == 0, (typed, [(vocab.tokens[i], bool(got[i])) for i in wrong[:8]])
            if typed == "x":
                assert not got.any()
            if typed == "app":   # "app" is a name: "(" and " " may follow, as may "end" / "ly"
                assert want.sum() > 1000


@pytest.mark.parametrize("vocab_name", VOCABS)
def test_optional_and_keyword_masks_equal_their_string_rules(vocab_name):
    vocab = vocabulary(vocab_name)
    index = index_for(vocab)
    names_ = name_set(NAMES, vocab)
    got = index.to_ids(names_.mask(b"", "optional"), neutral=False)
    want = np.array([bool(t) and optional_rule(NAMES, t) for t in vocab.tokens])
    assert np.array_equal(got, want), [vocab.tokens[i] for i in np.flatnonzero(got != want)[:8]]
    for typed in ["", "app", "cou", "x", "app ", "x \n  ", "count\t"]:
        got = index.to_ids(names_.mask(typed.encode(), "keyword"), neutral=False)
        want = np.array([bool(t) and keyword_rule(NAMES, typed, t) for t in vocab.tokens])
        assert np.array_equal(got, want), [vocab.tokens[i] for i in np.flatnonzero(got != want)[:8]]
        refused = [vocab.tokens[i] for i in np.flatnonzero(~got & np.array([bool(t) for t in vocab.tokens]))]
        assert all(b"=" in t for t in refused)
        if typed.startswith("x"):   # "x=" is not a parameter: every "=" that is not "==" is refused
            assert b"=" in refused and b" =" in refused and b"==" not in refused
        if typed == "app ":         # "app =" is a keyword argument; "app x" is not
            assert got[vocab.tokens.index(b" =")] and got[vocab.tokens.index(b"x")]


def test_keyword_rule_on_written_cases():
    names = {"key", "value"}
    assert keyword_allows(names, b"", b"key=")
    assert not keyword_allows(names, b"", b"kex=")
    assert keyword_allows(names, b"", b"  kex")          # still growing: a positional argument?
    assert keyword_allows(names, b"kex", b"==")          # a comparison
    assert not keyword_allows(names, b"kex", b"=")       # "=" ending the token: read as a keyword
    assert not keyword_allows(names, b"kex", b" =")      # "kex = ...": checked too
    assert not keyword_allows(names, b"", b" kex =")
    assert not keyword_allows(names, b"kex \n", b"\t= 1")  # a newline in the call's brackets
    assert keyword_allows(names, b"key ", b"= 1")
    assert keyword_allows(names, b"kex ", b"== 1")       # a comparison, spaced
    assert keyword_allows(names, b"kex ", b" ")          # undecided: "=" may still come
    assert keyword_allows(names, b"kex", b" + y=")       # an expression, not a name before "="
    assert keyword_allows(names, b"kex ", b"y=")         # two words: not a keyword argument
    assert keyword_allows(names, b"ke", b"y=")
    assert keyword_allows(names, b"", b"=")              # no identifier before it


def test_masks_of_a_name_set_are_cached_and_read_only():
    vocab = vocabulary("gpt2")
    names_ = name_set(NAMES, vocab)
    first = names_.mask(b"ap", "member")
    assert names_.mask(b"ap", "member") is first
    assert name_set(set(NAMES), vocab) is names_
    with pytest.raises(ValueError):
        first[0] = True
