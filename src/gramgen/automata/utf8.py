"""Code point sets as small deterministic byte automata over their UTF-8 encodings.

A lexeme's character classes can cover most of Unicode (``[^"\\\\]``); expanding them
into one NFA path per UTF-8 sequence would make subset construction slow. Instead we
build, per set, the automaton whose state after a byte prefix is "which code points are
still possible, and how many continuation bytes remain". Two prefixes with the same
remaining set share a state, so the result is already minimal and tiny for big classes.

Only valid, shortest-form UTF-8 is produced; surrogates (U+D800..U+DFFF) never match.
"""

from __future__ import annotations

from functools import lru_cache

from .._lru import cleared_with_all

EXIT = -1
"""Edge target meaning "one complete code point has been read"."""

SURROGATES = (0xD800, 0xDFFF)

# (first code point, last code point, lead byte marker) per encoded length 2..4;
# length 1 is plain ASCII.
_LENGTHS = ((2, 0x80, 0x7FF, 0xC0), (3, 0x800, 0xFFFF, 0xE0), (4, 0x10000, 0x10FFFF, 0xF0))

Ranges = tuple[tuple[int, int], ...]
Edge = tuple[int, int, int]  # (lo byte, hi byte, target state or EXIT)


def without_surrogates(ranges: Ranges) -> Ranges:
    """``ranges`` (sorted, disjoint) minus U+D800..U+DFFF, which UTF-8 cannot encode."""
    out: list[tuple[int, int]] = []
    s_lo, s_hi = SURROGATES
    for lo, hi in ranges:
        if hi < s_lo or lo > s_hi:
            out.append((lo, hi))
            continue
        if lo < s_lo:
            out.append((lo, s_lo - 1))
        if hi > s_hi:
            out.append((s_hi + 1, hi))
    return tuple(out)


def _clip(ranges: Ranges, lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if b >= lo and a <= hi]


@cleared_with_all
@lru_cache(maxsize=2048)
def utf8_automaton(ranges: Ranges) -> tuple[tuple[Edge, ...], ...]:
    """A deterministic automaton accepting exactly the UTF-8 encodings of ``ranges``.

    ``ranges`` are sorted, disjoint inclusive code point ranges. Returns a tuple of
    states (state 0 is the start); each state is a tuple of byte-range edges, sorted by
    byte and non-overlapping, whose target is a state index or ``EXIT``. Every state
    except the start reads continuation bytes only, and every path ends at ``EXIT``.
    """
    ranges = without_surrogates(tuple(ranges))
    states: list[tuple[Edge, ...]] = [()]
    memo: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}

    def split(rel: list[tuple[int, int]], block: int, first_byte: int, remaining: int) -> list[Edge]:
        # Group code points (offsets) by the byte that selects their block of size
        # ``block``; after that byte, ``remaining`` bytes select within the block.
        # Runs of fully covered blocks are handled as one segment, not byte by byte.
        full = ((0, block - 1),)
        segs: list[tuple[int, int, list[tuple[int, int]] | None]] = []

        def partial(idx: int, lo: int, hi: int) -> None:
            if segs and segs[-1][0] == idx and segs[-1][2] is not None:
                segs[-1][2].append((lo, hi))
            else:
                segs.append((idx, idx, [(lo, hi)]))

        for lo, hi in rel:
            i0, i1 = lo // block, hi // block
            if i0 == i1:
                partial(i0, lo - i0 * block, hi - i0 * block)
                continue
            if lo % block:
                partial(i0, lo - i0 * block, block - 1)
                i0 += 1
            last_full = i1 if hi % block == block - 1 else i1 - 1
            if i0 <= last_full:
                segs.append((i0, last_full, None))
            if last_full < i1:
                partial(i1, 0, hi - i1 * block)
        edges: list[Edge] = []
        for ilo, ihi, sub in segs:
            if remaining == 0:
                target = EXIT
            else:
                target = state_for(remaining, full if sub is None else tuple(sub))
            blo, bhi = first_byte + ilo, first_byte + ihi
            if edges and edges[-1][2] == target and edges[-1][1] == blo - 1:
                edges[-1] = (edges[-1][0], bhi, target)
            else:
                edges.append((blo, bhi, target))
        return edges

    def state_for(remaining: int, rel: tuple[tuple[int, int], ...]) -> int:
        key = (remaining, rel)
        sid = memo.get(key)
        if sid is None:
            sid = memo[key] = len(states)
            states.append(())
            states[sid] = tuple(split(list(rel), 64 ** (remaining - 1), 0x80, remaining - 1))
        return sid

    start: list[Edge] = [(lo, hi, EXIT) for lo, hi in _clip(ranges, 0, 0x7F)]
    for length, first, last, marker in _LENGTHS:
        rel = _clip(ranges, first, last)
        if rel:
            start.extend(split(rel, 64 ** (length - 1), marker, length - 1))
    states[0] = tuple(start)
    split = state_for = None   # the two closures refer to each other: no cycle left behind
    return tuple(states)


def encode_sequences(ranges: Ranges) -> list[list[tuple[int, int]]]:
    """All byte-range sequences of the automaton (for tests and debugging)."""
    automaton = utf8_automaton(tuple(ranges))
    out: list[list[tuple[int, int]]] = []

    def walk(state: int, prefix: list[tuple[int, int]]) -> None:
        for lo, hi, target in automaton[state]:
            seq = prefix + [(lo, hi)]
            if target == EXIT:
                out.append(seq)
            else:
                walk(target, seq)

    walk(0, [])
    return out


#: (lead byte range, encoded length, first and last code point) per UTF-8 length
_UTF8_SIZES = ((0xC2, 0xDF, 2, 0x80, 0x7FF), (0xE0, 0xEF, 3, 0x800, 0xFFFF),
               (0xF0, 0xF4, 4, 0x10000, 0x10FFFF))


def completions(pending: bytes):
    """The characters whose UTF-8 encoding starts with ``pending`` (a valid incomplete
    character, as an incremental UTF-8 decoder leaves one at the end of a text), in code
    point order."""
    lead = pending[0]
    for low, high, size, first, last in _UTF8_SIZES:
        if low <= lead <= high:
            break
    else:
        return
    free = 6 * (size - len(pending))
    value = lead & (0xFF >> (size + 1))
    for b in pending[1:]:
        value = (value << 6) | (b & 0x3F)
    start, stop = max(value << free, first), min(((value + 1) << free) - 1, last)
    for cp in range(start, stop + 1):
        if not 0xD800 <= cp <= 0xDFFF:
            yield chr(cp)
