"""A logits processor for ``transformers``' ``model.generate``: :class:`LogitsProcessor`."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..automata import bitmask as packed
from ..errors import ConfigurationError, GramgenError, TokenRejected
from ..runtime import CompiledGrammar

__all__ = ["LogitsProcessor"]


class _Row:
    """The grammar state of one generated sequence: a matcher over its first ``accepted``
    tokens, and whether the token after them was one the grammar rejects (``dead``).
    Tokens after an accepted EOS (transformers' padding of finished rows) or after a
    rejected token are not advanced."""

    __slots__ = ("matcher", "accepted", "dead")

    def __init__(self, matcher, accepted: int = 0, dead: bool = False):
        self.matcher = matcher
        self.accepted = accepted
        self.dead = dead

    @property
    def finished(self) -> bool:
        return self.dead or self.matcher.is_terminated()

    def fork(self) -> _Row:
        return _Row(self.matcher.fork(), self.accepted, self.dead)

    def move_to(self, key: tuple[int, ...], common: int, vocab_size: int) -> None:
        """Become the state of ``key``, which shares its first ``common`` tokens with the
        sequence this row holds: roll back what is not shared, then advance the rest."""
        if common < self.accepted or (common == self.accepted and self.dead):
            self.matcher.rollback(self.accepted - common)
            self.accepted, self.dead = common, False
        elif common > self.accepted:
            return   # the shared tokens already run past EOS or a rejected token
        for token in key[self.accepted:]:
            if self.finished:
                return
            if not 0 <= token < vocab_size:
                self.dead = True
                return
            try:
                self.matcher.advance(token)
            except TokenRejected:
                self.dead = True
                return
            self.accepted += 1


class LogitsProcessor:
    """Constrain ``model.generate(..., logits_processor=[LogitsProcessor(cg)])`` to a grammar.

    Works with greedy search, sampling, batches, beam search, beam sampling and assisted
    generation (``assistant_model=``, ``prompt_lookup_num_tokens=``). The first call's
    ``input_ids`` length is taken as the prompt length; each row's state is found from the
    tokens after it: rows extending a row of the previous call advance its matcher (forked
    when several extend it), so beams may be reordered or duplicated freely, and a row
    that is shorter than or diverges from those (assisted generation checks candidate
    tokens, then keeps only a prefix of them) rolls back the matcher sharing its longest
    prefix. The scores of disallowed tokens become ``-inf``; logits wider than the
    vocabulary (padded embedding matrices) have their extra columns masked out too.

    Rows that have accepted EOS keep only EOS allowed, so that the padding transformers
    appends to finished rows never produces an all ``-inf`` row. So do rows holding a
    token the grammar rejects: beam search keeps such rows (at score ``-inf``) when fewer
    allowed continuations than beams exist, and assisted generation scores candidates it
    then discards; neither is ever returned.

    A processor holds the state of one ``generate`` call: create a new one per call (or
    call :meth:`reset`).
    """

    def __init__(self, compiled: CompiledGrammar):
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError("LogitsProcessor takes a gramgen.CompiledGrammar "
                                     "(gramgen.compile(grammar, vocab))")
        self.compiled = compiled
        self._eos = np.array(sorted(compiled.vocab.eos_token_ids), dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Forget the current ``generate`` call's state."""
        self._prompt_len: int | None = None
        self._states: dict[tuple[int, ...], _Row] = {}
        self._bitmask = None   # int32 [batch, words] on the scores' device, reused
        self._host: np.ndarray | None = None

    @property
    def prompt_length(self) -> int | None:
        """The ``input_ids`` length at the first call (None before it)."""
        return self._prompt_len

    def matchers(self) -> dict[tuple[int, ...], Any]:
        """The matchers of the last call's rows, keyed by the generated tokens of the row."""
        return {key: row.matcher for key, row in self._states.items()}

    def _rows(self, keys: list[tuple[int, ...]]) -> dict[tuple[int, ...], _Row]:
        """The state of each distinct key, derived from the previous call's states: the one
        holding the key's longest prefix, taken over when nothing else derives from it."""
        previous = self._states
        sources: dict[tuple[int, ...], tuple[tuple[int, ...] | None, int]] = {}
        users: dict[tuple[int, ...] | None, int] = {}
        for key in dict.fromkeys(keys):
            if key in previous:
                source, common = key, len(key)
            elif key and key[:-1] in previous:
                source, common = key[:-1], len(key) - 1
            else:
                source, common = None, 0
                for known in previous:
                    n = len(os.path.commonprefix([key, known]))
                    if source is None or n > common:
                        source, common = known, n
            sources[key] = (source, common)
            users[source] = users.get(source, 0) + 1
        rows: dict[tuple[int, ...], _Row] = {}
        for key, (source, common) in sources.items():
            if source is None:
                row = _Row(self.compiled.matcher())
            elif source == key:
                rows[key] = previous[key]
                continue
            elif users[source] == 1 and source not in sources:
                row = previous[source]   # nothing else needs it: move it in place
            else:
                row = previous[source].fork()
            row.move_to(key, common, self.compiled.vocab_size)
            rows[key] = row
        return rows

    def _check(self, input_ids, scores) -> None:
        import torch

        if not isinstance(scores, torch.Tensor) or not isinstance(input_ids, torch.Tensor):
            raise ConfigurationError("LogitsProcessor takes torch tensors: input_ids [batch, length] "
                                     "and scores [batch, vocab]")
        if scores.ndim != 2:
            raise ConfigurationError(f"scores must be 2-D [batch, vocab], got shape {tuple(scores.shape)}")
        if input_ids.ndim != 2:
            raise ConfigurationError(f"input_ids must be 2-D [batch, length], got shape "
                                     f"{tuple(input_ids.shape)}")
        if scores.shape[0] != input_ids.shape[0]:
            raise ConfigurationError(f"scores have {scores.shape[0]} rows but input_ids has "
                                     f"{input_ids.shape[0]}: one row of scores per sequence")
        if scores.shape[1] < self.compiled.vocab_size:
            raise ConfigurationError(
                f"scores have {scores.shape[1]} columns but the grammar was compiled for a "
                f"vocabulary of {self.compiled.vocab_size} tokens: compile it with this model's "
                f"tokenizer (gramgen.Vocabulary.from_huggingface(tokenizer))")
        if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ConfigurationError(f"input_ids must hold integer token ids, not {input_ids.dtype}")

    def __call__(self, input_ids, scores):
        import torch

        self._check(input_ids, scores)
        batch, width = scores.shape
        if self._prompt_len is None:
            self._prompt_len = int(input_ids.shape[1])
        elif input_ids.shape[1] < self._prompt_len:
            raise ConfigurationError("input_ids got shorter than the prompt: use a new "
                                     "LogitsProcessor for each generate() call")
        keys = [tuple(row) for row in input_ids[:, self._prompt_len:].tolist()]
        self._states = states = self._rows(keys)

        n_words = packed.n_words(max(width, self.compiled.vocab_size))
        if (self._bitmask is None or self._bitmask.shape != (batch, n_words)
                or self._bitmask.device != scores.device):
            self._bitmask = torch.empty((batch, n_words), dtype=torch.int32, device=scores.device)
            self._host = np.empty((batch, n_words), dtype=np.int32)
        host = self._host
        for r, key in enumerate(keys):
            row = states[key]
            if row.finished:
                host[r] = 0
                packed.set_bits(host[r].view(np.uint32), self._eos)
                continue
            row.matcher.fill_bitmask(host, r)
            if not host[r].any():
                raise GramgenError(f"row {r}: the grammar allows no token after "
                                   f"{row.matcher.text_bytes()[-40:]!r} with this vocabulary")
        self._bitmask.copy_(torch.from_numpy(host))
        return packed.apply_bitmask(scores, self._bitmask)
