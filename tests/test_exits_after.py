"""Exit tokens decided by the lexemes that start after their lexeme ends, without the
parser's walk (``TokenClasses.exits_after``): a token that ends the whitespace and stays
inside a word that may start there is taken, one whose rest dies in every such lexeme is
not, the rest is walked. Masks with the shortcut equal those of the walk alone on real
programming-language grammars and tokenizers (ignored whitespace in SynCode's grammars,
whitespace lexemes in the rules of the shipped Python grammar), and brute force on small
vocabularies with the shortcut on every scan."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import numpy as np
import pytest

import gramgen
from gramgen.automata import bitmask
from conftest import SHARED, hf_tokenizer, vocabulary

ROOT = Path(__file__).resolve().parents[1]
SYNCODE = SHARED / "data" / "lark" / "syncode"
TEXTS = {
    "c.lark": ROOT / "bench" / "data" / "lark" / "c.c",
    "java.lark": ROOT / "bench" / "data" / "lark" / "java.java",
    "go.lark": ROOT / "bench" / "data" / "lark" / "go.go",
    "sql.lark": sorted((ROOT / "tests" / "data" / "sql").glob("*.sql"))[0],
    # no %ignore: its whitespace lexemes are in the rules, exits decided after them
    "python_subset": ROOT / "tests" / "data" / "python" / "07_exceptions.py",
}


def _compiled_pair(gname: str, tname: str):
    if gname.endswith(".lark"):
        grammar = gramgen.Grammar.from_lark((SYNCODE / gname).read_text(encoding="utf-8"), start="start")
    else:
        grammar = gramgen.Grammar.builtin(gname)
    vocab = vocabulary(tname)
    on = gramgen.compile(grammar, vocab)
    off = gramgen.compile(grammar, vocab)
    off.classes.EXITS_BY_STARTS = False
    return on, off, vocab


@pytest.mark.parametrize("tname", ["llama3", "llama2", "gpt2"])
@pytest.mark.parametrize("gname", list(TEXTS))
def test_exits_after_masks_equal_the_walk(gname, tname):
    on, off, vocab = _compiled_pair(gname, tname)
    assert on.classes.decides_exits() and not off.classes.decides_exits()
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
        if following and step < len(ids) and rng.random() < 0.85 and a[ids[step]]:
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
    # the shortcut did decide tokens both ways: taken ones, and exits it left out (a
    # lexeme that is not ignored goes through it with many exits only: a large vocabulary)
    entries = list(on.classes._exits_after.items())
    if not on.tables.ignore_lexemes and tname != "llama3":
        return
    assert any(words.any() for _, (words, _) in entries)
    assert any(bitmask.count(undecided) < on.classes.lexeme_tokens(k, q).n_exits
               for (k, q, _), (_, undecided) in entries)


def test_exit_classes_by_rest():
    """The native classes of a few hand-picked tokens after a space in C: the lexemes that
    read the rest to its end, and those that end inside it."""
    on, _, vocab = _compiled_pair("c.lark", "gpt2")
    tables, tt = on.tables, on.token_table
    names = tables.lexeme_names
    k = tables.ignore_lexemes[0]
    id_of = {vocab.token_bytes(i): i for i in range(vocab.size)}
    ranks = np.array([tt.id_to_rank[id_of[t]] for t in (b" int", b" return", b" foo", b" (", b" ()")],
                     dtype=np.int64)
    class_of, bits, reads = tables.native.exit_classes(k, 0, ranks, tt.blob, tt.offsets)
    # (each rest starts at least one lexeme, which reads at least its first byte)
    assert reads >= len(ranks)
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


def test_native_exit_classes_rejects_bad_arguments():
    on, _, _ = _compiled_pair("c.lark", "gpt2")
    tables, tt = on.tables, on.token_table
    k = tables.ignore_lexemes[0]
    native = tables.native
    ok = np.array([0, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="no such lexeme state"):
        native.exit_classes(k, tables.lex_dfas[k].n_states, ok, tt.blob, tt.offsets)
    with pytest.raises(ValueError, match="no such lexeme state"):
        native.exit_classes(len(tables.lex_dfas), 0, ok, tt.blob, tt.offsets)
    with pytest.raises(ValueError, match="out of range"):
        native.exit_classes(k, 0, np.array([len(tt.sorted_bytes)], dtype=np.int64), tt.blob, tt.offsets)
    with pytest.raises(ValueError, match="offsets: int64"):
        native.exit_classes(k, 0, ok, tt.blob, tt.offsets.astype(np.int32))
    with pytest.raises(ValueError, match="out of range"):   # an offset past the blob
        native.walk_exits([on.matcher()._chart[0]], [], ok, tt.blob[:1], tt.offsets)
    class_of, classes, reads = native.exit_classes(k, 0, np.zeros(0, dtype=np.int64), tt.blob, tt.offsets)
    assert class_of == b"" and classes == b"" and reads == 0


@pytest.mark.parametrize("gname", ["python_subset.lark", "sql.lark", "ignored-ws-comments", "json.lark"])
def test_exits_after_on_every_scan_equal_brute_force(gname):
    """Every scan with exits decided by the lexemes started after it (not only ignored
    lexemes and large exit sets), against the independent reference recogniser on a small
    vocabulary rich in tokens that span lexemes, at many states."""
    from test_masks import _small_vocab, grammar, reference, walk_and_compare
    from textgen import WordSampler, greedy_tokenize

    rng = random.Random(11)
    sampler = WordSampler(grammar(gname).ir)
    words = [sampler.word(rng, max_depth=8) for _ in range(24)]
    vocab = _small_vocab(words, rng)
    cg = gramgen.compile(grammar(gname), vocab)
    cg.classes.exits_after_pays = lambda k, q, count=True: True
    total = 0
    for w in words[:4]:
        total += walk_and_compare(cg, reference(gname), vocab, greedy_tokenize(w, vocab), rng, 30, check_sample=16)
    assert total >= 20
    assert any(words.any() for words, _ in cg.classes._exits_after.values())


def test_started_after_an_ignored_lexeme_is_what_started_where_it_began():
    """An ignored lexeme resumes the items of the set where it started: in a grammar
    without split lexemes, the lexemes that start after it are those that started there
    (its origin's scans in a first state with that origin)."""
    on, _, vocab = _compiled_pair("c.lark", "gpt2")
    tables = on.tables
    m = on.matcher()
    m.advance_text("int add(int a, int b) {\n    return a + b;\n}\n")
    chart = m._chart
    checked = 0
    for j in range(1, len(chart)):
        for (k, q), origins in chart[j].scans.items():
            if not tables.is_ignore[k]:
                continue
            expected = 0
            for o in origins:
                for (k2, q2), o2 in chart[o].scans.items():
                    if q2 == 0 and o in o2:
                        expected |= 1 << k2
            got = np.frombuffer(tables.native.started_after(chart[: j + 1], k, list(origins)), dtype=np.uint64)
            assert sum(int(w) << (64 * i) for i, w in enumerate(got)) == expected
            checked += 1
    assert checked >= 10
    with pytest.raises(IndexError):
        tables.native.started_after(chart, tables.ignore_lexemes[0], [len(chart) + 3])
    with pytest.raises(ValueError, match="lexeme out of range"):
        tables.native.started_after(chart, len(tables.lex_dfas), [0])


@pytest.mark.parametrize("tname", ["llama3", "gpt2"])
def test_exit_classes_read_only_the_lexemes_that_may_follow(tname):
    """The exit classes read only the lexemes that may follow the lexeme anywhere (a long
    string's block: the next block or its tail, not the other lexemes of the schema that
    start with a letter). Every decision equals the one from classes over all lexemes, at
    every scan of a text that crosses block ends (the shortcut on every scan), and the
    masks equal the walk's alone."""
    schema = {"type": "object", "properties": {
        **{f"key_{i}": {"type": "string", "enum": [f"value {i}", f"other {i}"]} for i in range(30)},
        "long": {"type": "string", "maxLength": 2000}, "n": {"type": "integer"}}}
    grammar = gramgen.Grammar.from_json_schema(schema)
    vocab = vocabulary(tname)
    on, off = gramgen.compile(grammar, vocab), gramgen.compile(grammar, vocab)
    off.classes.EXITS_BY_STARTS = False
    on.classes.exits_after_pays = lambda k, q, count=True: True
    cls = on.classes
    text = ('{"key_3": "value 3", "long": "' + ("the quick brown fox jumps over a lazy dog, " * 12)[:500]
            + '", "n": 12}')
    m_on, m_off = on.matcher(), off.matcher()
    for t in hf_tokenizer(tname).encode(text, add_special_tokens=False):
        assert np.array_equal(m_on.mask(), m_off.mask()), m_on.text_bytes()[-40:]
        m_on.advance(t)
        m_off.advance(t)
    assert m_on.is_accepting()
    n_words = (len(on.tables.lex_dfas) + 63) // 64
    narrower = 0
    for (k, q, starts), (words, undecided) in list(cls._exits_after.items()):
        assert int.from_bytes(starts, "little") & ~on.tables.follow_lexemes[k] == 0
        ranks, class_of, bits, big = cls._exit_classes(k, q, within=False)
        wanted = np.frombuffer(starts, dtype=np.uint64)
        taken = (bits[:, :n_words] & wanted).any(axis=1)
        open_ = ~taken & (bits[:, n_words:] & wanted).any(axis=1)
        want_words = np.zeros_like(words)
        want_undecided = np.zeros_like(undecided)
        for c, (id_words, rank_words) in big.items():
            if taken[c]:
                want_words |= id_words
            elif open_[c]:
                want_undecided |= rank_words
        bitmask.set_bits(want_words, ranks[taken[class_of]], on.token_table.rank_to_id)
        bitmask.set_bits(want_undecided, ranks[open_[class_of]])
        assert np.array_equal(words, want_words) and np.array_equal(undecided, want_undecided), (k, q)
        narrower += len(cls._exit_classes(k, q)[2]) < len(bits) or bin(on.tables.follow_lexemes[k]).count("1") < 8
    assert narrower
    with pytest.raises(ValueError, match="one bit per lexeme"):
        on.tables.native.exit_classes(0, 0, np.zeros(0, dtype=np.int64), on.token_table.blob,
                                      on.token_table.offsets, b"\0" * (8 * n_words + 1))


def test_exit_classes_are_made_after_two_costly_walks():
    """A scan that is not ignored gets exit classes once two walks of its exits were
    costly (at least one unit of work per EXIT_WALK_SHARE exit tokens): near a long
    string's block end, where a walk after the first is cheap (it folds the tokens that
    cross, and finds the first walk's passes cached), the classes would cost far more."""
    grammar = gramgen.Grammar.from_json_schema({"type": "string", "maxLength": 2000})
    cg = gramgen.compile(grammar, vocabulary("llama3"))
    cls = cg.classes
    k = next(i for i, n in enumerate(cg.tables.lexeme_names) if n.startswith("BLOCK"))
    many = [q for q in range(cg.tables.lex_dfas[k].n_states)
            if cls.lexeme_tokens(k, q).n_exits >= cls.EXITS_BY_STARTS_MIN]
    assert len(many) >= 2
    costly, cheap = many[:2]
    n = cls.lexeme_tokens(k, costly).n_exits
    for q, work in ((costly, -(-n // cls.EXIT_WALK_SHARE)), (cheap, 3_000)):
        assert not cls.exits_after_pays(k, q, count=False)   # not counted: no visit noted
        cls.note_exit_walk([(k, q)], work)                   # (not asked about: not noted)
        assert not cls.exits_after_pays(k, q)
        cls.note_exit_walk([(k, q)], work * 4)
        assert not cls.exits_after_pays(k, q)
        cls.note_exit_walk([(k, q)], work)
    assert cls.exits_after_pays(k, costly)
    assert not cls.exits_after_pays(k, cheap)
    cls.note_exit_walk([(k, cheap)], 10 ** 9)   # (two walks noted: the least stands)
    assert not cls.exits_after_pays(k, cheap)


def test_exit_classes_are_not_made_where_foreseen_costly():
    """exits_after_pays after two costly walks: yes while the classes are foreseen cheap
    (by the reads per exit token of the lexeme: measured on a sample before its first
    classes, then those its first classes took), no past TokenClasses.EXIT_CLASS_WORK."""
    on, _, _ = _compiled_pair("c.lark", "gpt2")
    cls = on.classes
    k = next(k for k in range(len(on.tables.lex_dfas)) if not on.tables.is_ignore[k]
             and cls.lexeme_tokens(k, 0).n_exits)
    n_exits = cls.lexeme_tokens(k, 0).n_exits
    cls.EXITS_BY_STARTS_MIN = 1
    cls._exit_visits[(k, 0)] = (cls.EXIT_WALKS_SEEN, 10 * n_exits)
    assert k not in cls._exit_reads
    assert cls.exits_after_pays(k, 0)
    assert cls._exit_reads[k] > 0   # measured on a sample
    cls.EXIT_CLASS_WORK = n_exits * (cls.EXIT_CLASS_TOKEN_UNITS + cls._exit_reads[k]) - 1
    assert not cls.exits_after_pays(k, 0)
    del cls.EXIT_CLASS_WORK
    cls._exit_reads[k] = cls.EXIT_CLASS_WORK / n_exits - cls.EXIT_CLASS_TOKEN_UNITS   # just within
    assert cls.exits_after_pays(k, 0)
    cls._exit_reads[k] += 1
    assert not cls.exits_after_pays(k, 0)
    # the reads per exit token are those the native classes counted
    fresh = gramgen.compile(on.grammar, on.vocab).classes
    fresh._exit_classes(k, 0)
    assert fresh._exit_reads[k] > 0


def test_sampled_reads_per_exit_are_near_the_classes():
    """The sample's reads per exit token stand for the whole state's: within a quarter of
    what the classes of all its exit tokens count (a long string's block end, Llama 3)."""
    grammar = gramgen.Grammar.from_json_schema({"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 2000}, "b": {"type": "integer"}}})
    vocab = vocabulary("llama3")
    sampled, full = gramgen.compile(grammar, vocab).classes, gramgen.compile(grammar, vocab).classes
    k = next(i for i, n in enumerate(sampled.tables.lexeme_names) if n.startswith("BLOCK"))
    q = max(range(sampled.tables.lex_dfas[k].n_states), key=lambda q: sampled.lexeme_tokens(k, q).n_exits)
    assert sampled.lexeme_tokens(k, q).n_exits > 4 * sampled.EXIT_READS_SAMPLE
    guess = sampled._sample_reads(k, q)
    full._exit_classes(k, q)
    assert abs(guess - full._exit_reads[k]) <= 0.25 * full._exit_reads[k], (guess, full._exit_reads[k])
