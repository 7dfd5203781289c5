"""States whose DFA reads one string before anything else (a property name up to its
closing quote, an enum literal) are classified by bisection in the byte-sorted tokens
(``lexeme_tokens.chain_tokens``) instead of a walk: the classes equal the walk's on every
such state, with every tokenizer, and a wrong string shows."""

from __future__ import annotations

import numpy as np
import pytest

import gramgen
from conftest import TOKENIZER_NAMES, vocabulary
from gramgen.automata import lexeme_tokens
from gramgen.automata.lexeme_tokens import chain_tokens, classify_tokens, single_chain

NAMES = ["no-unused-vars", "a", "eqeqeq", "the", "é-ü", "\u00ff\u00ff", "strict", "no-undef", "no-unused-expressions"]
SCHEMAS = [
    # keys each their own lexeme (with the bounded whitespace and colon after them)
    {"type": "object", "properties": {k: {"enum": ["off", "warn", "error", 0, 1, 2, "the", "été"]} for k in NAMES}},
    {"type": "object", "properties": {k: {"type": "string"} for k in NAMES}, "required": NAMES[:4]},
    {"enum": ["red", "green", "blue", "the", "été", "\"quoted\""]},
]


def _chain_states(cg):
    for k, (table, acc) in enumerate(cg.sink_tables):
        for q in range(table.shape[0] - 1):
            rest, end = cg.classes._chain(k, q)
            if rest:
                yield k, q, rest, end


def _same(a, b) -> bool:
    return bool((a.inside == b.inside).all() and (a.exits == b.exits).all() and a.n_exits == b.n_exits)


@pytest.mark.parametrize("tname", TOKENIZER_NAMES)
def test_chain_classes_equal_the_walk(tname):
    vocab = vocabulary(tname)
    n = 0
    for schema in SCHEMAS:
        for whitespace in ("flexible", "compact"):
            cg = gramgen.compile(gramgen.Grammar.from_json_schema(schema, whitespace=whitespace), vocab)
            tt = cg.token_table
            for k, q, rest, end in _chain_states(cg):
                table, acc = cg.sink_tables[k]
                follow = cg.follow_masks[k]
                assert _same(chain_tokens(tt, rest, table, acc, end, follow),
                             classify_tokens(tt, table, acc, q, follow)), (schema, k, q, rest)
                n += 1
    assert n > 300


def test_a_wrong_chain_gives_wrong_classes():
    """The comparison above can fail: the string of the next state, or one byte short."""
    vocab = vocabulary("llama3")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMAS[0], whitespace="flexible"), vocab)
    tt = cg.token_table
    wrong = 0
    for k, q, rest, end in _chain_states(cg):
        if len(rest) < 3:
            continue
        table, acc = cg.sink_tables[k]
        right = classify_tokens(tt, table, acc, q, cg.follow_masks[k])
        wrong += not _same(chain_tokens(tt, rest[1:], table, acc, end, cg.follow_masks[k]), right)
        wrong += not _same(chain_tokens(tt, rest[:-1], table, acc, end, cg.follow_masks[k]), right)
    assert wrong > 20


def test_single_chain_without_the_native_kernel(monkeypatch):
    """The numpy spelling reads the same strings as the C one."""
    vocab = vocabulary("gpt2")
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(SCHEMAS[0], whitespace="flexible"), vocab)
    native = [(k, q, single_chain(*cg.sink_tables[k], q, 64)) for k in range(len(cg.sink_tables))
              for q in range(cg.sink_tables[k][0].shape[0] - 1)]
    assert any(found[0] for _, _, found in native)
    monkeypatch.setattr(lexeme_tokens, "_tokenwalk", None)
    for k, q, found in native:
        assert single_chain(*cg.sink_tables[k], q, 64) == found
        assert single_chain(*cg.sink_tables[k], q, 2)[0] == found[0][:2]


def test_masks_in_an_object_of_many_keys_equal_brute_force():
    """End to end: an object of many optional keys, where the first mask after the
    opening quote classifies every key's state at once."""
    from reference import ReferenceGrammar, brute_force_mask

    vocab = vocabulary("gpt2")
    grammar = gramgen.Grammar.from_json_schema(SCHEMAS[0], whitespace="compact")
    cg = gramgen.compile(grammar, vocab)
    ref = ReferenceGrammar(grammar.ir)
    for text in ['{"', '{"no-un', '{"no-unused-', '{"é-', '{"a":"warn","eqe']:
        m = cg.matcher()
        m.advance_text(text)
        chart = ref.initial()
        for b in text.encode():
            chart = ref.feed(chart, b)
        assert set(np.flatnonzero(m.mask()).tolist()) == brute_force_mask(ref, chart, vocab), text


@pytest.mark.parametrize("tname", TOKENIZER_NAMES)
def test_prefix_ranks_are_the_ranks_of_every_prefix(tname):
    """``TokenTable.prefix_ranks`` (one loop over a string's prefixes) gives what
    ``ranks_of`` gives for each prefix, tokens of equal bytes included."""
    from gramgen.automata.token_table import token_table_for

    tt = token_table_for(vocabulary(tname))
    rng = np.random.default_rng(7)
    picks = [tt.sorted_bytes[int(r)] for r in rng.integers(0, len(tt.sorted_bytes), 300)]
    data = [p + q for p, q in zip(picks, reversed(picks))] + [n.encode() + b'"' for n in NAMES] + [b"", b"\xff" * 70]
    for d in data:
        want = [r for n in range(1, min(len(d), tt.max_len) + 1) for r in tt.ranks_of(d[:n])]
        assert sorted(tt.prefix_ranks(d)) == sorted(want), d
    assert all(tt.prefix_ranks(p) for p in picks if p)   # each token is a prefix of itself


@pytest.mark.parametrize("tname", TOKENIZER_NAMES)
def test_prefix_span_in_c_equals_the_lookups_it_replaces(tname, monkeypatch):
    """``lexeme_tokens.prefix_span`` (one descent of the byte-sorted tokens in C) gives the
    ids of every token that is a prefix of the string and the ranks of the longer tokens
    that start with it, as the per-prefix lookups and bisections of the Python spelling."""
    from gramgen.automata.lexeme_tokens import prefix_span
    from gramgen.automata.token_table import token_table_for

    if lexeme_tokens._tokenwalk is None:
        pytest.skip("the native kernel is not built")
    tt = token_table_for(vocabulary(tname))
    rng = np.random.default_rng(11)
    picks = [tt.sorted_bytes[int(r)] for r in rng.integers(0, len(tt.sorted_bytes), 300)]
    data = [p + q[:int(k)] for p, q, k in zip(picks, reversed(picks), rng.integers(0, 6, len(picks)))]
    data += [b'"' + bytes(rng.choice(list(b'abe_"'), int(n))) for n in rng.integers(1, 20, 300)]
    data += [n.encode() + b'"' for n in NAMES] + [b"\xff" * 70, b"\x00", b" " * 40]
    native = [prefix_span(tt, d) for d in data]
    monkeypatch.setattr(lexeme_tokens, "_tokenwalk", None)
    spans = 0
    for d, (ids, lo, hi) in zip(data, native):
        want_ids, want_lo, want_hi = prefix_span(tt, d)
        assert ids.tolist() == want_ids.tolist() and (lo, hi) == (want_lo, want_hi), d
        assert all(len(tt.sorted_bytes[r]) > len(d) and tt.sorted_bytes[r].startswith(d) for r in range(lo, hi))
        spans += hi > lo
    assert spans >= 10 and sum(len(s[0]) for s in native) > 300


def test_prefix_span_refuses_offsets_outside_the_blob():
    from gramgen.automata.token_table import token_table_for

    tw = lexeme_tokens._tokenwalk
    if tw is None:
        pytest.skip("the native kernel is not built")
    tt = token_table_for(vocabulary("gpt2"))
    bad = tt.offsets.copy()
    bad[len(bad) // 2:] += 10**9
    with pytest.raises(ValueError):
        tw.prefix_span(tt.blob, bad, tt.sorted_bytes[len(bad) // 2], tt.rank_to_id)
    with pytest.raises(ValueError):
        tw.prefix_span(tt.blob, tt.offsets, b"a", tt.rank_to_id[:10])
