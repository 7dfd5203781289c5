"""One monitor's state over one sequence: the document, the scanner, the armed trigger.

A monitor is idle until its scanner fires a trigger; it is then *armed* with that
trigger and the identifier typed since, until the identifier ends (or, in the relaxed
modes, something other than an identifier comes). The names of a trigger are asked for
at most once, and only when a decision depends on them (:class:`Session`).

A token's bytes are fed one character at a time, so a trigger can fire inside a token:
``.app`` after ``obj`` fires at ``.`` and ``app`` is then checked against the names of
``obj.``. Those names belong to a text that does not exist yet (the token is only a
candidate), so a trigger fired inside a candidate is asked about only if its kind says
``lookahead``; otherwise the identifiers such a token would start are refused (the model
can still write the trigger and the name as separate tokens) and anything else it
carries is let through. Once a token is emitted its last trigger is real, and is asked
about as usual. A token ending inside a UTF-8 character is allowed when some character
those bytes can still become keeps the monitor consistent.

:meth:`MonitorState.allows` decides one token by feeding it; :meth:`MonitorState.mask`
decides all of them at once and equals ``allows`` on every token (tested by brute force):
the names' mask for the armed trigger (:mod:`.names`), refined where a token's first
byte fires a trigger (one walk per such byte), and, for the few tokens with a trigger
character strictly inside them, by ``allows`` itself.
"""

from __future__ import annotations

import codecs
import logging
import time
import weakref

import numpy as np

from .._lru import LRU
from ..automata.vocabulary import Vocabulary
from .base import Monitor, MonitorStats, Trigger, TriggerKind
from .names import (WHITESPACE, NameSet, VocabIndex, can_end_identifier, index_for,
                    is_identifier_char, keyword_allows, name_set)

__all__ = ["MonitorState", "Session"]

log = logging.getLogger("gramgen.monitors")

_KEEP, _DONE, _REFUSE = range(3)
_SPACE = frozenset(WHITESPACE.decode())
_SPACE_CHARS = WHITESPACE.decode()
#: the first bytes of tokens that can fire a trigger (see python.py: ``.``, ``(``, ``,``
#: and the whitespace after ``import``)
_HOT_FIRST = b".(, \t\f"
#: stands for the names of a trigger fired inside a candidate token without lookahead
UNVERIFIED = object()

_GLOBAL_CACHES: "weakref.WeakKeyDictionary[object, LRU]" = weakref.WeakKeyDictionary()


class Session:
    """What the states of one sequence share: the monitor, the vocabulary's index, the
    statistics, and the names decided for each trigger (a trigger's answer never changes
    within a sequence, so ``allows`` and ``mask`` always agree)."""

    def __init__(self, monitor: Monitor, vocab: Vocabulary, stats: MonitorStats | None = None):
        self.monitor = monitor
        self.vocab = vocab
        self.index: VocabIndex = index_for(vocab)
        self.stats = stats if stats is not None else MonitorStats()
        self.decided: dict[tuple[TriggerKind, str], NameSet | None] = {}
        try:
            self.cache = _GLOBAL_CACHES.setdefault(monitor, LRU(512))
        except TypeError:   # a monitor that cannot be weakly referenced keeps no cache
            self.cache = LRU(512)
        self.unverified = name_set((), vocab)

    def names(self, trigger: Trigger) -> NameSet | None:
        """The names at ``trigger`` (None: nothing known, restrict nothing): decided once
        per sequence, asked of the monitor at most once per trigger text (cached across
        sequences and calls on the same monitor, failures excepted)."""
        key = (trigger.kind, trigger.text)
        if key in self.decided:
            return self.decided[key]
        hit = self.cache.get(key)
        if hit is not None:
            found = hit[0]
        else:
            stats = self.stats
            start = time.perf_counter()
            try:
                answer = self.monitor.names(trigger)
                found = None if answer is None else frozenset(answer)
            except Exception as exc:   # the analyser failed: restrict nothing, say so
                found = None
                stats.failures += 1
                stats.last_failure = f"{type(exc).__name__}: {exc}"
                log.warning("monitor %s: no names at a %s trigger (%s); not restricting",
                            type(self.monitor).__name__, trigger.kind.name, stats.last_failure)
            else:
                self.cache.put(key, (found,))
            stats.queries += 1
            stats.query_seconds += time.perf_counter() - start
        result = name_set(found, self.vocab) if found else None
        self.decided[key] = result
        return result


class _Armed:
    """A trigger that fired and what was typed since (keyword mode: the identifier and the
    whitespace after it). ``real``: it fired in emitted text (else inside the candidate
    token being judged). ``eq``: the identifier was just followed by ``=`` (keyword mode:
    ``==`` or a keyword argument?)."""

    __slots__ = ("trigger", "typed", "real", "eq")

    def __init__(self, trigger: Trigger, typed: str = "", real: bool = False, eq: bool = False):
        self.trigger = trigger
        self.typed = typed
        self.real = real
        self.eq = eq

    def copy(self) -> _Armed:
        return _Armed(self.trigger, self.typed, self.real, self.eq)


def _decode(pending: bytes, data: bytes) -> tuple[str, bytes]:
    """The characters ``pending + data`` complete (U+FFFD for invalid bytes), and the
    bytes of an incomplete character left at the end."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    if pending:
        decoder.setstate((pending, 0))
    text = decoder.decode(data, final=False)
    return text, decoder.getstate()[0]


class MonitorState:
    """A monitor's state after the document and the tokens emitted so far."""

    __slots__ = ("session", "document", "text", "scanner", "pending", "armed")

    def __init__(self, session: Session, document: str, text: str, scanner, pending: bytes,
                 armed: _Armed | None):
        self.session = session
        self.document = document
        #: the characters emitted after the document (``pending`` excluded)
        self.text = text
        self.scanner = scanner
        self.pending = pending
        self.armed = armed

    @classmethod
    def start(cls, session: Session, document: str) -> MonitorState:
        """The state at the end of ``document``."""
        state = cls(session, document, "", session.monitor.scanner(), b"", None)
        state._scan(document, "document")
        if state.armed is not None:
            state.armed.real = True
            session.stats.triggers += 1
        return state

    def copy(self) -> MonitorState:
        return MonitorState(self.session, self.document, self.text, self.scanner.copy(),
                            self.pending, None if self.armed is None else self.armed.copy())

    @property
    def restricting(self) -> bool:
        """Whether a trigger is armed (the monitor may refuse tokens)."""
        return self.armed is not None

    # -- feeding ------------------------------------------------------------------------------

    def _names(self, armed: _Armed):
        if not armed.real and not armed.trigger.kind.lookahead:
            return UNVERIFIED
        return self.session.names(armed.trigger)

    def _step(self, char: str) -> int:
        """The armed trigger's verdict on the next character (see names.py for the modes)."""
        armed = self.armed
        mode = armed.trigger.kind.mode
        ident = is_identifier_char(char)
        if mode == "keyword":
            if armed.eq:
                return _DONE if char == "=" or self._keyword_ok(armed) else _REFUSE
            return self._keyword_step(armed, char, ident)
        if not armed.typed and not ident:
            if mode == "optional":
                return _KEEP if char in _SPACE else _DONE
            return _REFUSE if isinstance(self._names(armed), NameSet) else _DONE
        names = self._names(armed)
        if names is None:
            return _DONE
        if names is UNVERIFIED:
            return _REFUSE if ident else _DONE
        grown = armed.typed + char
        if ident and names.is_prefix(grown.encode("utf-8")):
            armed.typed = grown
            return _KEEP
        if not ident and armed.typed in names:
            return _DONE
        return _REFUSE

    @staticmethod
    def _keyword_step(armed: _Armed, char: str, ident: bool) -> int:
        """Keyword mode before any ``=``: an identifier grows, whitespace may follow it
        (``name = value``: the trigger stays armed), and ``=`` after it is kept for the
        next character to tell ``name=`` from ``name==``."""
        typed = armed.typed
        if ident:
            if typed and typed[-1] in _SPACE:
                return _DONE          # a second word: not a keyword argument
            armed.typed += char
            return _KEEP
        if char in _SPACE:
            if typed:
                armed.typed += char
            return _KEEP
        if char == "=" and typed:
            armed.eq = True
            return _KEEP
        return _DONE

    def _keyword_ok(self, armed: _Armed) -> bool:
        names = self._names(armed)
        if names is None:
            return True
        if names is UNVERIFIED:
            return False
        return armed.typed.rstrip(_SPACE_CHARS) in names

    def _trusting_step(self, char: str) -> int:
        """The armed trigger's course on emitted text, without asking for names (the text
        was checked already, or is the document): an identifier grows until it ends."""
        armed = self.armed
        mode = armed.trigger.kind.mode
        if mode == "keyword":   # "=" ends it: "name=" was checked when written
            return _DONE if char == "=" else self._keyword_step(armed, char, is_identifier_char(char))
        if is_identifier_char(char) and not armed.eq:
            armed.typed += char
            return _KEEP
        if not armed.typed and mode != "member" and char in _SPACE:
            return _KEEP
        return _DONE

    def _scan(self, text: str, how: str = "check") -> bool:
        """Feed ``text``: ``"check"`` returns False at the first character the armed
        trigger refuses; ``"emit"`` follows emitted text (counting its triggers) and
        ``"document"`` the document, neither asking for names. Triggers that fire here
        are not real yet (see :meth:`advance`)."""
        scanner = self.scanner
        check = how == "check"
        for i, char in enumerate(text):
            if self.armed is not None:
                verdict = self._step(char) if check else self._trusting_step(char)
                if verdict == _REFUSE:
                    return False
                if verdict == _DONE:
                    self.armed = None
            kind = scanner.feed(char)
            if kind is not None:
                if how == "document":
                    written = self.document[:i + 1]
                else:
                    written = self.document + self.text + text[:i + 1]
                    if how == "emit":
                        self.session.stats.triggers += 1
                self.armed = _Armed(Trigger(kind, written))
        return True

    def allows(self, token: int) -> bool:
        """Whether emitting ``token`` keeps this monitor consistent (EOS: see
        :meth:`end_ok`; tokens without bytes: always)."""
        index = self.session.index
        if token in index.eos:
            return self.end_ok()
        data = self.session.vocab.tokens[token]
        if not data:
            return True
        return self.copy()._judge(data)

    def _judge(self, data: bytes) -> bool:
        """Feed a candidate token's bytes to this state (a copy): whether it is allowed."""
        text, pending = _decode(self.pending, data)
        if not self._scan(text):
            return False
        armed = self.armed
        if armed is None:
            return True
        if armed.eq:
            return self._keyword_ok(armed)
        if not pending or armed.trigger.kind.mode == "keyword":
            return True
        return self._partial_ok(armed, pending)

    def _partial_ok(self, armed: _Armed, pending: bytes) -> bool:
        """Whether the incomplete character ``pending`` can still become a character the
        armed trigger accepts."""
        mode = armed.trigger.kind.mode
        free = not armed.typed and mode == "optional"
        if free and can_end_identifier(pending):
            return True
        names = self._names(armed)
        if names is None:
            return True
        if names is UNVERIFIED:
            return not armed.typed and can_end_identifier(pending)
        typed = armed.typed.encode("utf-8")
        if names.is_prefix(typed + pending):
            return True
        return armed.typed in names and can_end_identifier(pending)

    def end_ok(self) -> bool:
        """Whether the text may end here: no identifier is half written after a trigger."""
        armed = self.armed
        if armed is None:
            return True
        mode = armed.trigger.kind.mode
        if mode == "keyword":
            return not armed.eq or self._keyword_ok(armed)
        if not armed.typed and mode == "optional":
            return not self.pending
        names = self._names(armed)
        if names is None:
            return True
        return not self.pending and armed.typed in names

    def advance(self, token: int, refused: bool = False) -> None:
        """Move past an emitted ``token`` (not checked here). ``refused``: the monitor
        refused it but the token was emitted anyway (a fallback): the identifier it broke
        is left unrestricted until the next trigger."""
        index = self.session.index
        if token in index.eos:
            return
        data = self.session.vocab.tokens[token]
        if not data:
            return
        text, pending = _decode(self.pending, data)
        self._scan(text, "emit")
        self.text += text
        self.pending = pending
        armed = self.armed
        if armed is not None:
            if refused and armed.typed:
                self.armed = None
            else:
                armed.real = True

    # -- all tokens at once -------------------------------------------------------------------

    def mask(self) -> np.ndarray:
        """``allows`` for every token id, as one bool array."""
        session = self.session
        index = session.index
        if self.pending:
            return self._pending_mask()
        by_rank = self._rank_mask()
        out = index.to_ids(by_rank, neutral=True)
        for eos in index.eos:
            out[eos] = self.end_ok()
        return out

    def _rank_mask(self) -> np.ndarray:
        index = self.session.index
        armed = self.armed
        if armed is None:
            by_rank = np.ones(index.n_ranks, dtype=bool)
        else:
            base = self._walk(armed, b"")
            by_rank = base.copy() if base is not None else np.ones(index.n_ranks, dtype=bool)
        for b in _HOT_FIRST:
            lo, hi = index.range(bytes([b]))
            if lo == hi or not by_rank[lo:hi].any():
                continue
            probe = self.copy()
            if not probe._scan(chr(b)) or probe.armed is None \
                    or (armed is not None and probe.armed.trigger is armed.trigger):
                continue   # refused by the armed trigger (so by the walk), or nothing fired
            walked = probe._walk(probe.armed, bytes([b]))
            if walked is not None:
                by_rank[lo:hi] &= walked[lo:hi]
        vocab_bytes = index.table.sorted_bytes
        for rank in index.mid_ranks.tolist():
            if by_rank[rank]:
                by_rank[rank] = self.copy()._judge(vocab_bytes[rank])
        return by_rank

    def _walk(self, armed: _Armed, start: bytes) -> np.ndarray | None:
        """The names' mask (by rank) for the tokens after ``start`` while ``armed``; None
        when nothing is restricted. Names are asked for only when some token needs them."""
        session = self.session
        mode = armed.trigger.kind.mode
        typed = armed.typed.encode("utf-8")
        if mode == "keyword" and not self._keyword_needs_names(typed, start):
            return None
        if mode == "optional" and not typed and not self._optional_needs_names(start):
            return None
        names = self._names(armed)
        if names is None:
            return None
        if names is UNVERIFIED:
            return session.unverified.mask(typed, mode, start, free_other=True)
        return names.mask(typed, mode, start)

    def _keyword_needs_names(self, typed: bytes, start: bytes) -> bool:
        """Whether a token after ``start`` writes an identifier directly followed by ``=``."""
        index = self.session.index
        lo, hi = index.range(start)
        eq = index.eq_ranks
        inside = eq[(eq >= lo) & (eq < hi)]
        if not inside.size:
            return False
        unverified = self.session.unverified
        data = index.table.sorted_bytes
        return any(not keyword_allows(unverified, typed, data[r][len(start):]) for r in inside.tolist())

    def _optional_needs_names(self, start: bytes) -> bool:
        """Whether a token after ``start`` starts an identifier (after whitespace)."""
        free = self.session.unverified.mask(b"", "optional", start)
        lo, hi = self.session.index.range(start)
        return not free[lo:hi].all()

    def _pending_mask(self) -> np.ndarray:
        """The mask while the text ends inside a character: tokens that continue it are
        judged one by one; any other token first turns those bytes into U+FFFD."""
        index = self.session.index
        flushed = self.copy()
        flushed.pending = b""
        if flushed._scan("\ufffd"):
            flushed.text += "\ufffd"
            by_rank = flushed._rank_mask()
        else:
            by_rank = np.zeros(index.n_ranks, dtype=bool)
        vocab_bytes = index.table.sorted_bytes
        for rank in index.cont_ranks.tolist():
            by_rank[rank] = self.copy()._judge(vocab_bytes[rank])
        out = index.to_ids(by_rank, neutral=True)
        for eos in index.eos:
            out[eos] = self.end_ok()
        return out
