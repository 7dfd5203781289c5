"""The model side of ``gramgen lsp``: what to generate for a request, and when to stop.

Everything here runs in the server's one worker thread (a model runs one generation at a
time), never on the event loop. A request's :class:`Job` stops its generation between two
steps when it is cancelled (``$/cancelRequest``), superseded (a newer request of the same
kind for the same document) or out of time: the constraint given to
:func:`gramgen.generate` (:class:`StopGuard`) then allows only EOS, so generation ends
with what it has, and the part that is still usable is returned.

A completion continues the identifier at the cursor. The prompt is the document before
the cursor less its last token when that token is part of the identifier being typed, and
the guard makes the output start with that token's text (token healing): a prompt that
ends inside a word is one the model rarely saw whole in training, so cut there it would
continue ``args.wh`` as if ``wh`` were a finished token. Its candidates come from one
forward pass: the likeliest starts of a name, each then completed greedily.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._lru import LRU
from ..automata import bitmask
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, TextRejected, TokenRejected
from ..generation import generate
from ..generation.constraint import EvaluationCounter, MatcherConstraint, fill_bitmask
from ..grammar import Grammar
from ..hf import load_model
from ..monitors import MonitorStats, Unconstrained, monitored
from ..runtime import compile as compile_grammar
from .text import identifier_before, prompt_start

__all__ = ["Candidate", "CompletionEngine", "Inline", "Job", "PublicNames", "Request", "ServerOptions",
           "StopGuard", "TokenTable"]

GRAMMARS = ("python", "none")
#: a completion candidate's start must be at least this share as likely as the best one's
MIN_SHARE = 0.01


@dataclass(frozen=True)
class ServerOptions:
    """The options of ``gramgen lsp`` (each one a command-line option).

    ``model``: ``"smollm2"`` or a local Hugging Face model folder. ``grammar``:
    ``"python"`` (every output is a valid continuation of the document) or ``"none"``.
    ``max_new_tokens``: the most tokens one generation may take (a completion stops at
    the end of the identifier, inline text at the end of the line or after
    ``inline_lines`` lines). ``timeout``: seconds of generation per request; then the
    request returns what it has. ``monitor``: constrain member names with the jedi
    monitor. ``candidates``: completion items per request. ``context_chars``: the most
    characters before the cursor the model sees (jedi always sees the whole document).
    ``threads``: CPU threads for the model (default: half the cores, so the editor and
    the analysis keep some; a model on a GPU hardly uses them).
    """

    model: str = "smollm2"
    grammar: str = "none"
    max_new_tokens: int = 32
    timeout: float = 2.0
    monitor: bool = True
    candidates: int = 3
    context_chars: int = 4000
    inline_lines: int = 3
    device: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.grammar not in GRAMMARS:
            raise ConfigurationError(f"grammar must be one of {', '.join(GRAMMARS)}, not {self.grammar!r}")
        for name, least in (("max_new_tokens", 1), ("candidates", 1), ("context_chars", 1),
                            ("inline_lines", 1), ("threads", 1)):
            value = getattr(self, name)
            if value is None and name == "threads":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigurationError(f"{name} must be an int of at least {least}, not {value!r}")
        if not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
            raise ConfigurationError(f"timeout must be a positive number of seconds, not {self.timeout!r}")


class Job:
    """One request's generation work: stopped from another thread by :meth:`cancel`, or
    by its deadline (``timeout`` seconds after :meth:`start`)."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.deadline: float | None = None
        #: why it stopped early: "cancelled", "superseded", "timeout", or None
        self.reason: str | None = None
        #: tokens generated, and generate() calls made, for the request's log line
        self.tokens = 0
        self.generations = 0
        self.seconds = 0.0
        #: what the monitors did (None without monitors), and warnings for the client's log
        self.monitor_stats: Any = None
        self.notes: list[str] = []
        self._event = threading.Event()
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self.deadline = self._started + self.timeout

    def finish(self) -> None:
        self.seconds = time.monotonic() - self._started if self._started else 0.0

    def cancel(self, reason: str = "cancelled") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def should_stop(self) -> bool:
        if self._event.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.reason = self.reason or "timeout"
            return True
        return False


class TokenTable:
    """Masks over one vocabulary that the guard needs: EOS alone, and the tokens that
    start with a given text (cached)."""

    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        self.n_words = bitmask.n_words(vocab.size)
        eos = np.zeros(vocab.size, dtype=bool)
        eos[list(vocab.eos_token_ids)] = True
        self.eos_words = bitmask.pack(eos).view(np.int32)
        ids = sorted((i for i, t in enumerate(vocab.tokens) if t), key=vocab.tokens.__getitem__)
        self._sorted_ids = ids
        self._sorted = [vocab.tokens[i] for i in ids]
        self._starting: LRU[bytes, np.ndarray] = LRU(256)

    def starting_with(self, head: bytes) -> np.ndarray:
        """Packed words of the tokens whose bytes start with ``head``."""
        found = self._starting.get(head)
        if found is None:
            lo = hi = bisect.bisect_left(self._sorted, head)
            while hi < len(self._sorted) and self._sorted[hi].startswith(head):
                hi += 1
            words = np.zeros(self.n_words, dtype=np.uint32)
            bitmask.set_bits(words, sorted(self._sorted_ids[lo:hi]))
            found = words.view(np.int32)
            self._starting.put(head, found)
        return found


class StopGuard:
    """A constraint around another (``inner``) that ends generation early: once ``job``
    says stop or ``stop(text so far)`` is true it allows only EOS. Its first token must
    start with ``required`` (the text of the prompt token healing took off), and its first
    tokens must be ``forced`` (the start of one completion candidate)."""

    def __init__(self, inner, table: TokenTable, job: Job, stop: Callable[[str], bool], *,
                 required: bytes = b"", forced: tuple[int, ...] = (), data: bytes = b"",
                 emitted: int = 0):
        self.inner = inner
        self.table = table
        self.job = job
        self.stop = stop
        self.required = required
        self.forced = forced
        self.data = data
        self.emitted = emitted
        self.vocab = table.vocab
        self.halted = False
        self._buffer = np.zeros((1, table.n_words), dtype=np.int32)

    @property
    def counter(self) -> EvaluationCounter:
        return self.inner.counter

    def _should_halt(self) -> bool:
        if not self.halted and (self.job.should_stop()
                                or self.stop(self.data.decode("utf-8", errors="ignore"))):
            self.halted = True
        return self.halted

    def _extra(self) -> np.ndarray | None:
        """The words the inner mask is narrowed by at this point, or None."""
        if self.emitted < len(self.forced):
            words = np.zeros(self.table.n_words, dtype=np.uint32)
            if self._allowed_here(self.forced[self.emitted]):
                bitmask.set_bits(words, [self.forced[self.emitted]])
            return words.view(np.int32)
        if self.data or not self.required:
            return None
        return self.table.starting_with(self.required)

    def _allowed_here(self, token: int) -> bool:
        """Whether the guard's own rules (not the inner constraint) allow ``token``."""
        if self.emitted < len(self.forced) and token != self.forced[self.emitted]:
            return False
        if token in self.table.vocab.eos_token_ids:
            return len(self.data) >= len(self.required)
        if self.data:
            return True
        piece = self.table.vocab.tokens[token]
        return bool(piece) and piece.startswith(self.required)

    def _packed(self) -> np.ndarray:
        """The mask of this state as int32 words."""
        if self._should_halt():
            return self.table.eos_words
        fill_bitmask(self.inner, self._buffer, 0)
        extra = self._extra()
        if extra is not None:
            self._buffer[0, :extra.shape[0]] &= extra
        return self._buffer[0]

    def fill_bitmask(self, out, row: int = 0) -> None:
        bitmask.write_row(out, row, self._packed())

    def mask(self) -> np.ndarray:
        return bitmask.unpack(self._packed().view(np.uint32), self.vocab.size).copy()

    def check(self, token: int) -> bool:
        token = int(token)
        if self._should_halt():
            return token in self.vocab.eos_token_ids
        return self._allowed_here(token) and self.inner.check(token)

    def advance(self, token: int) -> None:
        token = int(token)
        eos = token in self.vocab.eos_token_ids
        if self.halted:   # (as decided by the last mask or check: a token drawn from an
            if not eos:   # earlier mask is still taken when the clock ran out since)
                raise TokenRejected(token, len(self.data), "generation was stopped: only EOS is allowed")
            return   # the guard ended it: the inner constraint need not be complete
        if not self._allowed_here(token):
            raise TokenRejected(token, len(self.data), "the stop guard refuses this token")
        self.inner.advance(token)
        self.data += self.vocab.tokens[token]
        if not eos:
            self.emitted += 1
            self.job.tokens += 1

    def fork(self) -> StopGuard:
        twin = StopGuard(self.inner.fork(), self.table, self.job, self.stop, required=self.required,
                         forced=self.forced, data=self.data, emitted=self.emitted)
        twin.halted = self.halted
        return twin

    def is_complete(self) -> bool:
        if self._should_halt():
            return True
        return self._allowed_here(self.vocab.eos_token_ids[0]) and self.inner.is_complete()


# -- what a request asks for ----------------------------------------------------------------

@dataclass
class Request:
    """One completion or inline request: the document text, the cursor, where it lives."""

    text: str
    offset: int
    path: Path | None = None
    root: Path | None = None


@dataclass
class Candidate:
    """A completion of the identifier at the cursor: ``name`` replaces ``typed``."""

    name: str
    typed: str


@dataclass
class Inline:
    """Ghost text: ``text`` replaces ``typed`` (the part of the identifier before the
    cursor, usually empty) and continues from there."""

    text: str
    typed: str


def _is_identifier_char(char: str) -> bool:
    return char == "_" or char.isalnum() or ("a" + char).isidentifier()


def _identifier_ended(skip: int) -> Callable[[str], bool]:
    """Stop once the output, past its first ``skip`` characters (the healed text), has a
    character that cannot be in an identifier."""
    def stop(text: str) -> bool:
        return any(not _is_identifier_char(c) for c in text[skip:])
    return stop


def _leading_identifier(text: str, typed: str = "") -> str:
    """The identifier characters ``text`` starts with ("" unless ``typed`` followed by
    them is an identifier)."""
    end = 0
    while end < len(text) and _is_identifier_char(text[end]):
        end += 1
    return text[:end] if (typed + text[:end]).isidentifier() else ""


def _body_lines(rest: str) -> list[str]:
    """The lines of ``rest`` from its first non-blank character on."""
    return rest.lstrip().split("\n")


def _lines_done(skip: int, lines: int) -> Callable[[str], bool]:
    """Stop once the output past its first ``skip`` characters has ``lines`` lines after
    its leading whitespace, or an empty line among them."""
    def stop(text: str) -> bool:
        parts = _body_lines(text[skip:])
        return len(parts) > lines or any(not p.strip() for p in parts[1:-1])
    return stop


def _cut_lines(rest: str, lines: int) -> str:
    """``rest``'s leading whitespace (a line break and the next line's indentation) and
    then at most ``lines`` lines, up to the first empty one; trailing whitespace dropped."""
    body = rest.lstrip()
    kept: list[str] = []
    for i, line in enumerate(_body_lines(rest)[:lines]):
        if i and not line.strip():
            break
        kept.append(line)
    return (rest[:len(rest) - len(body)] + "\n".join(kept)).rstrip()


class PublicNames:
    """A monitor whose names leave out the private ones (``_x``, ``__x__``) when there
    are others: what an editor lists at ``obj.`` unless the typed part starts with ``_``
    (a model that knows nothing of a name would otherwise spell ``__class__`` first)."""

    def __init__(self, monitor):
        self.monitor = monitor

    def scanner(self):
        return self.monitor.scanner()

    def names(self, trigger):
        names = self.monitor.names(trigger)
        if names is None:
            return None
        public = {n for n in names if not n.startswith("_")}
        return public or names


@dataclass
class CompletionEngine:
    """Generates completions and inline text with one model, loaded once.

    ``loader``: returns the model (default: :func:`gramgen.load_model` of
    ``options.model``). ``monitors``: the monitors of a request (the server gives a
    :class:`~gramgen.lsp.server.FileJediMonitor` on the document when ``options.monitor``);
    they read the whole document before the cursor while the model reads a window of it.
    With ``options.grammar == "python"`` the output continues the document as Python
    does: the grammar is advanced over the document before the cursor (kept per document,
    re-advanced from the last line an edit kept); where that text is not valid Python the
    request goes on without the grammar and says so in ``job.notes``.
    """

    options: ServerOptions = field(default_factory=ServerOptions)
    loader: Callable[[], Any] | None = None
    monitors: Callable[[Request], list] | None = None
    model: Any = field(default=None, init=False)
    _table: TokenTable | None = field(default=None, init=False)
    _grammar: Any = field(default=None, init=False)
    _load_error: BaseException | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def load(self) -> Any:
        """The model (and the grammar), loaded on the first call; a failed load raises
        again on every call."""
        with self._lock:
            if self.model is None:
                if self._load_error is not None:
                    raise self._load_error
                try:
                    loader = self.loader or self._default_loader
                    model = loader()
                    self._table = TokenTable(model.vocab)
                    if self.options.grammar == "python":
                        self._grammar = compile_grammar(Grammar.builtin("python"), model.vocab)
                    self.model = model
                except BaseException as exc:
                    self._load_error = exc
                    raise
            return self.model

    def _default_loader(self):
        import torch

        # more threads than free cores make every step wait for the slowest one
        torch.set_num_threads(self.options.threads or max(1, (os.cpu_count() or 2) // 2))
        return load_model(self.options.model, device=self.options.device)

    # -- requests -------------------------------------------------------------------------

    def complete(self, request: Request, job: Job) -> list[Candidate]:
        """Up to ``options.candidates`` distinct identifiers continuing the one at the
        cursor, each the greedy continuation of one start (:meth:`_branches`). A name cut
        short (by the deadline or ``max_new_tokens``), one the monitors were set aside for,
        or one met before is not offered."""
        typed = identifier_before(request.text, request.offset)
        prompt, head = self._prompt(request, typed)
        base = self._constraint(request, head, job, public=not typed.startswith("_"))
        if job.monitor_stats is not None and hasattr(base, "mask"):
            base.mask()   # decides whether the monitors allow anything at the cursor
            if job.monitor_stats.fallbacks:
                return []   # no name they know continues what was typed
        ended = _identifier_ended(len(head))
        required = head.encode("utf-8")
        start = StopGuard(base.fork(), self._table, job, ended, required=required)
        names: list[str] = []
        for forced in self._branches(prompt, start, required):
            if job.should_stop():
                break
            fallbacks = job.monitor_stats.fallbacks if job.monitor_stats is not None else 0
            result = self._generate(base, job, prompt, required, ended, forced)
            if job.cancelled:
                break
            if job.monitor_stats is not None and job.monitor_stats.fallbacks > fallbacks:
                continue   # the monitor was set aside on the way: a name it did not check
            if not result.text.startswith(head):
                continue
            name = typed + _leading_identifier(result.text[len(head):], typed)
            whole = ended(result.text) or result.finish_reason == "eos"
            if whole and name != typed and name.isidentifier() and name not in names:
                names.append(name)
        return [Candidate(n, typed) for n in names]

    def _branches(self, prompt: list[int], start: StopGuard, required: bytes) -> list[tuple[int, ...]]:
        """The starts of the candidates, most likely first: each ends with the token that
        takes the text past ``required`` (after the healed token itself, when that comes
        first), and one whose text past ``required`` is a prefix of another's, or the
        other way round, is left out (``cr`` next to ``create``: most often one name), and
        so is one less than :data:`MIN_SHARE` as likely as the best that goes on."""
        scored: list[tuple[float, tuple[int, ...]]] = []
        logprobs = self._logprobs(prompt, start.mask())
        for token in np.flatnonzero(np.isfinite(logprobs)).tolist():
            if self._table.vocab.tokens[token] == required:   # the healed token: look one further
                after = start.fork()
                after.advance(token)
                more = self._logprobs(prompt + [token], after.mask())
                scored += [(logprobs[token] + more[t], (token, t)) for t in np.flatnonzero(np.isfinite(more))]
            else:
                scored.append((logprobs[token], (token,)))
        scored.sort(key=lambda pair: -pair[0])
        chosen: list[bytes] = []
        branches: list[tuple[int, ...]] = []
        floor = None   # MIN_SHARE of the best start that goes on
        for logprob, forced in scored:
            if len(branches) == self.options.candidates or (floor is not None and logprob < floor):
                break
            piece = b"".join(self._table.vocab.tokens[t] for t in forced)
            past = piece[len(required):]
            if not past or not _is_identifier_char(past.decode("utf-8", errors="ignore")[:1] or "a"):
                continue   # EOS, or the name would end at once
            floor = logprob + np.log(MIN_SHARE) if floor is None else floor
            if any(c.startswith(past) or past.startswith(c) for c in chosen):
                continue
            chosen.append(past)
            branches.append(forced)
        return branches

    def _logprobs(self, context: list[int], allowed: np.ndarray) -> np.ndarray:
        """Log-probabilities of the next token after ``context`` (one forward pass, which
        the model keeps for the generations that follow), -inf where not ``allowed``."""
        session = self.model.session()
        try:
            logits = session.logits([context])[0, -1]
        finally:
            close = getattr(session, "close", None)
            if close is not None:
                close()
        scores = np.asarray(logits.float().cpu().numpy() if hasattr(logits, "cpu") else logits,
                            dtype=np.float64)[:self._table.vocab.size]
        scores = scores - np.logaddexp.reduce(scores)
        return np.where(allowed, scores, -np.inf)

    def inline(self, request: Request, job: Job) -> Inline | None:
        """Ghost text at the cursor: one line (after a line break and indentation when
        the model starts a new line) when the line has text before the cursor, else up to
        ``options.inline_lines`` lines. Cut by the deadline, it is what came so far."""
        typed = identifier_before(request.text, request.offset)
        prompt, head = self._prompt(request, typed)
        base = self._constraint(request, head, job)
        line_start = request.text.rfind("\n", 0, request.offset) + 1
        before = request.text[line_start:request.offset - len(typed)]
        lines = 1 if before.strip() else self.options.inline_lines
        result = self._generate(base, job, prompt, head.encode("utf-8"), _lines_done(len(head), lines))
        if job.cancelled or not result.text.startswith(head):
            return None
        rest = _cut_lines(result.text[len(head):], lines)
        return Inline(typed + rest, typed) if rest.strip() else None

    # -- one generation -------------------------------------------------------------------

    def _prompt(self, request: Request, typed: str) -> tuple[list[int], str]:
        """(the prompt's token ids, the text the output must start with): the document
        before the cursor (at most ``options.context_chars``), less its last token when
        the cursor is inside an identifier and that token's text ends the prompt exactly."""
        model = self.load()
        start = prompt_start(request.text, request.offset, self.options.context_chars)
        window = request.text[start:request.offset] or "\n"
        ids = [int(t) for t in model.prompt_ids(window, chat=False)]
        if not typed or len(ids) < 2:
            return ids, ""
        tokens = self._table.vocab.tokens
        last, data = tokens[ids[-1]], window.encode("utf-8")
        if not last or not data.endswith(last) or b"".join(tokens[t] for t in ids[:-1]) != data[:-len(last)]:
            return ids, ""   # the tokens do not spell the text byte for byte: no healing
        try:
            return ids[:-1], last.decode("utf-8")
        except UnicodeDecodeError:   # the token ends inside a character
            return ids, ""

    def _constraint(self, request: Request, head: str, job: Job, public: bool = False):
        """The constraint every generation of a request starts from (forked for each):
        the grammar after the document before the healed text (or none), ANDed with the
        request's monitors, which read that whole document (the model sees a window);
        ``public``: the monitors leave out private names where there are public ones."""
        document = request.text[:request.offset - len(head)]
        inner = Unconstrained(self._table.vocab)
        if self._grammar is not None:
            try:
                inner = MatcherConstraint(self._grammar.matcher_after(document))
            except TextRejected as exc:
                job.notes.append(f"no grammar for this request: {exc}")
        monitors = self.monitors(request) if self.monitors is not None else []
        if not monitors:
            return inner
        if public:
            monitors = [PublicNames(m) for m in monitors]
        job.monitor_stats = MonitorStats()
        return monitored(inner, monitors, self._table.vocab, document=document, stats=job.monitor_stats)

    def _generate(self, base, job: Job, prompt: list[int], required: bytes, stop: Callable[[str], bool],
                  forced: tuple[int, ...] = ()):
        """One greedy generation from a fork of ``base``, guarded for ``job``."""
        guard = StopGuard(base.fork(), self._table, job, stop, required=required, forced=forced)
        job.generations += 1
        return generate(self.model, prompt, constraint=guard, chat=False,
                        max_new_tokens=self.options.max_new_tokens)
