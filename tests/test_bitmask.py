"""Packed masks: positions() lists the set bits as unpack() + flatnonzero does."""

from __future__ import annotations

import numpy as np
import pytest

from gramgen.automata import bitmask


@pytest.mark.parametrize("size", [1, 31, 32, 33, 1000, 128_257])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.1, 0.9, 1.0])
def test_positions_equal_unpacked_nonzero(size, density):
    rng = np.random.default_rng(size + int(density * 1000))
    allowed = rng.random(size) < density
    words = bitmask.pack(allowed)
    got = bitmask.positions(words, size)
    assert got.tolist() == np.flatnonzero(allowed).tolist()
    # bits past the limit (padding set by a writer) are not reported
    if size % 32:
        words[-1] |= np.uint32(1 << 31)
    assert bitmask.positions(words, size).tolist() == np.flatnonzero(allowed).tolist()


def _both(monkeypatch, fn):
    """fn() with the C kernels, then with the numpy reference."""
    native = fn()
    monkeypatch.setattr(bitmask, "_bits", None)
    reference = fn()
    monkeypatch.undo()
    return native, reference


@pytest.mark.skipif(bitmask._bits is None, reason="the C kernels are not built (or GRAMGEN_NATIVE=0)")
@pytest.mark.parametrize("size", [1, 33, 5000, 128_257])
def test_native_kernels_equal_numpy(size, monkeypatch):
    rng = np.random.default_rng(size)
    words = bitmask.pack(rng.random(size) < 0.3)
    known = bitmask.pack(rng.random(size) < 0.5)
    rank_to_id = rng.permutation(size).astype(np.int64)
    for limit in (0, size // 2, size, size + 40):
        a, b = _both(monkeypatch, lambda: bitmask.positions(words, limit).tolist())
        assert a == b
        a, b = _both(monkeypatch, lambda: bitmask.unknown_positions(words, limit, rank_to_id, known).tolist())
        assert a == b
    ranks = rng.integers(0, size, 300)
    for dtype in (np.int64, np.int32):
        for mapping in (None, rank_to_id):
            def setting():
                out = np.zeros(bitmask.n_words(size), dtype=np.uint32)
                bitmask.set_bits(out, ranks.astype(dtype), mapping)
                return out.tolist()
            a, b = _both(monkeypatch, setting)
            assert a == b


@pytest.mark.skipif(bitmask._bits is None, reason="the C kernels are not built (or GRAMGEN_NATIVE=0)")
def test_native_set_bits_checks_every_index_first():
    words = np.zeros(2, dtype=np.uint32)
    with pytest.raises(ValueError, match="outside the words"):
        bitmask.set_bits(words, [3, 64])
    with pytest.raises(ValueError, match="outside rank_to_id"):
        bitmask.set_bits(words, [1, 5], np.arange(4))
    assert not words.any()   # nothing was set before the bad index was found
    with pytest.raises(ValueError, match="int32 or int64"):
        bitmask._bits.set_bits(words, np.array([1.0]))


@pytest.mark.parametrize("size", [1, 33, 5000, 128_257])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.01, 0.3])
def test_take_few_reads_out_and_clears(size, density, monkeypatch):
    """take_few lists the set bits and zeroes the words when there are at most max_count
    of them, and leaves the words untouched (None) when there are more; the C kernel and
    the numpy reference agree."""
    rng = np.random.default_rng(size + int(density * 1000))
    allowed = rng.random(size) < density
    n = int(allowed.sum())
    for max_count in (0, n - 1, n, n + 5):
        if max_count < 0:
            continue
        for native in (True, False):
            if native and bitmask._bits is None:
                continue
            if not native:
                monkeypatch.setattr(bitmask, "_bits", None)
            words = bitmask.pack(allowed)
            got = bitmask.take_few(words, max_count)
            monkeypatch.undo()
            if n > max_count:
                assert got is None and (words == bitmask.pack(allowed)).all()
            else:
                assert got.tolist() == np.flatnonzero(allowed).tolist() and not words.any()


def test_lexeme_tokens_held_sparse_read_as_packed():
    """A LexemeTokens that holds its sets as positions reads like one that holds them
    packed: ORs (whole and within a mask), exit ranks, the packed views, other exits."""
    from gramgen.automata.lexeme_tokens import FEW_TOKENS, LexemeTokens

    rng = np.random.default_rng(7)
    n_ids, n_ranks = 3000, 2900
    for k_in, k_ex in ((0, 0), (5, 0), (40, 3), (FEW_TOKENS + 100, 7)):
        ids = np.sort(rng.choice(n_ids, k_in, replace=False)).astype(np.int64)
        ranks = np.sort(rng.choice(n_ranks, k_ex, replace=False)).astype(np.int64)
        inside = np.zeros(bitmask.n_words(n_ids), dtype=np.uint32)
        exits = np.zeros(bitmask.n_words(n_ranks), dtype=np.uint32)
        bitmask.set_bits(inside, ids)
        bitmask.set_bits(exits, ranks)
        packed = LexemeTokens(inside=inside, exits=exits, n_exits=k_ex)
        sparse = LexemeTokens.held(ids, ranks, k_ex, inside.shape[0], exits.shape[0])
        within_ids = bitmask.pack(rng.random(n_ids) < 0.5)
        within_ranks = bitmask.pack(rng.random(n_ranks) < 0.5)
        for lt in (packed, sparse):
            assert (lt.inside == inside).all() and (lt.exits == exits).all() and lt.n_exits == k_ex
            assert lt.exit_ranks().tolist() == ranks.tolist()
            base = bitmask.pack(rng.random(n_ids) < 0.1)
            words = base.copy()
            lt.or_inside(words)
            assert (words == (base | inside)).all()
            words = base.copy()
            lt.or_inside(words, within_ids)
            assert (words == (base | (inside & within_ids))).all()
            acc = np.zeros_like(exits)
            lt.or_exits(acc, within_ranks)
            assert (acc == (exits & within_ranks)).all()
            fewer = lt.with_exits(ranks[::2])
            assert fewer.exit_ranks().tolist() == ranks[::2].tolist() and fewer.n_exits == len(ranks[::2])
            assert (fewer.inside == inside).all()
        assert sparse.nbytes < packed.nbytes or k_in > FEW_TOKENS
