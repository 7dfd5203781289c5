"""A logits processor for ``transformers``' ``model.generate``: :class:`LogitsProcessor`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..automata import bitmask as packed
from ..errors import ConfigurationError, GramgenError
from ..runtime import CompiledGrammar

__all__ = ["LogitsProcessor"]


class LogitsProcessor:
    """Constrain ``model.generate(..., logits_processor=[LogitsProcessor(cg)])`` to a grammar.

    Works with greedy search, sampling, batches and beam search. Each call reads the tokens
    transformers has appended since the first call (whose ``input_ids`` length is taken as
    the prompt length) and keeps one matcher per distinct generated sequence, keyed by
    those tokens, so rows may be reordered (beam search) or share a prefix freely. The
    scores of disallowed tokens become ``-inf``; logits wider than the tokenizer (padded
    embedding matrices) have their extra columns masked out too.

    A processor holds the state of one ``generate`` call: create a new one per call (or
    call :meth:`reset`). Rows that have accepted EOS keep only EOS allowed so that the
    padding transformers appends to finished rows never produces an all ``-inf`` row.
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
        self._states: dict[tuple[int, ...], Any] = {}
        self._bitmask = None   # int32 [batch, words] on the scores' device, reused
        self._host: np.ndarray | None = None

    @property
    def prompt_length(self) -> int | None:
        """The ``input_ids`` length at the first call (None before it)."""
        return self._prompt_len

    def matchers(self) -> dict[tuple[int, ...], Any]:
        """The live matchers, keyed by the generated tokens of their row."""
        return dict(self._states)

    def _matcher_for(self, key: tuple[int, ...], previous: dict, children: dict):
        """The matcher of a row whose generated tokens are ``key``: the previous step's
        matcher of ``key[:-1]`` advanced by the last token (forked if several rows extend it)."""
        found = previous.get(key)
        if found is not None:
            return found
        if not key:
            return self.compiled.matcher()
        parent = previous.get(key[:-1])
        if parent is None:
            raise GramgenError("LogitsProcessor saw a sequence that does not extend one it saw "
                               "before: use a new processor for each generate() call")
        matcher = parent if children[key[:-1]] == 1 else parent.fork()
        if not matcher.is_terminated():   # finished rows get padding appended: ignore it
            matcher.advance(key[-1])      # TokenRejected if a banned token was chosen
        return matcher

    def __call__(self, input_ids, scores):
        import torch

        batch, width = scores.shape
        if self._prompt_len is None:
            self._prompt_len = int(input_ids.shape[1])
        elif input_ids.shape[1] < self._prompt_len:
            raise GramgenError("input_ids got shorter than the prompt: use a new LogitsProcessor "
                               "for each generate() call")
        rows = input_ids[:, self._prompt_len:].tolist()
        keys = [tuple(int(t) for t in row) for row in rows]
        previous = self._states
        children: dict[tuple[int, ...], int] = {}
        for k in dict.fromkeys(keys):
            if k and k not in previous:
                children[k[:-1]] = children.get(k[:-1], 0) + 1
        states: dict[tuple[int, ...], Any] = {}
        for k in keys:
            if k not in states:
                states[k] = self._matcher_for(k, previous, children)
        self._states = states

        n_words = packed.n_words(max(width, self.compiled.vocab_size))
        if (self._bitmask is None or self._bitmask.shape != (batch, n_words)
                or self._bitmask.device != scores.device):
            self._bitmask = torch.empty((batch, n_words), dtype=torch.int32, device=scores.device)
            self._host = np.empty((batch, n_words), dtype=np.int32)
        host = self._host
        for r, k in enumerate(keys):
            m = states[k]
            if m.is_terminated():
                host[r] = 0
                packed.set_bits(host[r].view(np.uint32), self._eos)
                continue
            m.fill_bitmask(host, r)
            if not host[r].any():
                raise GramgenError(f"row {r}: the grammar allows no token after "
                                   f"{m.text_bytes()[-40:]!r} with this vocabulary")
        self._bitmask.copy_(torch.from_numpy(host))
        return packed.apply_bitmask(scores, self._bitmask)
