"""Vocabulary laid out for fast mask computation.

Two views of the same tokens, built once per vocabulary and shared by every grammar:

* sorted by their bytes (``ranks``), so that tokens sharing a prefix are contiguous and a
  walk over them can share parser work and skip a dead prefix with one bisection;
* a column-major byte matrix sorted by length, so one lexeme DFA can be run over the
  whole vocabulary at once with numpy.

Tokens with no bytes (special tokens, and any empty token) are left out: a grammar never
allows them (EOS is handled separately).
"""

from __future__ import annotations

import bisect
import threading

import numpy as np

from .._lru import SizedLRU
from .bitmask import pack


#: rows of ``TokenTable.long_ids`` / ``long_ranks``: one more than the longest chain the
#: native walk counts without a loop (``CHAIN_STEPS`` + 1 in ``_tokenwalk.c``)
LONG_ROWS = 26


class TokenTable:
    """Byte-sorted and length-sorted views of a vocabulary's non-empty tokens."""

    def __init__(self, tokens: list[bytes], excluded: frozenset[int] = frozenset()):
        self.vocab_size = len(tokens)
        self.n_words = (self.vocab_size + 31) // 32
        ids = [i for i, t in enumerate(tokens) if t and i not in excluded]
        ids.sort(key=lambda i: tokens[i])
        #: token ids in byte order; ``sorted_bytes[r]`` spells token ``rank_to_id[r]``
        self.rank_to_id = np.array(ids, dtype=np.int64)
        #: (a tuple of bytes: the garbage collector stops tracking it, where a list of a
        #: large vocabulary would be walked by every full collection, ~1.7 ms at 128k)
        self.sorted_bytes: tuple[bytes, ...] = tuple(tokens[i] for i in ids)
        #: uint32 words of a mask by rank (exit tokens, LexemeTokens.exits)
        self.n_rank_words = (len(ids) + 31) // 32
        self.id_to_rank = np.full(self.vocab_size, -1, dtype=np.int64)
        self.id_to_rank[self.rank_to_id] = np.arange(len(ids))
        lengths = np.array([len(b) for b in self.sorted_bytes], dtype=np.int64)
        self.lengths = lengths  # by rank
        # length-descending order of ranks, and one byte column per position
        self.by_length = np.argsort(-lengths, kind="stable")
        self.max_len = int(lengths.max()) if len(ids) else 0
        flat = np.zeros((self.max_len, len(ids)), dtype=np.uint8)
        blob = np.frombuffer(b"".join(self.sorted_bytes), dtype=np.uint8)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(ids) else lengths
        for pos in range(self.max_len):
            has = lengths > pos
            flat[pos, has] = blob[starts[has] + pos]
        #: ``columns[pos][rank]`` is byte ``pos`` of that token (0 past its end)
        self.columns = flat
        #: ``byte_sets[rank]``: the bytes the token contains, a 256-bit set in 4 words
        sets = np.zeros((len(ids), 4), dtype=np.uint64)
        for pos in range(self.max_len):
            has = np.flatnonzero(lengths > pos)
            b = flat[pos, has].astype(np.uint64)
            sets[has, (b >> np.uint64(6)).astype(np.intp)] |= np.left_shift(np.uint64(1), b & np.uint64(63))
        self.byte_sets = sets
        #: ranks whose first byte is ``b`` are ``first_start[b]`` up to ``first_start[b + 1]``
        first = flat[0] if len(ids) else np.zeros(0, dtype=np.uint8)
        self.first_start = np.searchsorted(first, np.arange(257), side="left").astype(np.int64)
        #: ``first_sizes[b]``: how many tokens start with byte ``b``
        self.first_sizes = np.diff(self.first_start)
        #: the sorted tokens' bytes end to end (token ``r`` is ``blob[offsets[r]:offsets[r + 1]]``)
        #: and ``lcp[r]``, how many leading bytes token ``r`` shares with token ``r - 1``: the
        #: trie of the vocabulary, implicit, for the native walk
        self.blob = blob
        self.offsets = np.concatenate([starts, [int(lengths.sum())]]).astype(np.int64)
        lcp = np.zeros(len(ids), dtype=np.int32)
        same = np.ones(max(len(ids) - 1, 0), dtype=bool)
        for pos in range(self.max_len):
            same &= (lengths[1:] > pos) & (lengths[:-1] > pos) & (flat[pos, 1:] == flat[pos, :-1])
            if not same.any():
                break
            lcp[1:] += same
        self.lcp = lcp
        self._rests(blob, starts, lengths)
        self._made_of: dict[bytes, np.ndarray] = {}
        #: bytes -> the last rank holding them (tokens with equal bytes have adjacent ranks);
        #: made here (~15 ms at 128k tokens), not on first use, which is inside a mask
        self._last_rank: dict[bytes, int] = dict(zip(self.sorted_bytes, range(len(self.sorted_bytes))))
        #: ``n_longer[d]``: how many tokens are longer than ``d`` bytes
        self.n_longer = (len(ids) - np.cumsum(np.bincount(lengths, minlength=self.max_len + 1))).astype(np.int64)
        self._longer: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._depth_for_tail: dict[int, int] = {}
        self._depth_for_share: dict[float, int | None] = {}
        #: lexeme-state classes shared by every grammar compiled for this vocabulary
        #: (``TokenClasses._classify``), keyed by the state's future and follow bytes
        self.shared_classes: SizedLRU = SizedLRU(64 << 20, lambda lt: lt.nbytes)
        #: the same for the states of the value lexemes that every JSON Schema grammar of a
        #: layout has (strings, numbers, literals, whitespace, punctuation), made once per
        #: layout (``runtime.json_standard``) and kept for the table's life: not emptied by
        #: ``_lru.clear_all``, like the table itself
        self.standard_classes: dict[bytes, object] = {}
        #: the layouts whose standard classes are made (or being made)
        self.standard_layouts: set = set()
        #: by token id, its length (tokens left out: longer than any depth)
        self._id_lengths = np.full(self.vocab_size, np.iinfo(np.int64).max, dtype=np.int64)
        self._id_lengths[self.rank_to_id] = lengths

    def _rests(self, blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        """Per rank, what the native walk's loop shortcut tests (see ``_tokenwalk.c``):
        ``char_len``, the bytes of the token's first character (2 to 4 after a UTF-8 lead
        byte, at most the token's length; else 1); ``rest_bits``, the ASCII bytes after it
        as two 64-bit words (bit ``b`` for byte ``b`` in 1..127; bit 0 for a NUL or a byte
        >= 0x80); ``rest_utf8``, 1 when that rest holds non-ASCII bytes, no NUL, and is
        well-formed UTF-8 (whole characters only); ``rest_chars``, its characters (bytes
        that do not continue a UTF-8 character)."""
        n = len(lengths)
        first = blob[starts] if n else np.zeros(0, dtype=np.uint8)
        lead = np.ones(256, dtype=np.uint8)
        lead[0xC2:0xE0], lead[0xE0:0xF0], lead[0xF0:0xF5] = 2, 3, 4
        self.char_len = np.minimum(lead[first], lengths).astype(np.uint8)
        rest = np.zeros((n, 2), dtype=np.uint64)
        if n:
            token_of = np.repeat(np.arange(n), lengths)
            in_rest = np.arange(blob.size) - starts[token_of] >= self.char_len[token_of]
            b = blob.astype(np.uint64)
            bit = np.left_shift(np.uint64(1), b & np.uint64(63))
            odd = (b == 0) | (b >= 128)
            bit[odd] = 1
            for word, sel in ((0, (b < 64) | odd), (1, (b >= 64) & ~odd)):
                vals = np.where(in_rest & sel, bit, np.uint64(0))
                rest[:, word] = np.bitwise_or.reduceat(vals, starts)
        self.rest_bits = rest
        if n:
            chars = np.where(in_rest & ((blob < 0x80) | (blob >= 0xC0)), 1, 0).astype(np.int64)
            self.rest_chars = np.minimum(np.add.reduceat(chars, starts), 0xFFFF).astype(np.uint16)
        else:
            self.rest_chars = np.zeros(0, dtype=np.uint16)
        utf8 = np.zeros(n, dtype=np.uint8)
        for r in np.flatnonzero(rest[:, 0] & np.uint64(1)):
            tail = self.sorted_bytes[r][self.char_len[r]:]
            if b"\0" not in tail and _whole_utf8(tail):
                utf8[r] = 1
        self.rest_utf8 = utf8
        self._rare(blob, starts, lengths)

    def _rare(self, blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        """What the native walk's exception path reads (see ``_tokenwalk.c``): the ranks of
        the tokens that contain each ASCII byte ``c`` (``rare_ranks[rare_start[c]:rare_start[c
        + 1]]``, ascending), then of those with a byte >= 0x80 (128) and of those whose
        bytes >= 0x80 are not whole well-formed UTF-8 characters (129); ``by_chars``, the
        ranks by character count, most first, and ``more_chars[L]``, how many have more than
        ``L`` characters; ``real_ids``, the packed set of token ids that have a rank;
        ``long_ids[L]`` and ``long_ranks[L]``, the tokens with more than ``L`` characters
        packed by id and by rank (``L`` below :data:`LONG_ROWS`)."""
        n = len(lengths)
        if n:
            token_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
            cls = np.minimum(blob, 128).astype(np.int64)
            pairs = np.unique(cls * n + token_of)
            listed = [pairs]
            broken = [r for r in np.unique(token_of[blob >= 0x80]).tolist() if not _whole_utf8(self.sorted_bytes[r])]
            listed.append(129 * n + np.array(broken, dtype=np.int64))
            pairs = np.concatenate(listed)
            self.rare_start = np.searchsorted(pairs // n, np.arange(131), side="left").astype(np.int64)
            self.rare_ranks = (pairs % n).astype(np.int32)
            chars = np.add.reduceat(((blob < 0x80) | (blob >= 0xC0)).astype(np.int64), starts)
        else:
            self.rare_start = np.zeros(131, dtype=np.int64)
            self.rare_ranks = np.zeros(0, dtype=np.int32)
            chars = np.zeros(0, dtype=np.int64)
        self.by_chars = np.argsort(-chars, kind="stable").astype(np.int32)
        self.more_chars = (n - np.cumsum(np.bincount(np.minimum(chars, self.max_len),
                                                     minlength=self.max_len + 1))).astype(np.int64)
        real = np.zeros(self.vocab_size, dtype=bool)
        real[self.rank_to_id] = True
        self.real_ids = pack(real)
        # row L: the tokens with more than L characters, by id and by rank (a chain's room
        # is at most LONG_ROWS - 1 characters unless it loops, which leaves none longer)
        rows = min(LONG_ROWS, self.max_len + 1)
        self.long_ids = np.zeros((rows, self.n_words), dtype=np.uint32)
        self.long_ranks = np.zeros((rows, self.n_rank_words), dtype=np.uint32)
        for L in range(rows):
            longer = chars > L
            by_id = np.zeros(self.vocab_size, dtype=bool)
            by_id[self.rank_to_id[longer]] = True
            self.long_ids[L] = pack(by_id)
            self.long_ranks[L] = pack(longer)

    def depth_for_tail(self, tail: int) -> int:
        """The fewest bytes that all but one token in ``tail`` keep within (``max_len`` at
        most): how deep an agreement of lexeme states is worth looking (see
        ``TokenClasses.agreement_cap``). Per vocabulary, so kept."""
        found = self._depth_for_tail.get(tail)
        if found is None:
            longer, n = self.n_longer, len(self.sorted_bytes)
            found = next((d for d in range(len(longer)) if longer[d] * tail <= n), self.max_len)
            self._depth_for_tail[tail] = found
        return found

    def depth_for_share(self, share: float) -> int | None:
        """The fewest bytes that all but ``share`` of the tokens keep within: an agreement
        of lexeme states less deep leaves more than that share to decide, so reusing a
        neighbour's mask does not pay (see ``Matcher._neighbour_words``). None where
        ``share`` is negative (never reuse). Per vocabulary, so kept."""
        found = self._depth_for_share.get(share, -1)
        if found == -1:
            limit = share * len(self.sorted_bytes)
            found = next((d for d in range(len(self.n_longer)) if self.n_longer[d] <= limit), None)
            self._depth_for_share[share] = found
        return found

    def longer_than(self, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ranks of the tokens longer than ``depth`` bytes (ascending), and packed masks
        of the others (the tokens of at most ``depth`` bytes) by token id and by rank."""
        found = self._longer.get(depth)
        if found is None:
            long = self.lengths > depth
            found = (np.flatnonzero(long), pack(self._id_lengths <= depth), pack(~long))
            if len(self._longer) > 512:
                self._longer = {}  # a reader holding the old dict still reads correct values
            self._longer[depth] = found
        return found

    def made_only_of(self, allowed: np.ndarray) -> np.ndarray:
        """bool per rank: whether the token's bytes all lie in ``allowed`` (bool[256]).
        Cached per byte set: the string bodies of a grammar share a handful of them."""
        key = np.packbits(allowed, bitorder="little").tobytes()
        found = self._made_of.get(key)
        if found is None:
            words = np.frombuffer(key, dtype="<u8")
            hit = self.byte_sets[:, 0] & ~words[0]
            for w in range(1, 4):
                hit |= self.byte_sets[:, w] & ~words[w]
            found = hit == 0
            found.flags.writeable = False
            if len(self._made_of) >= 64:
                self._made_of = {}  # a reader holding the old dict still reads correct values
            self._made_of[key] = found
        return found

    def prefix_end(self, prefix: bytes, lo: int = 0) -> int:
        """First rank (>= lo) whose bytes do not start with ``prefix`` (prefix ranks are contiguous)."""
        p = prefix.rstrip(b"\xff")
        if not p:
            return len(self.sorted_bytes)
        succ = p[:-1] + bytes((p[-1] + 1,))
        return bisect.bisect_left(self.sorted_bytes, succ, lo)

    def longest_prefix_token(self, data: bytes) -> tuple[int, int] | None:
        """(token id, length) of the longest token that is a prefix of ``data``."""
        last_rank = self._last_rank
        for n in range(min(len(data), self.max_len), 0, -1):
            rank = last_rank.get(data[:n])
            if rank is not None:
                return int(self.rank_to_id[rank]), n
        return None

    def ranks_of(self, data: bytes) -> range:
        """The ranks of the tokens whose bytes are ``data`` (none, one, or a few equal ones)."""
        last = self._last_rank.get(data)
        if last is None:
            return range(0)
        first = last
        while first and self.sorted_bytes[first - 1] == data:
            first -= 1
        return range(first, last + 1)

    def prefix_ranks(self, data: bytes) -> list[int]:
        """The ranks of the tokens whose bytes are a prefix of ``data`` (what
        :meth:`ranks_of` gives for each prefix, in one loop: a key chain's classes ask it
        for every prefix of a string up to 64 bytes)."""
        get, sorted_bytes = self._last_rank.get, self.sorted_bytes
        out: list[int] = []
        for n in range(1, min(len(data), self.max_len) + 1):
            last = get(data[:n])
            if last is not None:
                out.append(last)
                first = last
                while first and sorted_bytes[first - 1] == sorted_bytes[last]:
                    first -= 1
                    out.append(first)
        return out

    def count_with_prefix(self, prefix: bytes) -> int:
        """How many tokens start with ``prefix``."""
        lo = bisect.bisect_left(self.sorted_bytes, prefix)
        return self.prefix_end(prefix, lo) - lo


def _whole_utf8(data: bytes) -> bool:
    """Whether ``data`` is well-formed UTF-8 (whole characters, no surrogates or overlong forms)."""
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


_TABLES: dict[tuple[str, frozenset[int]], TokenTable] = {}
_LOCK = threading.Lock()


def token_table_for(vocab) -> TokenTable:
    """One shared TokenTable per vocabulary (keyed by its fingerprint)."""
    key = (vocab.fingerprint, frozenset(vocab.special_ids))
    with _LOCK:
        table = _TABLES.get(key)
        if table is None:
            table = TokenTable(list(vocab.tokens), frozenset(vocab.special_ids))
            if len(_TABLES) > 8:
                _TABLES.pop(next(iter(_TABLES)))
            _TABLES[key] = table
        return table
