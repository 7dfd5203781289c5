"""Exactness of ``Matcher.mask()``: compared with brute force (every token tried through the
independent reference recogniser in ``reference.py``) at every step of random walks, for
every tokenizer in ../shared/tokenizers and the shipped / shared grammars."""

from __future__ import annotations

import collections
import os
import random
import zlib
from functools import cache

import numpy as np
import pytest

import gramgen
from conftest import SCALE, SHARED, TOKENIZER_NAMES, hf_tokenizer, vocabulary
from reference import ReferenceGrammar, brute_force_mask

from gramgen.automata.token_table import token_table_for
from textgen import WordSampler, tokenize

#: change to explore other random walks; failures print the text that went wrong
SEED = int(os.environ.get("GRAMGEN_TEST_SEED", "0"))


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    atoms = ["a", "b", "ab", "[a-c]", "[^a]", r"\d", r"\w", "[é😀]", ".", "x{2,3}", "(?i:q)", r"\s"]
    if depth >= 2 or rng.random() < 0.3:
        return rng.choice(atoms)
    kind = rng.choice(["seq", "alt", "star", "plus", "opt", "rep"])
    a, b = _random_regex(rng, depth + 1), _random_regex(rng, depth + 1)
    return {"seq": f"{a}{b}", "alt": f"(?:{a}|{b})", "star": f"(?:{a})*", "plus": f"(?:{a})+",
            "opt": f"(?:{a})?", "rep": f"(?:{a}){{1,3}}"}[kind]


IGNORED_GRAMMAR = r"""
start: stmt+
stmt: NAME "=" expr ";" | "if" "(" expr ")" "{" stmt* "}" | "return" expr? ";"
expr: term (("+" | "-" | "<" | "<=") term)*
term: NAME | NUMBER | "(" expr ")" | NAME "(" [expr ("," expr)*] ")"
NAME: /[a-z_][a-z0-9_]*/
NUMBER: /[0-9]+/
COMMENT: /#[^\n]*/ | /\/\*[^*]*\*+([^\/*][^*]*\*+)*\//
%ignore /[ \t\n]+/
%ignore COMMENT
"""

GRAMMAR_SOURCES = {
    "json.lark": lambda: gramgen.Grammar.builtin("json"),
    "python_subset.lark": lambda: gramgen.Grammar.builtin("python_subset"),
    "sql.lark": lambda: gramgen.Grammar.builtin("sql"),
    "json.gbnf": lambda: gramgen.Grammar.from_file(SHARED / "data/gbnf/llama.cpp/json.gbnf"),
    "arithmetic.gbnf": lambda: gramgen.Grammar.from_file(SHARED / "data/gbnf/llama.cpp/arithmetic.gbnf"),
    # long strings are counted in 64-character blocks by rules: two lexemes (a full block, or
    # the rest and the quote) stay alive side by side until one ends
    "schema-long-strings": lambda: gramgen.Grammar.from_json_schema({
        "type": "object", "properties": {"a": {"type": "string", "maxLength": 300},
                                         "b": {"type": ["string", "null"], "minLength": 70, "maxLength": 2000}},
        "required": ["b"], "additionalProperties": False}),
    # ignored whitespace and comments between words, keywords that are also names: the
    # exits of ignored lexemes decided without the parser (TokenClasses.exits_after)
    "ignored-ws-comments": lambda: gramgen.Grammar.from_lark(IGNORED_GRAMMAR),
    "regex": lambda: gramgen.Grammar.from_regex(
        "(?:" + "|".join(_random_regex(random.Random(s)) for s in range(4)) + ")+"),
}


@cache
def grammar(name: str):
    return GRAMMAR_SOURCES[name]()


@cache
def compiled(gname: str, tname: str):
    return gramgen.compile(grammar(gname), vocabulary(tname))


@cache
def reference(gname: str):
    return ReferenceGrammar(grammar(gname).ir)


def walk_and_compare(cg, ref, vocab, tokens_of_text, rng, max_steps, check_sample=64):
    """Follow the text's tokens (sometimes a random allowed token instead) and compare the
    mask with brute force at every step. Returns the number of states compared."""
    m = cg.matcher()
    chart = ref.initial()
    following = True
    compared = 0
    for step in range(max_steps):
        got = set(np.flatnonzero(m.mask()).tolist())
        expected = brute_force_mask(ref, chart, vocab)
        compared += 1
        if got != expected:
            extra = sorted(got - expected)[:5]
            missing = sorted(expected - got)[:5]
            text = m.text_bytes()
            pytest.fail(f"mask differs after {text!r}: allowed but not viable "
                        f"{[(t, vocab.token_bytes(t)) for t in extra]}, viable but forbidden "
                        f"{[(t, vocab.token_bytes(t)) for t in missing]}")
        mask = m.mask()
        probe = rng.sample(range(vocab.size), min(check_sample, vocab.size))
        probe += rng.sample(sorted(got), min(check_sample, len(got)))
        for t in probe:
            assert m.check(t) == bool(mask[t]), f"check({t}) disagrees with mask()"
        choices = [t for t in got if t not in vocab.eos_token_ids]
        if following and step < len(tokens_of_text) and rng.random() < 0.75:
            t = tokens_of_text[step]
            assert t in got, f"the text's own token {t} {vocab.token_bytes(t)!r} is masked out"
        elif choices:
            following = False
            t = rng.choice(sorted(choices))
        else:
            break
        m.advance(t)
        for b in vocab.token_bytes(t):
            chart = ref.feed(chart, b)
        assert chart is not None
    return compared


@pytest.mark.parametrize("tname", TOKENIZER_NAMES)
@pytest.mark.parametrize("gname", list(GRAMMAR_SOURCES))
def test_mask_equals_brute_force_real_tokenizers(gname, tname):
    vocab = vocabulary(tname)
    cg, ref = compiled(gname, tname), reference(gname)
    rng = random.Random(zlib.crc32(f"{gname}/{tname}/{SEED}".encode()))
    sampler = WordSampler(grammar(gname).ir)
    # brute force over 30k-152k tokens costs 0.3-13 s per state (python.lark the most)
    walks = max(1, int(1 * SCALE))
    steps = max(2, int((2 if gname == "python_subset.lark" else 4) * SCALE))
    total = 0
    for _ in range(walks):
        for _attempt in range(20):  # some vocabularies cannot spell every byte (smollm2 lacks 0xF2)
            try:
                ids = tokenize(sampler.word(rng, max_depth=6), hf_tokenizer(tname), vocab)
                break
            except ValueError:
                continue
        total += walk_and_compare(cg, ref, vocab, ids, rng, steps)
    assert total >= 2


def _small_vocab(words: list[bytes], rng: random.Random, n: int = 1500):
    """All single bytes, random pieces of the words, and an EOS: small enough for
    brute force on hundreds of states, rich in tokens that span lexemes."""
    pieces = {bytes([b]) for b in range(256)}
    for _ in range(n):
        w = rng.choice(words)
        if len(w) >= 2:
            i = rng.randrange(len(w) - 1)
            pieces.add(w[i:i + rng.randint(2, 6)])
    tokens = sorted(pieces) + [b""]
    return gramgen.Vocabulary(tokens, eos_token_ids=[len(tokens) - 1])


@pytest.mark.parametrize("gname", list(GRAMMAR_SOURCES))
def test_mask_equals_brute_force_many_states(gname):
    rng = random.Random(7)
    ir = grammar(gname).ir
    sampler = WordSampler(ir)
    words = [sampler.word(rng, max_depth=8) for _ in range(40)]
    vocab = _small_vocab(words, rng)
    cg, ref = gramgen.compile(grammar(gname), vocab), reference(gname)
    total = 0
    # the byte-level reference is slowest on python.lark's and sql.lark's large item sets
    # (sql: 11 s a walk): fewer walks keep the suite within CI's budget
    n_walks = 6 if gname in ("python_subset.lark", "sql.lark") else 12
    for w in words[: max(4, int(n_walks * SCALE))]:
        from textgen import greedy_tokenize

        total += walk_and_compare(cg, ref, vocab, greedy_tokenize(w, vocab), rng, 40, check_sample=32)
    assert total >= 20


SHORTCUT_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}, "code": {"type": "string", "minLength": 3},
                   "kind": {"enum": ["a", "bé", "中文"]}, "n": {"type": "integer", "minimum": -5},
                   "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{2,30}$"}}},
    "required": ["name", "n"]}


@pytest.mark.parametrize("tokenizer", ["llama3", "smollm2"])
def test_sparse_and_chain_shortcuts_classify_like_the_full_run(monkeypatch, tokenizer):
    """States few tokens can start from run the DFA over only those tokens
    (lexeme_tokens.SPARSE_SHARE), and counted string bodies set aside the tokens made of
    bytes that all advance the counter alike (``_uniform_chain``); on every state of a
    schema with bounded strings, enums, numbers and flexible whitespace the classes must
    equal those of the full run over the whole vocabulary."""
    from gramgen.automata import lexeme_tokens

    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SHORTCUT_SCHEMA, whitespace="flexible"),
                         vocabulary(tokenizer))
    checked = {"sparse": 0, "chain": 0}
    for k, dfa in enumerate(cg.tables.lex_dfas):
        table, acc = cg.sink_tables[k]
        for q in range(dfa.n_states):
            runs = []
            for threshold, share in ((lexeme_tokens.SELF_LOOP_SHORTCUT, lexeme_tokens.SPARSE_SHARE), (10**9, 0.0)):
                with monkeypatch.context() as m:
                    m.setattr(lexeme_tokens, "SELF_LOOP_SHORTCUT", threshold)
                    m.setattr(lexeme_tokens, "SPARSE_SHARE", share)
                    runs.append(lexeme_tokens.classify_tokens_numpy(cg.token_table, table, acc, q, cg.follow_masks[k]))
            fast, full = runs
            assert (fast.inside == full.inside).all() and (fast.exits == full.exits).all(), (k, q)
            assert fast.n_exits == full.n_exits
            live = np.flatnonzero(table[q] != table.shape[0] - 1)
            starts = cg.token_table.first_start
            if (starts[live + 1] - starts[live]).sum() < lexeme_tokens.SPARSE_SHARE * len(cg.token_table.sorted_bytes):
                checked["sparse"] += 1
            elif (table[q] != q).all() and lexeme_tokens._uniform_chain(cg.token_table, table, acc, q) is not None:
                checked["chain"] += 1
    assert checked["sparse"] >= 20 and checked["chain"] >= 20, checked


@pytest.mark.parametrize("tokenizer", TOKENIZER_NAMES)
def test_native_classification_equals_numpy(tokenizer):
    """The C kernel (``automata._tokenwalk``, a walk over the vocabulary's trie) and the
    numpy run must classify every token alike from every DFA state of a schema (bounded
    strings, patterns, enums, numbers, flexible whitespace) and of the JSON grammar. The
    brute-force mask tests then cover whichever of the two is in use."""
    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native kernel was not built"
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    vocab = vocabulary(tokenizer)
    checked = 0
    for g in (gramgen.Grammar.from_json_schema(SHORTCUT_SCHEMA, whitespace="flexible"), grammar("json.lark"),
              grammar("schema-long-strings")):
        cg = gramgen.compile(g, vocab, precompute=False)
        by_first = collections.Counter(t[0] for t in cg.token_table.sorted_bytes)
        for k, dfa in enumerate(cg.tables.lex_dfas):
            table, acc = cg.sink_tables[k]
            for q in range(dfa.n_states):
                native = lexeme_tokens.classify_tokens_native(cg.token_table, table, acc, q, cg.follow_masks[k])
                ref = lexeme_tokens.classify_tokens_numpy(cg.token_table, table, acc, q, cg.follow_masks[k])
                assert (native.inside == ref.inside).all(), (k, q)
                assert (native.exits == ref.exits).all() and native.n_exits == ref.n_exits, (k, q)
                # the tokens whose first byte the state takes, counted by hand
                assert lexeme_tokens.first_tokens(cg.token_table, table, q) == sum(
                    n for b, n in by_first.items() if table[q, b] != table.shape[0] - 1), (k, q)
                checked += 1
    assert checked >= 100
    # the scratch masks classify() wrote into are left zeroed (few tokens or many)
    tt = cg.token_table
    assert not any(m.any() for m in lexeme_tokens._scratch(tt.n_words, (len(tt.sorted_bytes) + 31) // 32))
    table = cg.sink_tables[0][0]
    for bad in (-1, table.shape[0] - 1):  # the sink is not a state
        with pytest.raises(ValueError, match="not a state"):
            lexeme_tokens._tokenwalk.first_tokens(table, bad, cg.token_table.first_start)
    with pytest.raises(ValueError, match="first_start"):
        lexeme_tokens._tokenwalk.first_tokens(table, 0, cg.token_table.first_start[:100])


def _rest_fields(token: bytes) -> tuple[int, int, int, int]:
    """The loop-shortcut fields of one token, spelled out (see TokenTable._rests)."""
    lead = token[0]
    k = 2 if 0xC2 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF5 else 1
    k = min(k, len(token))
    rest, words = token[k:], [0, 0]
    for byte in rest:
        bit = 0 if byte == 0 or byte >= 128 else byte
        words[bit // 64] |= 1 << (bit % 64)
    try:
        rest.decode("utf-8")
        ok = any(byte >= 128 for byte in rest) and 0 not in rest
    except UnicodeDecodeError:
        ok = False
    return k, words[0], words[1], int(ok)


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen2", "llama2"])
def test_token_table_rest_fields(tokenizer):
    """The per-token fields of the native walk's loop shortcut (first character length,
    ASCII bytes of the rest, whether the rest is whole UTF-8) equal a byte-by-byte
    computation, on a real vocabulary and on made-up tokens (NUL, truncated and invalid
    UTF-8, surrogates, overlong forms)."""
    from gramgen.automata.token_table import TokenTable

    odd = [b"\x00a", b"a\x00", b"\xe4\xb8", b"\xe4\xb8\xadx", b"x\xe4\xb8", b"x\xed\xa0\x80", b"x\xc0\xaf",
           b"\xf0\x9f\x98\x80\xc3\xa9", b"\xff\xfe", b"ab\x7f", b"a\xc3\xa9\x00", b"\xc3\xa9", b" \xc3\xa9t\xc3\xa9"]
    tables = [token_table_for(vocabulary(tokenizer)), TokenTable(odd)]
    checked = 0
    for tt in tables:
        rng = np.random.default_rng(SEED)
        ranks = range(len(tt.sorted_bytes)) if len(tt.sorted_bytes) < 100 else rng.choice(len(tt.sorted_bytes), 20_000)
        for r in ranks:
            got = (int(tt.char_len[r]), int(tt.rest_bits[r, 0]), int(tt.rest_bits[r, 1]), int(tt.rest_utf8[r]))
            assert got == _rest_fields(tt.sorted_bytes[r]), tt.sorted_bytes[r]
            checked += 1
    assert checked > 20_000 and tables[1].rest_utf8.sum() >= 2


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen2", "short"])
def test_chain_shortcut_against_the_plain_walk(tokenizer):
    """The native walk's chain shortcut (a token whose rest moves the state after its first
    character along a chain of states that take the same bytes alike, no further than the
    chain goes, is inside without a walk) against the plain native walk and numpy, from
    every state of patterns whose bodies loop or count, and take some non-ASCII characters
    and not others (UTF-8 not closed), all of them, or none."""
    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native kernel was not built"
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    if tokenizer == "short":  # tokens of at most 3 bytes: chains far longer than any token
        pieces = sorted({bytes([b]) for b in range(1, 128)} | {b"ab", b"a b", b"\xc3\xa9", b"x\xc3\xa9", b"zz.",
                                                                 b"\"", b"a\"", b"\x00b", b"\xe4\xb8\xad", b"1a"})
        vocab = gramgen.Vocabulary(pieces + [b""], eos_token_ids=[len(pieces)])
    else:
        vocab = vocabulary(tokenizer)
    checked = 0
    for pattern in (r"[a-zé中]+", r"[^\x00-\x1f\u4e00-\u9fff]*!", r"[^\x00-\x1f]*", r"[a-z ]{2,}\.",
                    r"(?:[ -~]|[\u0400-\u04ff])+;", r"\w+ \d*", r"(?:[ -~]|[^\x00-\x7f]\d)*",
                    # counted bodies (chains of states), shorter and longer than CHAIN_STEPS,
                    # with all, some or no non-ASCII characters; cycles of two states
                    r"[a-z ]{2,40}\.", r"[^\x00-\x1f\"]{0,60}\"", r"[ -~é]{3,9}", r"(?:[a-z][a-z])*",
                    r"(?:[a-z][0-9])*", r"[ -~]{0,12}(?:ab)?[ -~]{0,30}"):
        cg = gramgen.compile(gramgen.Grammar.from_regex(pattern), vocab, precompute=False)
        tt = cg.token_table
        table, acc = cg.sink_tables[0]
        for q in range(cg.tables.lex_dfas[0].n_states):
            fast = lexeme_tokens.classify_tokens_native(tt, table, acc, q)
            plain = (np.zeros(tt.n_words, np.uint32), np.zeros((len(tt.sorted_bytes) + 31) // 32, np.uint32))
            n = lexeme_tokens._tokenwalk.classify(table, lexeme_tokens._as_u8(acc), np.ones(256, np.uint8), q, tt.blob,
                                                  tt.offsets, tt.lcp, tt.max_len, tt.first_start, tt.rank_to_id,
                                                  *plain)
            ref = lexeme_tokens.classify_tokens_numpy(tt, table, acc, q)
            assert (fast.inside == plain[0]).all() and (fast.exits == plain[1]).all() and fast.n_exits == n, (pattern, q)
            assert (fast.inside == ref.inside).all() and (fast.exits == ref.exits).all(), (pattern, q)
            checked += 1
    assert checked >= 200


def _odd_vocabulary() -> gramgen.Vocabulary:
    """Short tokens (every byte, letter pairs) plus odd ones (NUL, truncated, invalid and
    overlong UTF-8, surrogates, quotes and escapes, tokens longer than a counted body's
    room)."""
    pieces = sorted({bytes([b]) for b in range(1, 128)} | {
        b"ab", b"a b", b"\xc3\xa9", b"x\xc3\xa9", b"zz.", b"\"", b"a\"", b"\",\"", b"\"}", b"\x00b", b"\xe4\xb8\xad",
        b"1a", b"\xe4\xb8", b"x\xed\xa0\x80", b"x\xc0\xaf", b"\xff", b"a\\n", b"a\n", b"\xc3\xa9t\xc3\xa9",
        b"abcdefghijklmnopqrstuvwxyzabcdefghij", b"name", b"nam", b"\"name\":", b"nx", b"\xf0\x9f\x98\x80!"}
        # plain letter pairs, so that the odd ones are a small share
        | {bytes((a, b)) for a in range(ord("a"), ord("z") + 1) for b in range(ord("a"), ord("z") + 1)})
    return gramgen.Vocabulary(pieces + [b""], eos_token_ids=[len(pieces)])


@pytest.mark.parametrize("tokenizer", ["llama3", "phi3", "odd"])
def test_exception_path_against_numpy(tokenizer):
    """The native walk's exception path (a state whose first characters mostly lead to
    one state, from which a chain of like states takes all but a few tokens whole, walks
    only those few: string bodies, counted bodies, keys other than a schema's names) gives
    the classes of the numpy reference, from every state where it is taken; it must be
    taken on string bodies, counted ones and key automata, and not on states it does not
    fit (a number, which few tokens continue)."""
    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native kernel was not built"
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    vocab = _odd_vocabulary() if tokenizer == "odd" else vocabulary(tokenizer)
    grammars = [gramgen.Grammar.from_json_schema(SHORTCUT_SCHEMA, whitespace="flexible"),
                gramgen.Grammar.from_json_schema({"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 200}, "nx": {"type": "string", "format": "date"}},
                    "additionalProperties": {"type": "string", "maxLength": 3}}),
                gramgen.Grammar.from_regex(r"(?:[^\"\\\x00-\x1f]|\\[\"\\/bfnrt])*\""),
                gramgen.Grammar.from_regex(r"[^\x00-\x1f\"]{2,40}\""),
                gramgen.Grammar.from_regex(r"[^\x00-\x1f\"]*(?:ab)?[^\x00-\x1f\"]{0,9}!"),
                # first characters that do not lead where most do: x, and (the first one)
                # any non-ASCII character
                gramgen.Grammar.from_regex(r"(?:x[0-9]|[^\x00-\x1f\"x])[^\x00-\x1f\"]*\""),
                gramgen.Grammar.from_regex(r"[ -~][^\x00-\x1f\"]*\""),
                gramgen.Grammar.from_regex(r"-?[0-9]+")]
    taken, skipped, per_grammar = {}, 0, []
    for g in grammars:
        per_grammar.append(0)
        cg = gramgen.compile(g, vocab, precompute=False)
        tt = cg.token_table
        for k, dfa in enumerate(cg.tables.lex_dfas):
            table, acc = cg.sink_tables[k]
            for q in range(min(dfa.n_states, 80)):
                got = lexeme_tokens.classify_tokens_excepted(tt, table, acc, q, cg.follow_masks[k])
                if got is None:
                    skipped += 1
                    continue
                ref = lexeme_tokens.classify_tokens_numpy(tt, table, acc, q, cg.follow_masks[k])
                assert (got.inside == ref.inside).all(), (g, k, q)
                assert (got.exits == ref.exits).all() and got.n_exits == ref.n_exits, (g, k, q)
                name = cg.tables.lexeme_names[k].split("_")[0]
                taken[name] = taken.get(name, 0) + 1
                per_grammar[-1] += 1
    assert skipped > 0
    # string bodies and key automata (JSON Schema lexemes STR / KEY), counted ones, every
    # body regex; never the number
    assert {"STR", "KEY"} <= set(taken), taken
    assert all(per_grammar[:-1]) and not per_grammar[-1], per_grammar
    assert sum(taken.values()) >= 40, taken


@pytest.mark.parametrize("tokenizer", ["llama3", "gpt2", "odd"])
def test_exception_path_settles_tokens_longer_than_the_room(tokenizer):
    """A few characters before the end of a counted string most tokens are longer than
    the room left. The exception path settles those at once where they all end alike: at
    the end of a long string's block the lexeme ends and the next character may follow
    (exits), before a bounded string's closing quote they die; elsewhere (a chain that
    goes on differently, a lexeme that may end on the way) they are walked. Every state of
    these lexemes is compared with the numpy reference, and near the ends (where the
    tokens to walk one by one would be too many without it) the path must be taken."""
    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native kernel was not built"
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    vocab = _odd_vocabulary() if tokenizer == "odd" else vocabulary(tokenizer)
    cases = [  # grammar, lexeme name prefix, characters to its end, whether the long tokens
        # there are settled at once (the path must then be taken near the end)
        (gramgen.Grammar.from_json_schema({"type": "string", "maxLength": 700}), "BLOCK", 64, True),
        (gramgen.Grammar.from_json_schema({"type": "object", "properties": {
            "a": {"type": "string", "maxLength": 30}}, "required": ["a"]}, whitespace="flexible"), "", 30, True),
        (gramgen.Grammar.from_regex(r"[^\x00-\x1f\"]{0,20}"), "", 20, True),   # nothing follows: they die
        (gramgen.Grammar.from_regex(r"[^\x00-\x1f\"]{0,12}x*\""), "", 12, False),   # the chain goes on with x
        (gramgen.Grammar.from_regex(r"[^\x00-\x1f\"]{3,12}(?:,[0-9])?"), "", 12, False),
        # A may end after 1 to 5 characters, before a character B starts with: walked
        (gramgen.Grammar.from_lark('start: A B\nA: /[^\\x00-\\x1f"]{1,5}|[^\\x00-\\x1f"]{6,12}"/\n'
                                   'B: /[^\\x00-\\x1f"]*!/\n%ignore " "'), "A", 12, False),
    ]
    near_taken = 0
    for g, prefix, length, settled in cases:
        cg = gramgen.compile(g, vocab, precompute=False)
        tt = cg.token_table
        for k, dfa in enumerate(cg.tables.lex_dfas):
            if not cg.tables.lexeme_names[k].startswith(prefix):
                continue
            table, acc = cg.sink_tables[k]
            follow = cg.follow_masks[k]
            for q in range(dfa.n_states):
                got = lexeme_tokens.classify_tokens_excepted(tt, table, acc, q, follow)
                if got is None:
                    continue
                ref = lexeme_tokens.classify_tokens_numpy(tt, table, acc, q, follow)
                assert (got.inside == ref.inside).all(), (g, k, q)
                assert (got.exits == ref.exits).all() and got.n_exits == ref.n_exits, (g, k, q)
            if tokenizer == "odd" or not prefix and k:
                continue
            # the states 2 to 4 characters before the end, reached over "a"s (the JSON
            # string's opening quote first)
            q = 0
            if table[0, ord('"')] != table.shape[0] - 1 and table[0, ord("a")] == table.shape[0] - 1:
                q = table[q, ord('"')]
            for room in (2, 3, 4):
                s = q
                for _ in range(length - room):
                    s = table[s, ord("a")]
                assert s != table.shape[0] - 1
                if settled and tt.more_chars[room] * 8 > len(tt.sorted_bytes):
                    assert lexeme_tokens.classify_tokens_excepted(tt, table, acc, s, follow) is not None, (g, room)
                    near_taken += 1
    assert tokenizer == "odd" or near_taken >= 6


@pytest.mark.parametrize("tokenizer", ["llama3", "odd"])
def test_chain_memo_keeps_classes(tokenizer):
    """A chain memo kept per DFA across calls (filled in any order, by two threads at
    once) gives the classes of calls without one; a memo of the wrong size raises."""
    import threading

    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native kernel was not built"
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    vocab = _odd_vocabulary() if tokenizer == "odd" else vocabulary(tokenizer)
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SHORTCUT_SCHEMA, whitespace="flexible"), vocab,
                         precompute=False)
    tt = cg.token_table
    rng = random.Random(SEED)
    checked = 0
    for k, dfa in enumerate(cg.tables.lex_dfas):
        table, acc = cg.sink_tables[k]
        states = list(range(dfa.n_states))
        rng.shuffle(states)
        states = states[:60]
        want = {q: lexeme_tokens.classify_tokens_native(tt, table, acc, q, cg.follow_masks[k]) for q in states}
        memo = lexeme_tokens.chain_memo(table)
        got: dict = {}

        def run(order, tag):
            for q in order:
                got[q, tag] = lexeme_tokens.classify_tokens_native(tt, table, acc, q, cg.follow_masks[k], memo)

        threads = [threading.Thread(target=run, args=(order, tag)) for tag, order in enumerate((states, states[::-1]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run(states, 2)  # a second pass reads what the first ones kept
        assert len(got) == 3 * len(states)
        for (q, _), lt in got.items():
            ref = want[q]
            assert (lt.inside == ref.inside).all() and (lt.exits == ref.exits).all() and lt.n_exits == ref.n_exits
            checked += 1
        assert memo.any() or dfa.n_states < 3
    assert checked > 300
    table, acc = cg.sink_tables[0]
    with pytest.raises(ValueError):
        lexeme_tokens.classify_tokens_native(tt, table, acc, 0, None, np.zeros(8, np.uint8))


def test_token_table_rare_fields():
    """The exception path's per-vocabulary lists (ranks containing each ASCII byte, any
    byte >= 0x80, broken UTF-8; ranks by character count; ids with a rank) against a
    byte-by-byte computation, on made-up tokens and a real vocabulary."""
    from gramgen.automata.token_table import TokenTable

    for tt in (token_table_for(_odd_vocabulary()), token_table_for(vocabulary("phi3"))):
        n = len(tt.sorted_bytes)
        lists = {c: set() for c in range(130)}
        chars = []
        for r, data in enumerate(tt.sorted_bytes):
            for b in data:
                lists[min(b, 128)].add(r)
            try:
                chars.append(len(data.decode("utf-8")))
            except UnicodeDecodeError:
                lists[129].add(r)
                chars.append(sum(1 for b in data if b < 0x80 or b >= 0xC0))
        for c in range(130):
            got = tt.rare_ranks[tt.rare_start[c]:tt.rare_start[c + 1]].tolist()
            assert got == sorted(lists[c]), c
        chars = np.array(chars)
        assert (np.diff(chars[tt.by_chars]) <= 0).all() and sorted(tt.by_chars.tolist()) == list(range(n))
        for L in range(tt.max_len + 1):
            assert tt.more_chars[L] == int((chars > L).sum()), L
        real = np.zeros(tt.vocab_size, dtype=bool)
        real[tt.rank_to_id] = True
        assert (gramgen.automata.bitmask.unpack(tt.real_ids, tt.vocab_size) == real).all() and not real.all()


@pytest.mark.parametrize("tokenizer", ["llama3", "llama2"])
def test_native_token_runs_equal_numpy(monkeypatch, tokenizer):
    """The kernels behind exit walks (``run_suffixes``: one DFA over the rests of tokens;
    ``first_ends``: several side by side until one accepts; ``pass_split``: several over
    the rests, inside or may end; ``jump_plan``: tokens grouped by their first completion)
    against their numpy versions,
    from every state of a schema's lexemes (and pairs of states), on random token subsets
    and depths."""
    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native kernel was not built"
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SHORTCUT_SCHEMA, whitespace="flexible"),
                         vocabulary(tokenizer), precompute=False)
    tt = cg.token_table
    rng = np.random.default_rng(SEED)
    states = [(k, q) for k, dfa in enumerate(cg.tables.lex_dfas) for q in range(dfa.n_states)]
    n_ranks = len(tt.sorted_bytes)
    seen_ends = seen_firsts = seen_rests = seen_groups = 0
    for k, q in states:
        table, acc = cg.sink_tables[k]
        depth = int(rng.integers(0, 3))
        ranks = rng.choice(n_ranks, size=2000, replace=False)
        ranks = ranks[tt.lengths[ranks] > depth]
        (k2, q2) = states[int(rng.integers(len(states)))]
        runs = []
        for native in (True, False):
            monkeypatch.setattr(lexeme_tokens, "NATIVE", native)
            runs.append((lexeme_tokens.run_suffixes(tt, table, acc, cg.follow_masks[k], q, ranks, depth),
                         lexeme_tokens.first_ends(tt, [cg.sink_tables[k], cg.sink_tables[k2]], [q, q2], ranks, depth)))
        (a1, m1), (p1, b1) = runs[0]
        (a2, m2), (p2, b2) = runs[1]
        assert (a1 == a2).all() and (m1 == m2).all(), (k, q, depth)
        assert (p1 == p2).all() and (b1[p1 >= 0] == b2[p2 >= 0]).all(), (k, q, k2, q2, depth)
        seen_ends += int(m1.sum() > 0)
        seen_firsts += int((p1 >= 0).sum() > 0)
        # the exit walk's lexeme pass: both DFAs side by side over all the tokens (short
        # ones included), against the numpy runs of each
        monkeypatch.setattr(lexeme_tokens, "NATIVE", True)
        every = rng.choice(n_ranks, size=2000, replace=False).tolist()
        inside, rest = lexeme_tokens.pass_split(
            tt, [(*cg.sink_tables[k], cg.follow_masks[k]), (*cg.sink_tables[k2], cg.follow_masks[k2])], [q, q2],
            tuple(every), depth)
        longer = np.array([r for r in every if tt.lengths[r] > depth], dtype=np.int64)
        alive, may = np.zeros(longer.size, bool), np.zeros(longer.size, bool)
        for kk, qq in ((k, q), (k2, q2)):
            a, e = lexeme_tokens.run_suffixes_numpy(tt, *cg.sink_tables[kk], cg.follow_masks[kk], qq, longer, depth)
            alive, may = alive | a, may | e
        want_inside = set(longer[alive].tolist()) | {r for r in every if tt.lengths[r] <= depth}
        assert inside == [r for r in every if r in want_inside], (k, q, k2, q2, depth)
        assert rest == [r for r in longer[may & ~alive].tolist()], (k, q, k2, q2, depth)
        seen_rests += bool(rest)
        # the jump plan (groups by first completion, sorted by their rests)
        dfas = [cg.sink_tables[k], cg.sink_tables[k2]]
        plans = []
        for native in (True, False):
            monkeypatch.setattr(lexeme_tokens, "NATIVE", native)
            plans.append(lexeme_tokens.jump_plan(tt, dfas, [q, q2], tuple(every), depth))
        assert plans[0] == plans[1], (k, q, k2, q2, depth)
        seen_groups += len(plans[0]) > 1
    assert seen_ends >= 10 and seen_firsts >= 10 and seen_rests >= 10, (seen_ends, seen_firsts, seen_rests)
    assert seen_groups >= 10, seen_groups
    # the bigram lexer's lazily filled automaton, each run on its own fresh instance
    from gramgen.automata.lexer_automaton import LexerAutomaton

    lexers = {True: LexerAutomaton(cg.tables), False: LexerAutomaton(cg.tables)}
    dropped = 0
    for k, q in states:
        depth = int(rng.integers(0, 2))
        ranks = rng.choice(n_ranks, size=3000, replace=False)
        got = {}
        for native, lexer in lexers.items():
            monkeypatch.setattr(lexeme_tokens, "NATIVE", native)
            got[native] = lexer.alive(tt, lexer.state_of([(k, q)]), ranks, depth)
        assert (got[True] == got[False]).all(), (k, q, depth)
        dropped += int((~got[True]).sum())
    assert dropped > 0


def test_native_kernel_rejects_inconsistent_arrays():
    """Arrays that do not describe a DFA and a token table raise instead of reading out of
    bounds (the kernel checks every index it follows)."""
    from gramgen.automata import lexeme_tokens

    if lexeme_tokens._tokenwalk is None:
        pytest.skip("gramgen.automata._tokenwalk was not built (no C compiler at install)")
    cg = compiled("json.lark", "gpt2")
    tt = cg.token_table
    table, acc = cg.sink_tables[0]
    args = [table, acc.astype(np.uint8), np.ones(256, np.uint8), 0, tt.blob, tt.offsets, tt.lcp, tt.max_len,
            tt.first_start, tt.rank_to_id]

    def call(kernel, base, change):
        a = list(base)
        for i, v in change.items():
            a[int(i[1:])] = v
        return kernel(*a, np.zeros(tt.n_words, np.uint32), np.zeros((len(tt.sorted_bytes) + 31) // 32, np.uint32))

    def run(**change):
        return call(lexeme_tokens._tokenwalk.classify, args, change)

    assert run() >= 0
    bad_table = table.copy()
    bad_table[:, ord('"')] = 10**6
    with pytest.raises(ValueError):
        run(a0=bad_table)
    with pytest.raises(ValueError):
        run(a3=table.shape[0] + 5)
    with pytest.raises(ValueError):
        run(a5=tt.offsets * 3)
    with pytest.raises(ValueError):
        run(a7=2)  # tokens longer than max_len
    with pytest.raises(ValueError):
        run(a5=tt.offsets.astype(np.int32))

    # the side-by-side walk checks the same, for both states (two states of the string
    # lexeme that part ways on the first byte, so that tokens are walked past it)
    k = max(range(len(cg.sink_tables)), key=lambda i: cg.sink_tables[i][0].shape[0])
    table, acc = cg.sink_tables[k]
    assert table.shape[0] > 2 and not np.array_equal(table[0], table[1])
    bad_table = table.copy()
    bad_table[:, ord('"')] = 10**6
    pair_args = [table, acc.astype(np.uint8), np.ones(256, np.uint8), 0, 1,
                 tt.blob, tt.offsets, tt.lcp, tt.max_len, tt.first_start, tt.rank_to_id]

    def run_pair(**change):
        return call(lexeme_tokens._tokenwalk.classify_pair, pair_args, change)

    # with the chain shortcut's fields: out-of-range entries in the bytes it scans raise too
    bad_table = table.copy()
    bad_table[:, ord("a"):ord("z") + 1] = 10**6
    for q in range(table.shape[0] - 1):
        with pytest.raises(ValueError):
            lexeme_tokens._tokenwalk.classify(
                bad_table, acc.astype(np.uint8), np.ones(256, np.uint8), q, tt.blob, tt.offsets, tt.lcp, tt.max_len,
                tt.first_start, tt.rank_to_id, np.zeros(tt.n_words, np.uint32),
                np.zeros((len(tt.sorted_bytes) + 31) // 32, np.uint32), *lexeme_tokens._chain_fields(tt))

    run_pair()
    for change in ({"a0": bad_table}, {"a3": table.shape[0] + 5}, {"a4": -1}, {"a6": tt.offsets * 3},
                   {"a8": 2}, {"a9": tt.first_start[::-1].copy()}):
        with pytest.raises(ValueError):
            run_pair(**change)

    # the exception path's lists, from a state that takes it (a string body)
    q = next(q for q in range(table.shape[0] - 1)
             if lexeme_tokens.classify_tokens_excepted(tt, table, acc, q) is not None)
    fields = list(lexeme_tokens._chain_fields(tt))
    assert len(fields) == 11

    def run_excepted(i=None, value=None, only=True):
        f = list(fields)
        if i is not None:
            f[i] = value
        return lexeme_tokens._tokenwalk.classify(
            table, acc.astype(np.uint8), np.ones(256, np.uint8), q, tt.blob, tt.offsets, tt.lcp, tt.max_len,
            tt.first_start, tt.rank_to_id, np.zeros(tt.n_words, np.uint32),
            np.zeros((len(tt.sorted_bytes) + 31) // 32, np.uint32), *f, only)

    assert run_excepted() >= 0
    for i, value in ((4, tt.rare_start[::-1].copy()), (5, tt.rare_ranks + len(tt.sorted_bytes)),
                     (5, tt.rare_ranks - 10**6), (6, tt.by_chars[:10].copy()), (7, tt.more_chars - 10**6),
                     (8, tt.real_ids[:-1].copy()), (4, tt.rare_start.astype(np.int32)),
                     (9, tt.long_ids[:, :-1].copy()), (10, tt.long_ranks[:-1].copy()),
                     (9, tt.long_ids.astype(np.int64))):
        with pytest.raises(ValueError):
            run_excepted(i, value)
    with pytest.raises(ValueError):  # the exception path's fields without the chain shortcut's
        lexeme_tokens._tokenwalk.classify(
            table, acc.astype(np.uint8), np.ones(256, np.uint8), q, tt.blob, tt.offsets, tt.lcp, tt.max_len,
            tt.first_start, tt.rank_to_id, np.zeros(tt.n_words, np.uint32),
            np.zeros((len(tt.sorted_bytes) + 31) // 32, np.uint32), *fields[4:])


def test_self_loop_shortcut_classifies_like_the_full_run(monkeypatch):
    """Tokens made only of bytes that loop on a state are set aside before the DFA run
    (lexeme_tokens.SELF_LOOP_SHORTCUT); the classes must equal those of the full run.
    The shortcut is forced on every looping state (string bodies, digits, whitespace)."""
    from gramgen.automata import lexeme_tokens

    cg = compiled("json.lark", "llama3")
    checked = 0
    for k, dfa in enumerate(cg.tables.lex_dfas):
        table, acc = cg.sink_tables[k]
        for q in range(dfa.n_states):
            if not (table[q] == q).any():
                continue
            runs = []
            for threshold in (1, 10**9):
                monkeypatch.setattr(lexeme_tokens, "SELF_LOOP_SHORTCUT", threshold)
                runs.append(lexeme_tokens.classify_tokens_numpy(cg.token_table, table, acc, q, cg.follow_masks[k]))
            fast, full = runs
            assert (fast.inside == full.inside).all() and (fast.exits == full.exits).all()
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("tokenizer", ["llama3", "phi3", "gpt2"])
def test_neighbour_classification_equals_full(monkeypatch, tokenizer):
    """A lexeme state classified from a recently classified state of its own lexeme, or
    of another lexeme with the same followers (the tokens no longer than the depth to
    which the two agree keep that state's classes, the longer ones are walked,
    ``TokenClasses._classify_near``), must get exactly the classes of a full
    classification: on every state reached along random forward walks through each
    lexeme (one lexeme after another, and all of them in turn, as a generation
    interleaves them) and on every state in numbering order. Both reuses must happen.
    (The exception path, which classifies string bodies and keys before any neighbour is
    looked for, is off here: it has its own test.)"""
    from gramgen.automata import lexeme_tokens
    from gramgen.automata import token_classes as classes_module

    monkeypatch.setattr(lexeme_tokens, "EXCEPTED", False)

    vocab = vocabulary(tokenizer)
    rng = random.Random(SEED)
    used = {"same": 0, "other": 0, "pair": 0}
    schemas = [gramgen.Grammar.from_json_schema(SHORTCUT_SCHEMA, whitespace="flexible"), grammar("schema-long-strings"),
               gramgen.Grammar.from_json_schema({"type": "array", "items": {"type": "object", "properties": {
                   "x": {"type": "string", "maxLength": 30}, "y": {"type": "string", "maxLength": 40}}}},
                   whitespace="flexible"),
               # keys other than the declared ones: a key automaton inside an excluded name
               # and past it goes the same way on almost every byte (the side-by-side walk)
               gramgen.Grammar.from_json_schema({"type": "object", "properties": {
                   "orientation": {"type": "string"}, "origin": {"type": "integer"}, "title": {"type": "string"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
                   "additionalProperties": {"type": "number"}}, whitespace="flexible")]
    original_from = classes_module.classify_tokens_from

    def counted_from(*args):
        used["pair"] += 1
        return original_from(*args)

    classes_module.classify_tokens_from = counted_from
    try:
        _compare_neighbour_classes(schemas, vocab, rng, used)
    finally:
        classes_module.classify_tokens_from = original_from
    assert used["same"] >= 50 and used["other"] >= 1 and used["pair"] >= 5, used


def _compare_neighbour_classes(schemas, vocab, rng, used):
    for g in schemas:
        near = gramgen.compile(g, vocab, precompute=False)
        full = gramgen.compile(g, vocab, precompute=False)
        full.classes.NEIGHBOR_SHARE = -1.0  # never
        full.classes.PAIR_WALK = False
        original = near.classes._classify_near

        def counted(lexeme, state, tokens, depth, near=near, original=original):
            source = next(k for k, lt in near.classes._lexeme_tokens.items() if lt is tokens)
            used["same" if source[0] == lexeme else "other"] += 1
            return original(lexeme, state, tokens, depth)

        near.classes._classify_near = counted
        walks = []
        for k, dfa in enumerate(near.tables.lex_dfas):
            for _ in range(3):  # forward walks, as a generation visits a string body
                q, path = 0, []
                for _ in range(80):
                    path.append((k, q))
                    nxt = [t for t in dfa.rows[q] if t >= 0]
                    if not nxt:
                        break
                    q = rng.choice(nxt)
                walks.append(path)
        interleaved = [w[i] for i in range(80) for w in walks if i < len(w)]
        in_order = [(k, q) for k, dfa in enumerate(near.tables.lex_dfas) for q in range(dfa.n_states)]
        for k, q in interleaved + [kq for w in walks for kq in w] + in_order:
            a, b = near.lexeme_tokens(k, q), full.lexeme_tokens(k, q)
            assert np.array_equal(a.inside, b.inside), (k, q)
            assert np.array_equal(a.exits, b.exits) and a.n_exits == b.n_exits, (k, q)


def test_canonical_form_names_equal_futures():
    """``dfa.canonical_form``: states (of one lexeme or of two) with equal forms have the
    same future: they agree on every string up to the longest token, and classify the
    vocabulary alike; string bodies of different lexemes share a form, a pattern's body
    does not; past ``max_states`` there is none; bad input raises."""
    from gramgen.automata import dfa as dfa_module
    from gramgen.automata import lexeme_tokens

    if dfa_module._dfabuild is None:
        assert not os.environ.get("GRAMGEN_REQUIRE_NATIVE"), "the native builder was not built"
        pytest.skip("gramgen.automata._dfabuild was not built (no C compiler at install)")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string", "pattern": "^x+$"},
        "d": {"type": "array", "items": {"type": "string", "maxLength": 3}}}, "required": ["a", "b", "c", "d"]}),
        vocabulary("gpt2"), precompute=False)
    tt = cg.token_table
    groups: dict = {}
    for k, dfa in enumerate(cg.tables.lex_dfas):
        table, acc = cg.sink_tables[k]
        for q in range(dfa.n_states):
            form = dfa_module.canonical_form(table, acc, q, 64)
            if form is not None:
                groups.setdefault(form, []).append((k, q))
    shared = [g for g in groups.values() if len({k for k, _ in g}) > 1]
    assert shared, "no future shared by two lexemes"
    everything = np.ones(256, dtype=bool)
    for group in groups.values():
        (k1, q1), rest = group[0], group[1:]
        ref = lexeme_tokens.classify_tokens(tt, *cg.sink_tables[k1], q1, everything)
        for k2, q2 in rest:
            dfas = cg.tables.lex_dfas
            assert dfas[k1].agreement_depth(q1, q2, tt.max_len, other=dfas[k2]) == tt.max_len, (k1, q1, k2, q2)
            got = lexeme_tokens.classify_tokens(tt, *cg.sink_tables[k2], q2, everything)
            assert np.array_equal(got.inside, ref.inside) and np.array_equal(got.exits, ref.exits)
    # distinct forms within one minimal DFA are distinct futures
    for k, dfa in enumerate(cg.tables.lex_dfas):
        forms = [dfa_module.canonical_form(*cg.sink_tables[k], q, 10**4) for q in range(dfa.n_states)]
        assert len(set(forms)) == dfa.n_states, k
    k = max(range(len(cg.sink_tables)), key=lambda i: cg.sink_tables[i][0].shape[0])
    table, acc = cg.sink_tables[k]
    assert dfa_module.canonical_form(table, acc, 0, 1) is None
    bad = table.copy()
    bad[0, :] = 10**6
    with pytest.raises(ValueError):
        dfa_module._dfabuild.canonical_form(bad, acc, 0, 64)
    with pytest.raises(ValueError):
        dfa_module._dfabuild.canonical_form(table, acc, table.shape[0] - 1, 64)  # the sink


@pytest.mark.parametrize("tokenizer", ["llama3", "gpt2"])
def test_shared_classes_equal_full(monkeypatch, tokenizer):
    """Classes shared between grammars compiled for one vocabulary (keyed by a state's
    future and follow bytes, ``TokenClasses._classify``) equal a full classification
    of each state that takes them, in other lexemes and other grammars; and a grammar
    whose states had exits dropped at precompute shares none of its classes."""
    from gramgen.runtime import json_standard

    vocab = vocabulary(tokenizer)
    tt = token_table_for(vocab)
    tt.shared_classes.clear()
    # the classes of every grammar, not the standard ones of JSON Schema (test_json_standard)
    monkeypatch.setattr(json_standard, "MIN_VOCAB", 1 << 40)
    monkeypatch.setattr(tt, "standard_classes", {})
    schemas = [{"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {
                   "type": "string"}}, "note": {"type": "string", "maxLength": 5}}},
               {"type": "array", "items": {"type": "object", "properties": {"title": {"type": "string"},
                   "alias": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}}}},
               {"type": "object", "additionalProperties": {"type": "string"}}]
    from gramgen import _lru

    hits = []  # per lookup in the shared classes: whether it found them
    original_get = _lru.SizedLRU.get

    def counted_get(self, key):
        found = original_get(self, key)
        if self is tt.shared_classes:
            hits.append(found is not None)
        return found

    monkeypatch.setattr(_lru.SizedLRU, "get", counted_get)
    for schema in schemas:
        g = gramgen.Grammar.from_json_schema(schema, whitespace="flexible")
        shared = gramgen.compile(g, vocab, precompute=False)
        full = gramgen.compile(g, vocab, precompute=False)
        full.classes.SHARED_STATES = 0
        full.classes.NEIGHBOR_SHARE = -1.0
        full.classes.PAIR_WALK = False
        for k, dfa in enumerate(shared.tables.lex_dfas):
            for q in range(dfa.n_states):
                a, b = shared.lexeme_tokens(k, q), full.lexeme_tokens(k, q)
                assert np.array_equal(a.inside, b.inside), (schema, k, q)
                assert np.array_equal(a.exits, b.exits) and a.n_exits == b.n_exits, (schema, k, q)
    # of the dense states (the others are not looked up), many came from elsewhere
    assert sum(hits) >= 20, (sum(hits), len(hits))
    size = len(tt.shared_classes._items)
    gramgen.compile(gramgen.Grammar.from_json_schema({"type": "object", "properties": {"z": {"type": "string"}}}),
                    vocab, precompute=True)
    assert len(tt.shared_classes._items) <= size + 1  # at most its first state, before any exit was dropped


@pytest.mark.parametrize("tokenizer", ["llama3", "gpt2"])
def test_horizon_cached_exits_equal_whole_chart_walks(monkeypatch, tokenizer):
    """Exit walks cached per horizon (what one walk decided without reading a set that
    many origin links away, ``Matcher._exit_words`` with ``earley.tracked_view``) and
    reused in every context that agrees up to that horizon give the masks of walks on the
    whole chart, at every step of texts that nest the same values at different depths;
    the cache must be hit, at more than one horizon."""
    from gramgen.runtime import compiled as compiled_module
    from gramgen.runtime import matcher as matcher_module

    vocab = vocabulary(tokenizer)
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#"}},
                                               "s": {"type": "string"}, "n": {"type": "integer"}}}
    texts = ['{"s":"x","n":1}', '{"a":[{"s":"x","n":1},{"a":[{"s":"y"}],"n":2}],"s":"z"}',
             '{"a":[{"a":[{"a":[{"s":"deep","n":3}]}],"s":"q"}],"n":4}',
             '[1, {"k": ["v", {"w": [true, null]}]}, "x", [[2.5]]]']
    grammars = [gramgen.Grammar.from_json_schema(schema, whitespace="flexible"), grammar("json.lark")]
    hits = {}
    original = compiled_module.CompiledGrammar.cached_exits

    def counted(self, key):
        found = original(self, key)
        if found is not None:
            hits[key[0]] = hits.get(key[0], 0) + 1
        return found

    monkeypatch.setattr(compiled_module.CompiledGrammar, "cached_exits", counted)
    tok = hf_tokenizer(tokenizer)
    for g in grammars:
        cached = gramgen.compile(g, vocab, mask_cache_size=8)  # few whole masks: exits decide
        walked = gramgen.compile(g, vocab, mask_cache_size=8)
        for text in texts:
            try:
                ids = tok.encode(text, add_special_tokens=False)
                m1, m2 = cached.matcher(), walked.matcher()
                for tid in ids:
                    monkeypatch.setattr(matcher_module, "_HORIZONS", (2, 3, 4, 5, 6, 8, 12))
                    a = m1.mask()
                    monkeypatch.setattr(matcher_module, "_HORIZONS", ())
                    b = m2.mask()
                    assert np.array_equal(a, b), (text, tid)
                    m1.advance(tid)
                    m2.advance(tid)
            except gramgen.TokenRejected:
                assert g is grammars[0] and text.startswith("[")  # not an object: not of the schema
    assert sum(hits.values()) >= 20 and len(hits) >= 2, hits


def test_agreement_depth_is_sound():
    """``ByteDFA.agreement_depth``: no byte string of at most d bytes tells the two states
    apart (brute force over every string of up to 2 bytes and random longer ones), the C
    and numpy versions agree, and a state pair cut short by ``max_pairs`` answers less."""
    from gramgen.automata import dfa as dfa_module

    g = gramgen.Grammar.from_json_schema({"type": "object", "properties": {
        "s": {"type": "string", "maxLength": 30}, "n": {"type": "integer", "minimum": 10, "maximum": 4000},
        "p": {"type": "string", "pattern": "^(ab|a)*c{2,9}$"}}})
    rng = random.Random(SEED)
    probes = [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]
    probes += [bytes(rng.choice(b"ab0123456789c\"\\x") for _ in range(rng.randint(3, 40))) for _ in range(300)]
    checked = 0
    for rx in g.ir.lexemes.values():
        d = dfa_module.compile_regex(rx)
        table, acc = d.sink_table()
        for _ in range(40):
            q1, q2 = rng.randrange(d.n_states), rng.randrange(d.n_states)
            depth = d.agreement_depth(q1, q2, 64)
            assert depth == dfa_module._agreement_depth_numpy(table, acc, q1, table, acc, q2, 64, 4096)
            probe = dfa_module.probe_bytes(d, d)
            assert depth == d.agreement_depth(q1, q2, 64, probe=probe)
            assert depth == dfa_module._agreement_depth_numpy(table, acc, q1, table, acc, q2, 64, 4096, probe)
            assert d.agreement_depth(q1, q2, 64, max_pairs=1) <= depth
            _same_on_probes(d, q1, d, q2, depth, probes)
            checked += 1
    # states of two different lexemes' DFAs (string bodies agree until the string ends)
    dfas = [dfa_module.compile_regex(rx) for rx in g.ir.lexemes.values()]
    for _ in range(300):
        d1, d2 = rng.choice(dfas), rng.choice(dfas)
        q1, q2 = rng.randrange(d1.n_states), rng.randrange(d2.n_states)
        depth = d1.agreement_depth(q1, q2, 64, other=d2)
        (t1, a1), (t2, a2) = d1.sink_table(), d2.sink_table()
        assert depth == dfa_module._agreement_depth_numpy(t1, a1, q1, t2, a2, q2, 64, 4096)
        probe = dfa_module.probe_bytes(d1, d2)
        assert depth == d1.agreement_depth(q1, q2, 64, other=d2, probe=probe)
        assert depth == dfa_module._agreement_depth_numpy(t1, a1, q1, t2, a2, q2, 64, 4096, probe)
        _same_on_probes(d1, q1, d2, q2, depth, probes)
        checked += depth > 0
    assert checked >= 100


def _same_on_probes(d1, q1, d2, q2, depth, probes):
    for w in probes:
        if len(w) > depth:
            continue
        s1, s2 = d1.run(w, q1), d2.run(w, q2)
        assert (s1 < 0) == (s2 < 0), (q1, q2, depth, w)
        assert s1 < 0 or bool(d1.accepting[s1]) == bool(d2.accepting[s2]), (q1, q2, depth, w)


def test_byte_classes_group_equal_columns():
    """``ByteDFA.byte_classes``: bytes of one class have equal columns (the native
    builder's classes may be finer; those made from the table are exactly the groups of
    equal columns), and ``probe_bytes`` holds one byte of every joint class."""
    from gramgen.automata import dfa as dfa_module

    g = gramgen.Grammar.from_json_schema({"type": "object", "properties": {
        "s": {"type": "string", "maxLength": 30}, "n": {"type": "integer", "minimum": -5, "maximum": 4000},
        "d": {"type": "string", "format": "date-time"}, "p": {"type": "string", "pattern": "^(ab|a)*c{2,9}$"}}})
    dfas = [dfa_module.compile_regex(rx) for rx in g.ir.lexemes.values()]
    for d in dfas:
        exact = dfa_module._column_classes(d.transitions)
        for classes in (d.byte_classes(), exact):
            for c in np.unique(classes):
                cols = d.transitions[:, classes == c]
                assert (cols == cols[:, :1]).all()
        # the exact ones merge every pair of equal columns
        _, first = np.unique(d.transitions.T, axis=0, return_index=True)
        assert len(np.unique(exact)) == len(first)
    for d1 in dfas:
        for d2 in dfas:
            probe = dfa_module.probe_bytes(d1, d2)
            pairs = {(int(d1.byte_classes()[b]), int(d2.byte_classes()[b])) for b in range(256)}
            assert {(int(d1.byte_classes()[b]), int(d2.byte_classes()[b])) for b in probe} == pairs
            assert len(probe) == len(pairs)


#: texts inside counted strings: runs of spaces and dashes (long tokens), quotes and
#: escapes near the ends, strings of every length around the bounds
def _reuse_texts(rng: random.Random) -> list[str]:
    import json as _json

    out = []
    for _ in range(6):
        words = ["Example", "Variable", "Name", " " * rng.randint(20, 90), "-" * rng.randint(10, 40),
                 '\\"quoted\\"', "ünïcødé", "x" * rng.randint(1, 9)]
        value = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        doc = {"label": value[:500], "note": value[:40], "name": value[:90], "extra_" + str(rng.randint(0, 9)): 3}
        out.append(_json.dumps(doc, ensure_ascii=False))
    return out


@pytest.mark.parametrize("tokenizer", ["llama3", "gpt2"])
def test_inside_neighbour_masks_equal_full(tokenizer):
    """A position inside lexemes takes the mask of a recent position with the same parser
    context for the tokens no longer than the depth to which their lexeme states agree,
    and side-by-side classification; the masks must equal those computed without either,
    at every step of texts through counted strings (long strings in 64-character blocks,
    maxLength strings, keys outside the declared ones), with random detours among the
    allowed tokens. The reuse must happen."""
    from gramgen.runtime import matcher as matcher_module

    vocab = vocabulary(tokenizer)
    tok = hf_tokenizer(tokenizer)
    rng = random.Random(SEED)
    g = gramgen.Grammar.from_json_schema({
        "type": "object", "properties": {"label": {"type": "string", "maxLength": 500},
                                         "note": {"type": "string", "maxLength": 40},
                                         "name": {"type": "string", "minLength": 1, "maxLength": 90}},
        "additionalProperties": {"type": "integer"}}, whitespace="flexible")
    fast = gramgen.compile(g, vocab)
    slow = gramgen.compile(g, vocab)
    slow.INSIDE_NEIGHBORS = 0
    slow.classes.PAIR_WALK = False
    slow.classes.NEIGHBOR_SHARE = -1.0
    reused = [0]
    original = matcher_module.Matcher._neighbour_words

    def counted(self, *args):
        words = original(self, *args)
        reused[0] += words is not None
        return words

    matcher_module.Matcher._neighbour_words = counted
    try:
        steps = 0
        for text in _reuse_texts(rng):
            a, b = fast.matcher(), slow.matcher()
            for tid in tok.encode(text, add_special_tokens=False):
                ma, mb = a.mask(), b.mask()
                assert np.array_equal(ma, mb), (text, a.text_bytes())
                steps += 1
                if rng.random() < 0.15:  # a detour: another allowed token, then on with the text
                    other = int(rng.choice(np.flatnonzero(ma)))
                    if other not in vocab.eos_token_ids:
                        a2, b2 = a.fork(), b.fork()
                        a2.advance(other)
                        b2.advance(other)
                        if not a2.is_terminated():
                            assert np.array_equal(a2.mask(), b2.mask()), (text, a2.text_bytes())
                if not ma[tid]:
                    break
                a.advance(tid)
                b.advance(tid)
    finally:
        matcher_module.Matcher._neighbour_words = original
    assert steps >= 100 and reused[0] >= 10, (steps, reused)
