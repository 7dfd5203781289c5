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
