"""Monitors as a :class:`~gramgen.generation.Constraint`, conjoined with any other one.

:class:`MonitoredConstraint` allows a token iff the inner constraint (a grammar's
matcher, a predicate, :class:`Unconstrained`) and every monitor allow it, so a monitor
never lets through what the grammar forbids, and every sampler that speaks the
constraint protocol takes monitors: masked sampling ANDs the masks, AWRS and SMC call
``check`` on the tokens they draw, speculative decoding forks and advances.

Liveness: a monitor can refuse everything the grammar allows (the grammar wants a
keyword where the analyser expects a name, or the only names are spelled with tokens the
grammar forbids). Then the monitors are set aside for that state (the inner constraint
alone decides, the same for ``check`` and the masks) and the fallback is counted in
:class:`~gramgen.monitors.MonitorStats`; an identifier the fallback let the model break
stays unrestricted until the next trigger.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..automata import bitmask
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, TokenRejected
from ..generation.constraint import EvaluationCounter, fill_bitmask
from .base import Monitor, MonitorStats, check_monitors
from .state import MonitorState, Session

__all__ = ["MonitoredConstraint", "Unconstrained", "monitored", "prompt_document"]

#: a live check walks the monitors' allowed tokens asking the inner constraint, up to
#: this many; past it the inner constraint's full mask is used when it has one
_LIVE_CHECKS = 256


class Unconstrained:
    """The constraint that allows every token with bytes, and EOS at any point (the inner
    constraint of ``generate(model, prompt, monitors=[...])`` without a grammar)."""

    def __init__(self, vocab: Vocabulary, counter: EvaluationCounter | None = None, _done: bool = False):
        self.vocab = vocab
        self.vocab_size = vocab.size
        self.counter = counter or EvaluationCounter()
        self._done = _done
        self._eos = frozenset(vocab.eos_token_ids)

    def _allowed(self) -> np.ndarray:
        allowed = np.fromiter((bool(t) for t in self.vocab.tokens), dtype=bool, count=self.vocab.size)
        allowed[list(self._eos)] = True
        return allowed

    def check(self, token: int) -> bool:
        self.counter.count += 1
        token = int(token)
        if self._done or not 0 <= token < self.vocab_size:
            return False
        return token in self._eos or bool(self.vocab.tokens[token])

    def mask(self) -> np.ndarray:
        self.counter.count += self.vocab_size
        if self._done:
            return np.zeros(self.vocab_size, dtype=bool)
        return _unconstrained_mask(self.vocab, self._allowed).copy()

    def fill_bitmask(self, out, row: int = 0) -> None:
        bitmask.check_target(out, row, bitmask.n_words(self.vocab_size))
        bitmask.write_row(out, row, bitmask.pack(self.mask()))

    def advance(self, token: int) -> None:
        token = int(token)
        if not (0 <= token < self.vocab_size and (token in self._eos or self.vocab.tokens[token])) or self._done:
            raise TokenRejected(token, -1, "a special token or one without bytes")
        if token in self._eos:
            self._done = True

    def fork(self) -> Unconstrained:
        return Unconstrained(self.vocab, self.counter, self._done)

    def is_complete(self) -> bool:
        return not self._done


_UNCONSTRAINED: dict[str, np.ndarray] = {}


def _unconstrained_mask(vocab: Vocabulary, build) -> np.ndarray:
    found = _UNCONSTRAINED.get(vocab.fingerprint)
    if found is None:
        if len(_UNCONSTRAINED) > 8:
            _UNCONSTRAINED.clear()
        found = _UNCONSTRAINED[vocab.fingerprint] = build()
    return found


class MonitoredConstraint:
    """``inner`` and every monitor state in ``states`` (see the module docstring).

    ``counter`` is the inner constraint's (the monitors' own checks are not counted);
    ``matcher`` is the inner one's when it has one (None otherwise), for the drafters of
    speculative decoding; ``stats`` is shared by the forks. ``check``/``advance``/
    ``fork``/``is_complete``; ``mask()``/``fill_bitmask()`` only on
    :class:`MaskedMonitoredConstraint`, made when the inner constraint has masks."""

    def __init__(self, inner, states: Sequence[MonitorState], vocab: Vocabulary, stats: MonitorStats):
        self.inner = inner
        self.states = list(states)
        self.vocab = vocab
        self.vocab_size = vocab.size
        self.stats = stats
        self.counter = inner.counter
        self._eos = frozenset(vocab.eos_token_ids)
        self._monitor_mask: np.ndarray | None = None   # of this state, once computed
        self._packed_monitors: np.ndarray | None = None
        self._live: bool | None = None

    @property
    def matcher(self):
        return getattr(self.inner, "matcher", None)

    @property
    def restricting(self) -> bool:
        """Whether some monitor has a trigger armed here (else it refuses next to nothing)."""
        return any(s.restricting for s in self.states)

    def _monitors_allow(self, token: int) -> bool:
        return all(s.allows(token) for s in self.states)

    def monitor_mask(self) -> np.ndarray:
        """The AND of the monitors' masks (EOS included), computed once per state."""
        if self._monitor_mask is None:
            states = iter(self.states)
            mask = next(states).mask()
            for state in states:
                mask = mask & state.mask()
            self._monitor_mask = mask
        return self._monitor_mask

    def live(self) -> bool:
        """Whether some token is allowed by the inner constraint and every monitor; when
        not, the monitors are set aside for this state (a fallback, counted once)."""
        if self._live is None:
            self._live = self._find_live()
            if not self._live:
                self.stats.fallbacks += 1
        return self._live

    def _find_live(self) -> bool:
        candidates = np.flatnonzero(self.monitor_mask())
        return any(self.inner.check(int(t)) for t in candidates.tolist())

    def check(self, token: int) -> bool:
        if not self.inner.check(token):
            return False
        return self._monitors_allow(int(token)) or not self.live()

    def is_complete(self) -> bool:
        if not self.inner.is_complete():
            return False
        return all(s.end_ok() for s in self.states) or not self.live()

    def advance(self, token: int) -> None:
        token = int(token)
        verdicts = [state.allows(token) for state in self.states]
        if not all(verdicts) and self.live():
            raise TokenRejected(token, -1, "a monitor refuses it (no valid name continues this way)")
        self.inner.advance(token)
        for state, allowed in zip(self.states, verdicts):
            state.advance(token, refused=not allowed)
        self._monitor_mask = None
        self._packed_monitors = None
        self._live = None

    def _forked_states(self) -> list[MonitorState]:
        return [s.copy() for s in self.states]

    def fork(self) -> MonitoredConstraint:
        other = type(self)(self.inner.fork(), self._forked_states(), self.vocab, self.stats)
        other._monitor_mask, other._live = self._monitor_mask, self._live
        other._packed_monitors = self._packed_monitors
        return other


class MaskedMonitoredConstraint(MonitoredConstraint):
    """A :class:`MonitoredConstraint` whose inner constraint gives full masks: the masks
    are the AND of the inner mask and the monitors' (the inner one alone after a
    fallback)."""

    def _inner_packed(self) -> np.ndarray:
        words = np.zeros((1, bitmask.n_words(self.vocab_size)), dtype=np.int32)
        fill_bitmask(self.inner, words, 0)
        return words[0].view(np.uint32)

    def _monitors_packed(self) -> np.ndarray:
        if self._packed_monitors is None:
            self._packed_monitors = bitmask.pack(self.monitor_mask())
        return self._packed_monitors

    def _packed(self) -> np.ndarray:
        """The mask of this state, packed (uint32 words)."""
        inner = self._inner_packed()
        both = inner & self._monitors_packed()
        if self._live is None:
            self._live = bool(both.any())
            if not self._live:
                self.stats.fallbacks += 1
        return both if self._live else inner

    def _find_live(self) -> bool:
        candidates = np.flatnonzero(self.monitor_mask())
        if candidates.size <= _LIVE_CHECKS:   # a few names: ask about them one by one
            return any(self.inner.check(int(t)) for t in candidates.tolist())
        return bool((self._inner_packed() & self._monitors_packed()).any())

    def mask(self) -> np.ndarray:
        """The allowed tokens (bool per id); counted as the inner constraint counts its mask."""
        return bitmask.unpack(self._packed(), self.vocab_size).copy()

    def fill_bitmask(self, out, row: int = 0) -> None:
        """The mask into row ``row`` of an int32 ``[batch, ceil(V/32)]`` bitmask."""
        bitmask.check_target(out, row, bitmask.n_words(self.vocab_size))
        bitmask.write_row(out, row, self._packed())


def monitored(constraint, monitors: Sequence[Monitor], vocab: Vocabulary, document: str = "",
              stats: MonitorStats | None = None) -> MonitoredConstraint:
    """``constraint`` (None: :class:`Unconstrained`) conjoined with ``monitors``, each
    starting at the end of ``document`` (the code before the cursor: a completion that
    starts inside an identifier is constrained from its first token). ``stats``: where the
    monitors count (default: a new :class:`MonitorStats`, as ``.stats``)."""
    monitors = check_monitors(monitors)
    if constraint is None:
        constraint = Unconstrained(vocab)
    if not monitors:
        raise ConfigurationError("monitored() needs at least one monitor")
    if not isinstance(document, str):
        raise ConfigurationError(f"the monitors' document must be a str, not {type(document).__name__}")
    stats = stats if stats is not None else MonitorStats()
    states = [MonitorState.start(Session(m, vocab, stats), document) for m in monitors]
    masked = hasattr(constraint, "mask") or hasattr(constraint, "fill_bitmask")
    cls = MaskedMonitoredConstraint if masked else MonitoredConstraint
    return cls(constraint, states, vocab, stats)


def prompt_document(prompt, ids: Sequence[int], vocab: Vocabulary, chat: bool) -> str:
    """The document a monitor starts from for one prompt of ``generate``: the prompt text
    when it is a string sent as is (``chat=False``), the text of its tokens when it is
    token ids, else (a chat message) nothing."""
    if isinstance(prompt, str):
        return "" if chat else prompt
    data = b"".join(vocab.tokens[int(t)] for t in ids)
    return data.decode("utf-8", errors="replace")
