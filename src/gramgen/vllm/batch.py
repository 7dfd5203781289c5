"""The grammar state of vLLM's persistent batch: :class:`ConstrainedBatch`.

vLLM keeps its running requests in a persistent batch whose rows are the rows of the
logits. Each step it tells the logits processors how the batch changed (a ``BatchUpdate``:
rows removed, then added, then moved or swapped, in that order), and each added row comes
with a live reference to the request's list of output tokens. This class keeps one
:class:`~gramgen.Matcher` per constrained row, moves it with its row, drops it on removal,
and, before masking, advances it with the tokens its output list gained since (or rolls it
back where the list lost or changed tokens). A preempted request comes back as an added row
whose list already holds its earlier tokens: it gets a fresh matcher advanced over them.

Nothing here imports vLLM (only torch, when masking): the engine adapter
(:mod:`gramgen.vllm.logits_processor`) passes vLLM's objects through, and the tests drive
this class with stand-ins of the same shape.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..automata import bitmask as packed
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, GramgenError, TokenRejected
from .._lru import LRU
from ..runtime import CompiledGrammar, compile as compile_grammar
from .params import Request, request_of

__all__ = ["ConstrainedBatch", "Row"]

logger = logging.getLogger("gramgen.vllm")

#: how many compiled grammars the process keeps for the vLLM engines in it, least recently
#: used out first (the ``GRAMGEN_VLLM_CACHE_SIZE`` environment variable, default 64)
CACHE_SIZE = int(os.environ.get("GRAMGEN_VLLM_CACHE_SIZE", "64"))
_compiled: LRU[tuple, CompiledGrammar] = LRU(CACHE_SIZE)


class Row:
    """One constrained request of the batch: its :class:`Request`, the live list of its
    output tokens, and a matcher over the first ``len(tokens)`` of them.

    ``error`` (None while all is well) says why the row can no longer be masked by its
    grammar: its grammar did not compile, the grammar allows no token with this vocabulary,
    a token the grammar rejects was sampled, or the output list held a placeholder (async
    scheduling without the token repair). Such a row allows only EOS, so the request ends
    at once instead of running on unconstrained; the error is logged once."""

    __slots__ = ("request", "output", "matcher", "tokens", "error")

    def __init__(self, request: Request, output: list[int], matcher, error: str | None = None):
        self.request = request
        self.output = output
        self.matcher = matcher
        self.tokens: list[int] = []
        self.error = error

    def fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
            logger.error("gramgen: a constrained request (%s) can no longer be constrained: %s; "
                         "only EOS is allowed, so it ends now", self.request.kind, why)

    def sync(self) -> None:
        """Bring the matcher to the output list: roll back what the list no longer holds,
        then advance over what it gained."""
        if self.matcher is None:
            return
        out, tokens = self.output, self.tokens
        n, k = len(out), len(tokens)
        if k and (n < k or out[k - 1] != tokens[k - 1]):
            common, limit = 0, min(n, k)
            while common < limit and out[common] == tokens[common]:
                common += 1
            self.matcher.rollback(k - common)
            del tokens[common:]
            k = common
        while k < n and self.error is None and not self.matcher.is_terminated():
            token = out[k]
            if token < 0:
                self.fail("its output token list holds a placeholder (-1) for a token not yet "
                          "known: vLLM repairs these before the logits processors only when the "
                          "processor is named in logits_processors (LLM(logits_processors=...) "
                          "or vllm serve --logits-processors), or without async scheduling")
                return
            try:
                self.matcher.advance(token)
            except (TokenRejected, ConfigurationError) as exc:
                self.fail(f"token {token} was sampled although the grammar does not allow it ({exc})")
                return
            tokens.append(token)
            k += 1

    def fill(self, host: np.ndarray, k: int, eos: np.ndarray) -> None:
        """Row ``k`` of the packed int32 mask ``host``: the matcher's mask, or EOS alone for a
        row that is finished (EOS accepted) or failed."""
        if self.error is None and self.matcher is not None and not self.matcher.is_terminated():
            self.matcher.fill_bitmask(host, k)
            if host[k].any():
                return
            self.fail(f"the grammar allows no token after {self.matcher.text_bytes()[-40:]!r} "
                      "with this vocabulary")
        host[k] = 0
        packed.set_bits(host[k].view(np.uint32), eos)


class ConstrainedBatch:
    """The matchers of the constrained rows of one vLLM persistent batch.

    ``vocabulary``: a function returning the engine's :class:`~gramgen.Vocabulary`, called
    once, when the first constrained request arrives (an engine that never sees one never
    loads it). Compiled grammars are cached per (constraint, layout, vocabulary) in a
    bounded LRU shared by every batch of the process (:data:`CACHE_SIZE`), so a constraint
    seen before is not compiled again.

    Requests without a gramgen argument have no row here and cost nothing: :meth:`apply`
    returns the logits untouched when no row is constrained.
    """

    def __init__(self, vocabulary: Callable[[], Vocabulary]):
        self._vocabulary = vocabulary
        self._vocab: Vocabulary | None = None
        self._eos: np.ndarray | None = None
        self._lock = threading.Lock()
        self.rows: dict[int, Row] = {}
        self._host: np.ndarray | None = None

    # -- the vocabulary and the compile ----------------------------------------------------------

    @property
    def vocab(self) -> Vocabulary:
        if self._vocab is None:
            with self._lock:
                if self._vocab is None:
                    vocab = self._vocabulary()
                    if not isinstance(vocab, Vocabulary):
                        raise ConfigurationError(f"the vocabulary function returned "
                                                 f"{type(vocab).__name__}, not a gramgen.Vocabulary")
                    self._eos = np.array(sorted(vocab.eos_token_ids), dtype=np.int64)
                    self._vocab = vocab
        return self._vocab

    def compile(self, request: Request) -> CompiledGrammar:
        """The request's grammar compiled for the engine's vocabulary (cached)."""
        vocab = self.vocab
        key = (request, vocab.fingerprint)
        found = _compiled.get(key)
        if found is None:
            found = compile_grammar(request.grammar(), vocab)
            _compiled.put(key, found)
        return found

    def _new_row(self, request: Request, output: list[int]) -> Row:
        try:
            matcher = self.compile(request).matcher()
        except GramgenError as exc:
            row = Row(request, output, None)
            row.fail(f"its {request.argument} did not compile: {type(exc).__name__}: {exc}")
            return row
        return Row(request, output, matcher)

    # -- the batch's changes ---------------------------------------------------------------------

    def update(self, batch_update: Any) -> None:
        """Apply a vLLM ``BatchUpdate`` (None: the batch's makeup did not change): its
        ``removed`` rows, then ``added`` ``(index, params, prompt_ids, output_ids)``, then
        ``moved`` ``(from, to, direction)`` where a direction named ``SWAP`` exchanges the
        two rows and any other moves ``from`` to ``to``, replacing what was there."""
        if batch_update is None:
            return
        rows = self.rows
        for index in batch_update.removed:
            rows.pop(index, None)
        for index, params, _prompt, output in batch_update.added:
            try:
                request = request_of(getattr(params, "extra_args", None))
            except ConfigurationError as exc:
                # validate_params turns such a request away at the door; an engine that ran
                # without that check must still not run it unconstrained
                row = rows[index] = Row(Request("invalid", ""), output, None)
                row.fail(f"its extra_args are invalid: {exc}")
                continue
            if request is None:
                rows.pop(index, None)
            else:
                rows[index] = self._new_row(request, output)
        for source, target, direction in batch_update.moved:
            moving = rows.pop(source, None)
            there = rows.pop(target, None)
            if moving is not None:
                rows[target] = moving
            if there is not None and getattr(direction, "name", direction) == "SWAP":
                rows[source] = there

    # -- masking ---------------------------------------------------------------------------------

    def apply(self, logits):
        """``logits`` (torch ``[batch, width]``) with the tokens each constrained row's
        grammar forbids set to ``-inf`` (in place where possible; returned). EOS is allowed
        exactly where the row's text is complete. Columns beyond the vocabulary (padded
        embedding matrices) are masked too."""
        rows = self.rows
        if not rows:
            return logits
        import torch  # vLLM's logits are torch tensors; torch is optional for gramgen itself

        batch, width = logits.shape
        order = sorted(i for i in rows if i < batch)
        if not order:
            return logits
        vocab = self.vocab
        words = packed.n_words(max(width, vocab.size))
        host = self._host
        if host is None or host.shape[0] < len(order) or host.shape[1] != words:
            host = self._host = np.empty((max(len(order), 8), words), dtype=np.int32)
        for k, index in enumerate(order):
            row = rows[index]
            row.sync()
            row.fill(host, k, self._eos)
        mask = torch.from_numpy(host[:len(order)]).to(logits.device)
        if len(order) == batch:
            return packed.apply_bitmask(logits, mask)
        where = torch.tensor(order, dtype=torch.long, device=logits.device)
        logits[where] = packed.apply_bitmask(logits[where], mask)
        return logits

    def matchers(self) -> dict[int, Any]:
        """Row index -> matcher (None for a row whose grammar did not compile)."""
        return {index: row.matcher for index, row in self.rows.items()}

