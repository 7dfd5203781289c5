"""The one-token constraint interface AWRS and SMC sample against.

AWRS never needs a full mask: it asks "may token t come next?" for the few tokens it
draws. Anything that can answer that, be advanced by a token and be copied can steer
generation: a gramgen :class:`~gramgen.Matcher`, a Python predicate over the text, or a
monitor. Every answer is counted in a shared :class:`EvaluationCounter` so the cost of a
sampler can be compared with a full mask (``vocab.size`` evaluations per step).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from .._lru import LRU
from ..automata import bitmask
from ..automata.utf8 import completions
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, TokenRejected
from ..runtime import CompiledGrammar, Matcher

__all__ = ["Constraint", "EvaluationCounter", "MatcherConstraint", "PredicateConstraint",
           "as_constraint", "fill_bitmask", "known_mask", "require_masks"]


class EvaluationCounter:
    """How many single-token checks were made (shared by a constraint and its forks)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


@runtime_checkable
class Constraint(Protocol):
    """A prefix constraint on token sequences.

    ``check(t)`` is True iff the tokens so far followed by ``t`` can still end up
    accepted; for an EOS id it is True iff the tokens so far are complete. A constraint
    may also offer ``mask() -> bool[vocab.size]`` (all checks at once), which AWRS uses
    when a step rejects many tokens and masked sampling needs at every step.
    ``gramgen.testing.assert_consistent`` checks that a constraint keeps these promises.
    """

    counter: EvaluationCounter

    def check(self, token: int) -> bool: ...

    def advance(self, token: int) -> None: ...

    def fork(self) -> Constraint: ...

    def is_complete(self) -> bool: ...


class MatcherConstraint:
    """A gramgen Matcher as a :class:`Constraint` (``check`` is ``Matcher.check``).

    Full masks it computes are kept per token sequence, shared with its forks, and offered
    back by :meth:`known_mask`: SMC particles that return to a state where AWRS needed a
    mask then sample exactly with an exact weight.
    """

    def __init__(self, matcher, counter: EvaluationCounter | None = None,
                 _masks: dict | None = None):
        self.matcher = matcher
        self.vocab_size = matcher.vocab_size
        self.counter = counter or EvaluationCounter()
        self._masks: dict[tuple[int, ...], np.ndarray] = {} if _masks is None else _masks

    def check(self, token: int) -> bool:
        self.counter.count += 1
        return self.matcher.check(int(token))

    def mask(self):
        """The full mask (optional in the protocol: AWRS falls back to it after many
        rejections); counted as ``vocab.size`` evaluations."""
        mask = self.matcher.mask()
        self.counter.count += mask.shape[0]
        if len(self._masks) < 4096:
            self._masks[tuple(self.matcher.tokens)] = mask
        return mask

    def fill_bitmask(self, out, row: int = 0) -> None:
        """The mask packed into row ``row`` of an int32 ``[batch, ceil(V/32)]`` array
        (what masked sampling uses); counted as ``vocab.size`` evaluations."""
        self.matcher.fill_bitmask(out, row)
        self.counter.count += self.vocab_size

    def bounded_words(self, max_work: int):
        """The packed mask, or what a walk bounded by ``max_work`` decided of it (see
        :meth:`gramgen.Matcher.bounded_words`); counted as ``vocab.size`` evaluations."""
        self.counter.count += self.vocab_size
        return self.matcher.bounded_words(max_work)

    def known_mask(self):
        """The mask of this state if one was computed before (no evaluation), else None."""
        return self._masks.get(tuple(self.matcher.tokens)) if self._masks else None

    def advance(self, token: int) -> None:
        self.matcher.advance(int(token))

    def fork(self) -> MatcherConstraint:
        return MatcherConstraint(self.matcher.fork(), self.counter, self._masks)

    def is_complete(self) -> bool:
        return self.matcher.is_accepting()


def _split_utf8(data: bytes) -> tuple[str, bytes]:
    """(the text of ``data``, the bytes of an incomplete UTF-8 character at its end, which
    the next token may complete); other invalid bytes become U+FFFD."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=False)
    return text, decoder.getstate()[0]


def _decode_prefix(data: bytes) -> str:
    """The text of ``data``, holding back an incomplete UTF-8 character at the end."""
    return _split_utf8(data)[0]


#: code points tried when asking whether an incomplete character can be completed; past
#: this many refused ones it is assumed it can (only 4-byte characters come near it)
MAX_COMPLETIONS = 4096
class PredicateConstraint:
    """A constraint given as Python predicates over the generated text.

    ``prefix_ok(text)`` must be True iff ``text`` can still be extended into an accepted
    text (it is called on every candidate text, so it must be prefix-closed: if it holds
    for a text it holds for every prefix). ``complete_ok(text)`` decides whether EOS may
    follow. Special tokens other than EOS are never allowed.

    The predicates only ever see whole characters. A token that ends inside a UTF-8
    character is allowed when ``prefix_ok`` holds for the text with some character those
    bytes can still become (up to :data:`MAX_COMPLETIONS` tried, in code point order);
    EOS is never allowed inside a character.
    """

    def __init__(self, vocab: Vocabulary, prefix_ok: Callable[[str], bool],
                 complete_ok: Callable[[str], bool], counter: EvaluationCounter | None = None,
                 _data: bytes = b"", _done: bool = False, _completable: LRU | None = None):
        self.vocab = vocab
        self.prefix_ok = prefix_ok
        self.complete_ok = complete_ok
        self.counter = counter or EvaluationCounter()
        self._data = _data
        self._done = _done
        #: (text, incomplete bytes) -> whether a character completes them acceptably;
        #: shared by forks
        self._completable: LRU[tuple[str, bytes], bool] = LRU(4096) if _completable is None else _completable

    @property
    def text(self) -> str:
        return _decode_prefix(self._data)

    def _can_complete(self, text: str, pending: bytes) -> bool:
        key = (text, pending)
        found = self._completable.get(key)
        if found is None:
            found = False
            for i, char in enumerate(completions(pending)):
                if i == MAX_COMPLETIONS or self.prefix_ok(text + char):
                    found = True
                    break
            self._completable.put(key, found)
        return found

    def check(self, token: int) -> bool:
        self.counter.count += 1
        token = int(token)
        if self._done:
            return False
        if token in self.vocab.eos_token_ids:
            return self.is_complete()
        piece = self.vocab.token_bytes(token) if 0 <= token < self.vocab.size else b""
        if not piece:
            return False
        text, pending = _split_utf8(self._data + piece)
        if not pending:
            return bool(self.prefix_ok(text))
        return bool(self.prefix_ok(text)) and self._can_complete(text, pending)

    def is_complete(self) -> bool:
        if self._done:
            return False
        text, pending = _split_utf8(self._data)
        return not pending and bool(self.complete_ok(text))

    def advance(self, token: int) -> None:
        token = int(token)
        allowed = self.check(token)
        self.counter.count -= 1  # the re-check on advance is bookkeeping, not sampling cost
        if not allowed:
            raise TokenRejected(token, -1, "the predicate rejects this token")
        if token in self.vocab.eos_token_ids:
            self._done = True
        else:
            self._data += self.vocab.token_bytes(token)

    def fork(self) -> PredicateConstraint:
        return PredicateConstraint(self.vocab, self.prefix_ok, self.complete_ok, self.counter,
                                   self._data, self._done, self._completable)


def known_mask(constraint) -> np.ndarray | None:
    """The constraint's mask for its current state if it already has one (optional
    ``known_mask()`` method), else None; see :func:`~gramgen.generation.awrs_step`."""
    method = getattr(constraint, "known_mask", None)
    return method() if method is not None else None


def require_masks(constraint) -> None:
    """Raise :class:`~gramgen.ConfigurationError` unless ``constraint`` can give full masks
    (``fill_bitmask`` or ``mask``), as masked sampling needs."""
    if not (hasattr(constraint, "fill_bitmask") or hasattr(constraint, "mask")):
        raise ConfigurationError(f"masked sampling needs full masks, which a "
                                 f"{type(constraint).__name__} cannot give: use sampler='awrs' "
                                 "or 'smc' (they check one token at a time)")


def fill_bitmask(constraint, out, row: int = 0) -> None:
    """Write ``constraint``'s full mask into row ``row`` of a packed int32 bitmask; raises
    :class:`~gramgen.ConfigurationError` for a constraint that can only check one token."""
    method = getattr(constraint, "fill_bitmask", None)
    if method is not None:
        method(out, row)
        return
    require_masks(constraint)
    mask = constraint.mask
    words = bitmask.pack(np.asarray(mask(), dtype=bool))
    out[row] = 0
    out[row, :words.shape[0]] = words.view(np.int32)


def as_constraint(obj) -> Constraint:
    """Wrap a Matcher or a CompiledGrammar (fresh matcher); pass a Constraint through."""
    if isinstance(obj, CompiledGrammar):
        return MatcherConstraint(obj.matcher())
    if isinstance(obj, Matcher):
        return MatcherConstraint(obj)
    if isinstance(obj, Constraint):
        return obj
    raise ConfigurationError(f"cannot use a {type(obj).__name__} as a constraint: it needs "
                    "check(token), advance(token), fork(), is_complete() and a counter")
