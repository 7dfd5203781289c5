"""Tokens a grammar can never accept, known without checking them.

A sampler that checks the tokens it draws one at a time (AWRS) spends most of its checks,
where the model and the grammar disagree, on tokens that could be ruled out wholesale:

* the **alphabet**: a token holding a byte that no lexeme DFA has a transition on (any
  state, any lexeme, ignored ones included) can never be scanned, in any state. Every
  byte the parser steps over goes through a lexeme DFA, so this set of bytes holds every
  byte of every word of the language (it may hold more: states of lexemes no rule uses);
* the **first byte**: in a given parser state only the bytes ``ParserTables.allowed_bytes``
  gives can come next (exact: a parse survives a byte iff some lexeme being scanned takes
  it), so a token starting with any other byte is rejected there.

:class:`TokenFilter` holds both as vectors over the vocabulary, built once per compiled
grammar; :meth:`TokenFilter.possible` is a superset of the allowed tokens of a state with
the given next bytes (EOS ids always in: whether EOS may come is a check of its own).
"""

from __future__ import annotations

import numpy as np

from .._lru import LRU

__all__ = ["TokenFilter", "language_bytes"]


def language_bytes(lex_dfas) -> np.ndarray:
    """bool[256]: the bytes some lexeme DFA has a transition on (a superset of the bytes
    of every word of a grammar whose lexemes are ``lex_dfas``)."""
    out = np.zeros(256, dtype=bool)
    for dfa in lex_dfas:
        if dfa.n_states:
            out |= (np.asarray(dfa.transitions) >= 0).any(axis=0)
    return out


class TokenFilter:
    """Per token id of one vocabulary, what rules it out under one grammar before any check:
    ``in_alphabet`` (bool[V]: its bytes all lie in the grammar's alphabet; False for tokens
    with no bytes, which no grammar allows) and its first byte. Immutable; shared by the
    matchers of a compiled grammar."""

    #: next-byte sets whose vectors are kept (a grammar has few distinct ones)
    CACHE = 256

    def __init__(self, token_table, alphabet: np.ndarray, eos_ids):
        tt = token_table
        size = tt.vocab_size
        self.vocab_size = size
        self.alphabet = np.array(alphabet, dtype=bool)
        self.alphabet.flags.writeable = False
        by_rank = np.asarray(tt.made_only_of(self.alphabet), dtype=bool)
        in_alphabet = np.zeros(size, dtype=bool)
        in_alphabet[tt.rank_to_id[by_rank]] = True
        self.eos_ids = np.array([e for e in eos_ids if 0 <= e < size], dtype=np.int64)
        # first byte of each token in the alphabet; 256 (never allowed) for the others
        first = np.full(size, 256, dtype=np.int16)
        if len(tt.sorted_bytes):
            first[tt.rank_to_id] = tt.columns[0]
        first[~in_alphabet] = 256
        self._first = first
        in_alphabet[self.eos_ids] = True
        in_alphabet.flags.writeable = False
        #: bool[V]: the tokens the alphabet alone allows (EOS ids included)
        self.in_alphabet = in_alphabet
        self._cache: LRU = LRU(self.CACHE)

    def possible(self, next_bytes: int) -> np.ndarray:
        """bool[V], read-only: the tokens in the alphabet whose first byte is in
        ``next_bytes`` (an int bitmask, bit ``b`` for byte ``b``), and the EOS ids."""
        found = self._cache.get(next_bytes)
        if found is None:
            lut = np.zeros(257, dtype=bool)
            lut[:256] = np.unpackbits(np.frombuffer(int(next_bytes).to_bytes(32, "little"), dtype=np.uint8),
                                      bitorder="little").astype(bool)
            found = lut[self._first]
            found[self.eos_ids] = True
            found.flags.writeable = False
            self._cache.put(next_bytes, found)
        return found
