"""The exit tokens of ignored lexemes decided without the parser's walk
(``TokenClasses.ignored_exits``): a token that ends the whitespace and stays inside a word
that may start there is taken, one whose rest dies in every such lexeme is not, the rest
is walked. Masks with the shortcut equal those of the walk alone on real programming-
language grammars and tokenizers (brute force on a small grammar with ignored whitespace
and comments is in test_masks.py, ``ignored-ws-comments``)."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import numpy as np
import pytest

import gramgen
from conftest import SHARED, hf_tokenizer, vocabulary

ROOT = Path(__file__).resolve().parents[1]
SYNCODE = SHARED / "data" / "lark" / "syncode"
TEXTS = {
    "c.lark": ROOT / "bench" / "data" / "lark" / "c.c",
    "java.lark": ROOT / "bench" / "data" / "lark" / "java.java",
    "go.lark": ROOT / "bench" / "data" / "lark" / "go.go",
    "sql.lark": sorted((ROOT / "tests" / "data" / "sql").glob("*.sql"))[0],
}


def _compiled_pair(gname: str, tname: str):
    grammar = gramgen.Grammar.from_lark((SYNCODE / gname).read_text(encoding="utf-8"), start="start")
    vocab = vocabulary(tname)
    on = gramgen.compile(grammar, vocab)
    off = gramgen.compile(grammar, vocab)
    off.classes.IGNORED_EXITS = False
    return on, off, vocab


@pytest.mark.parametrize("tname", ["llama3", "llama2", "gpt2"])
@pytest.mark.parametrize("gname", list(TEXTS))
def test_ignored_exits_masks_equal_the_walk(gname, tname):
    on, off, vocab = _compiled_pair(gname, tname)
    assert on.classes.ignores_by_starts() and not off.classes.ignores_by_starts()
    ids = hf_tokenizer(tname).encode(TEXTS[gname].read_text(encoding="utf-8")[:600], add_special_tokens=False)
    rng = random.Random(zlib.crc32(f"{gname}/{tname}".encode()))
    m_on, m_off = on.matcher(), off.matcher()
    following = True
    steps = 0
    for step in range(len(ids) + 20):
        a, b = m_on.mask(), m_off.mask()
        if not np.array_equal(a, b):
            text = m_on.text_bytes()
            extra = np.flatnonzero(a & ~b)[:5].tolist()
            missing = np.flatnonzero(b & ~a)[:5].tolist()
            pytest.fail(f"after {text[-60:]!r}: taken by the shortcut, not by the walk "
                        f"{[vocab.token_bytes(t) for t in extra]}; the other way "
                        f"{[vocab.token_bytes(t) for t in missing]}")
        steps += 1
        allowed = [t for t in np.flatnonzero(a).tolist() if t not in vocab.eos_token_ids]
        if following and step < len(ids) and rng.random() < 0.85:
            t = ids[step]
        elif allowed:
            following = False
            # prefer tokens that start with whitespace: they exercise the shortcut
            spaced = [t for t in allowed if vocab.token_bytes(t)[:1] in (b" ", b"\n", b"\t")]
            t = rng.choice(spaced if spaced and rng.random() < 0.7 else allowed)
        else:
            break
        m_on.advance(t)
        m_off.advance(t)
    assert steps >= 20
    # the shortcut did decide tokens both ways: taken ones, and exits it left out
    entries = list(on.classes._ignored_words.values())
    assert any(words.any() for words, _ in entries)
    k = on.tables.ignore_lexemes[0]
    assert any(undecided.sum() < on.classes.lexeme_tokens(k, 0).exits.sum() for _, undecided in entries)


def test_ignored_exit_classes_by_rest():
    """The native classes of a few hand-picked tokens after a space in C: the lexemes that
    read the rest to its end, and those that end inside it."""
    on, _, vocab = _compiled_pair("c.lark", "gpt2")
    tables, tt = on.tables, on.token_table
    names = tables.lexeme_names
    k = tables.ignore_lexemes[0]
    id_of = {vocab.token_bytes(i): i for i in range(vocab.size)}
    ranks = np.array([tt.id_to_rank[id_of[t]] for t in (b" int", b" return", b" foo", b" (", b" ()")],
                     dtype=np.int64)
    class_of, bits = tables.native.ignored_exit_classes(k, 0, ranks, tt.blob, tt.offsets)
    class_of = np.frombuffer(class_of, dtype=np.int32)
    w = (len(names) + 63) // 64
    classes = np.frombuffer(bits, dtype=np.uint64).reshape(-1, 2 * w)

    def members(words) -> set[str]:
        return {names[i] for i in range(len(names)) if int(words[i // 64]) >> (i % 64) & 1}

    alive = [members(classes[c][:w]) for c in class_of]
    ended = [members(classes[c][w:]) for c in class_of]
    assert alive[0] == {"NAME", "INT"} and alive[1] == {"NAME", "RETURN"} and alive[2] == {"NAME"}
    assert alive[3] == {"LPAR"} and not ended[3]
    assert not alive[4] and ended[4] == {"LPAR"}   # "(" ends before ")": the parser decides


def test_native_ignored_exit_classes_rejects_bad_arguments():
    on, _, _ = _compiled_pair("c.lark", "gpt2")
    tables, tt = on.tables, on.token_table
    k = tables.ignore_lexemes[0]
    native = tables.native
    ok = np.array([0, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="no such lexeme state"):
        native.ignored_exit_classes(k, tables.lex_dfas[k].n_states, ok, tt.blob, tt.offsets)
    with pytest.raises(ValueError, match="no such lexeme state"):
        native.ignored_exit_classes(len(tables.lex_dfas), 0, ok, tt.blob, tt.offsets)
    with pytest.raises(ValueError, match="out of range"):
        native.ignored_exit_classes(k, 0, np.array([len(tt.sorted_bytes)], dtype=np.int64), tt.blob, tt.offsets)
    with pytest.raises(ValueError, match="offsets: int64"):
        native.ignored_exit_classes(k, 0, ok, tt.blob, tt.offsets.astype(np.int32))
    with pytest.raises(ValueError, match="out of range"):   # an offset past the blob
        native.walk_exits([on.matcher()._chart[0]], [], ok, tt.blob[:1], tt.offsets)
    class_of, classes = native.ignored_exit_classes(k, 0, np.zeros(0, dtype=np.int64), tt.blob, tt.offsets)
    assert class_of == b"" and classes == b""
