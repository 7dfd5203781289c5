"""Links of a long string's block chain named alike in signatures (``earley.chain_aliases``).

A JSON string longer than ``LONG_STRING`` is counted in 64-character blocks by a chain of
nonterminals. Links whose rules agree as far as the longest token reaches share one class,
so the masks and exit walks of one block are reused at the next; links near the ends of
the count (``minLength``, ``maxLength``) keep their own. The masks must stay exact where a
token reaches those ends, with tokens longer than a block.
"""

from __future__ import annotations

import numpy as np
import pytest

import gramgen
from gramgen.automata.dfa import compile_lexemes
from gramgen.automata.earley import ParserTables
from gramgen.grammar.ir import COUNTED_CHAINS
from gramgen.testing import brute_force_mask

#: one byte each, runs of "a" up to 150 bytes (longer than two blocks), and tokens that
#: close the string and go on
PIECES = ([bytes([b]) for b in range(32, 127)] + [b"a" * k for k in range(2, 151)]
          + [b'"', b'a"', b'",', b'"}', b'aaaa"}', b'a' * 70 + b'"}', b"\\n", b"a\\u00e9"])
VOCAB = gramgen.Vocabulary(PIECES + [b""], eos_token_ids=[len(PIECES)])


def _schema(lo: int, hi: int | None) -> dict:
    s = {"type": "string", "minLength": lo} | ({"maxLength": hi} if hi is not None else {})
    return {"type": "object", "properties": {"s": s}, "required": ["s"], "additionalProperties": False}


def _tables(schema: dict, window: int):
    g = gramgen.Grammar.from_json_schema(schema, whitespace="compact")
    ir, dfas = compile_lexemes(g.ir)
    return ir, ParserTables(ir, dfas, window=window)


def _link_aliases(ir, tables) -> list[int]:
    (chain,) = ir.meta[COUNTED_CHAINS]
    index = {n: i for i, n in enumerate(tables.nt_names)}
    first = {}
    # the class of a link's items with the dot at the start: equal iff the aliases are
    out = []
    for name in chain:
        if name not in index:
            out.append(None)
            continue
        items = sorted(tables.item_class[i] for i in tables.rules_of[index[name]])
        out.append(first.setdefault(tuple(items), len(first)))
    return out


def test_middle_links_share_a_class_and_the_ends_keep_their_own():
    ir, tables = _tables(_schema(100, 5000), window=150)
    aliases = _link_aliases(ir, tables)
    assert len(aliases) == 5000 // 64 + 1
    # 150 bytes reach 4 links past one (64 bytes between links): 1 + 150 // 64 + 2 of them
    # are compared, so the last ones (within reach of the end of the count) stay apart ...
    tail = [a for a in aliases[-5:] if a is not None]
    assert len(set(tail)) == len(tail)
    # ... as do the first two (minLength 100 makes their rests longer), and the middle is one class
    assert aliases[0] != aliases[1] and aliases[1] != aliases[2]
    middle = aliases[2:-8]
    assert len(set(middle)) == 1 and len(middle) > 60
    assert aliases[0] not in middle and aliases[1] not in middle and not set(tail) & set(middle)


def test_no_window_or_no_chain_keeps_every_link_apart():
    ir, tables = _tables(_schema(0, 2000), window=0)
    aliases = [a for a in _link_aliases(ir, tables) if a is not None]
    assert len(set(aliases)) == len(aliases)
    ir2 = gramgen.Grammar.from_json_schema(_schema(0, 2000), whitespace="compact").ir
    ir2.meta.pop(COUNTED_CHAINS)
    ir2, dfas = compile_lexemes(ir2)
    folded = ParserTables(ir2, dfas, window=150)
    plain = ParserTables(ir2, dfas, window=0)
    assert folded.item_class == plain.item_class


def test_a_malformed_chain_hint_is_not_trusted():
    """A hint naming nonterminals that are not a chain (a link that is not at the end of
    its rule) folds nothing."""
    ir, dfas = compile_lexemes(gramgen.Grammar.from_json_schema(_schema(0, 2000), whitespace="compact").ir)
    (chain,) = ir.meta[COUNTED_CHAINS]
    shuffled = chain[:3] + chain[4:5] + chain[3:4] + chain[5:]
    ir.meta[COUNTED_CHAINS] = (shuffled,)
    bad = ParserTables(ir, dfas, window=150)
    index = {n: i for i, n in enumerate(bad.nt_names)}
    near = [index[n] for n in shuffled[:5]]
    classes = {bad.item_class[i] for n in near for i in bad.rules_of[n]}
    # the swapped pair, and the links before it that reach it within the window: each
    # keeps its own class
    assert len(classes) == sum(len(bad.rules_of[n]) for n in near) == 10
    # past the pair the hint is a chain again: those links are folded
    after = [tuple(sorted(bad.item_class[i] for i in bad.rules_of[index[n]])) for n in shuffled[5:15]]
    assert len(set(after)) == 1


@pytest.mark.parametrize("lo,hi", [(0, 1000), (130, 1100), (300, None)])
def test_masks_exact_along_a_long_string_with_tokens_longer_than_a_block(lo, hi):
    """The whole string is walked one byte at a time with its masks computed (the caches
    of earlier blocks fill); masks are compared with brute force at each position of the
    first blocks and the last ones, where tokens of 150 bytes reach the end of the count."""
    cg = gramgen.compile(gramgen.Grammar.from_json_schema(_schema(lo, hi), whitespace="compact"), VOCAB)
    n = hi if hi is not None else 1200
    m = cg.matcher()
    m.advance_text('{"s":"')
    checked = 0
    for pos in range(n + 1):
        mask = m.mask()
        if pos < 140 or pos > n - 200 or lo - 70 <= pos <= lo + 5:
            exact = brute_force_mask(m)
            wrong = np.flatnonzero(mask != exact)
            assert not wrong.size, (pos, [PIECES[t] if t < len(PIECES) else t for t in wrong[:5]])
            checked += 1
        if pos < n:
            m.advance_text("a")
    assert checked > 300
    m.advance_text('"}')
    assert m.is_accepting()


def _shortest_word(dfa) -> int:
    """Bytes of the shortest word a DFA accepts (1 << 30 for none): breadth-first."""
    if not dfa.n_states:
        return 1 << 30
    frontier, seen = {0}, {0}
    for length in range(dfa.n_states + 1):
        if any(dfa.accepting[q] for q in frontier):
            return length
        frontier = {int(t) for q in frontier for t in dfa.transitions[q] if t >= 0} - seen
        seen |= frontier
        if not frontier:
            break
    return 1 << 30


@pytest.mark.parametrize("pattern,n", [("abc", 3), ("é{2}", 4), ("a*b", 1), ("(?:ab|c)d", 2),
                                       ("[a-z]{64}", 64), ("x(?:yz)*", 1), ("\\u4e2d|ab", 2), ("[^a]", 1),
                                       ("\\U0001F600|\\u4e2d\\u4e2d", 4), ("(?:a|\\u4e2d)\\u00e9", 3)])
def test_fewest_bytes_is_the_shortest_word(pattern, n):
    """``simplify.fewest_bytes`` (what counted chains step by) is the length in bytes of
    the shortest word of the regex's DFA."""
    from gramgen.automata.dfa import compile_regex
    from gramgen.grammar.regex import parse_regex
    from gramgen.grammar.simplify import fewest_bytes

    rx = parse_regex(pattern)
    assert fewest_bytes(rx) == _shortest_word(compile_regex(rx)) == n
