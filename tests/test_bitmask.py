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
