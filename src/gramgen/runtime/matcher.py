"""The :class:`Matcher`: the state of one sequence being generated under a grammar."""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable

import numpy as np
import numpy.ma  # noqa: F401 - np.unique imports it on first use (~20 ms): pay that at import, not in a mask

from ..automata import bitmask
from ..automata.earley import HorizonReads, LocalSignatures, tracked_view
from ..automata.lexeme_tokens import jump_plan as plan_jumps, pass_split, run_suffixes
from ..errors import ConfigurationError, TextRejected, TokenRejected, text_location

#: horizons (in origin links) tried for the context-independent part of a mask
_HORIZONS = (2, 3, 4, 5, 6, 8, 12)
#: below this many undecided tokens, deeper horizons (each a signature and a walk) are
#: skipped for one walk on the whole chart
_FEW = 16
#: a position inside lexemes looks for a neighbour's mask (Matcher._neighbour_words) only
#: when its lexeme states have more exit tokens than this: fewer are walked quickly
_NEIGHBOR_EXITS = 64
#: ... and only when it is inside at most this many lexemes: every lexeme state must agree
#: with the neighbour's, and among many (a key's first bytes, shared by dozens of declared
#: names) some always differ at once, so the context is made for nothing (over 300 sampled
#: dev-split schemas, no reuse succeeded past 2 lexemes)
_NEIGHBOR_SCANS = 8
#: a token with this many bytes left to walk inside lexemes jumps to its next completion
_LONG_REST = 8


def _text_bytes(text) -> bytes:
    """``text`` (str or bytes) as bytes; ConfigurationError for anything else."""
    if isinstance(text, str):
        return text.encode("utf-8", errors="surrogatepass")
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise ConfigurationError(f"the text must be a str or bytes, not {type(text).__name__}")


def _line_ends(data: bytes):
    """The offsets just after each line end of ``data``, then ``len(data)``."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            break
        yield end + 1
        start = end + 1
    if start < len(data) or not data:
        yield len(data)


def text_rejected(data: bytes, offset: int) -> TextRejected:
    line, column = text_location(data, offset)
    shown = data[offset:offset + 12].decode("utf-8", errors="replace")
    return TextRejected(offset, line, column, f"no word of the language continues it with {shown!r}")


def _successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes((p[-1] + 1,)) if p else None  # None: nothing sorts after them


def _whole_number(value, what: str) -> int:
    """``value`` as an int (a Python or numpy integer, anything with ``__index__``);
    ConfigurationError for a bool, a float, a string, None."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{what} must be an int, not a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise ConfigurationError(f"{what} must be an int, not {type(value).__name__} ({value!r:.60})") from None


class _WorkLimitReached(Exception):
    """A bounded mask's exit walk passed its work limit: ``allowed`` (packed) holds the
    tokens decided allowed so far, ``undecided`` the ranks whose fate is still open."""

    def __init__(self, allowed: np.ndarray, undecided):
        super().__init__("the mask's work limit was reached")
        self.allowed = allowed
        self.undecided = undecided


def _sorted_ranks(ranks) -> np.ndarray:
    """The distinct ranks, ascending, as a read-only int64 array (cache entries share it);
    a sort and a neighbour comparison, not numpy.unique's hashing (slow for 50k ranks)."""
    a = np.sort(np.asarray(ranks, dtype=np.int64))
    if a.size > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    a.flags.writeable = False
    return a


class Matcher:
    """Tracks which text has been produced and answers which tokens may come next.

    The state is an Earley chart (a list of immutable sets, one per byte), so :meth:`fork`
    copies a list of references and :meth:`rollback` truncates it: no recompilation and
    no copy of the sets themselves.
    """

    __slots__ = ("_cg", "_tables", "_chart", "_bounds", "_tokens", "_terminated", "_walk_work")

    def __init__(self, compiled: "CompiledGrammar"):
        """A matcher at the start of the language of ``compiled`` (a
        :class:`~gramgen.CompiledGrammar`, usually through its ``matcher()``)."""
        # (by what it holds: compiled.py imports this module, so no isinstance here)
        if getattr(compiled, "_initial", None) is None or getattr(compiled, "tables", None) is None:
            raise ConfigurationError(f"Matcher() takes a gramgen.CompiledGrammar (from gramgen.compile), "
                                     f"not {type(compiled).__name__}")
        self._cg = compiled
        self._tables = compiled.tables
        self._chart = [compiled._initial]
        self._bounds: list[int] = []   # chart length before each advanced token
        self._tokens: list[int] = []
        self._terminated = False
        self._walk_work: int | None = None   # the work of the current mask's walks

    # -- queries ---------------------------------------------------------------------------

    def is_accepting(self) -> bool:
        """The text so far is a complete word of the language."""
        return self._tables.is_accepting(self._chart[-1])

    def is_terminated(self) -> bool:
        """EOS has been accepted; nothing more can follow."""
        return self._terminated

    @property
    def vocab_size(self) -> int:
        """The length of this matcher's masks: the vocabulary's size."""
        return self._cg.vocab_size

    @property
    def tokens(self) -> list[int]:
        """The tokens advanced so far."""
        return list(self._tokens)

    def text_bytes(self) -> bytes:
        """The bytes produced so far (EOS contributes none)."""
        vocab = self._cg.vocab
        return b"".join(vocab.token_bytes(t) for t in self._tokens if t not in self._cg.vocab.eos_token_ids)

    def mask(self) -> np.ndarray:
        """bool[vocab.size]: True where the token keeps the text inside the language."""
        return bitmask.unpack(self._words(), self._cg.vocab_size).copy()

    def fill_bitmask(self, bitmask_out, row: int = 0, *, max_work: int | None = None) -> bool:
        """Write the mask into row ``row`` of an int32 ``[batch, ceil(V/32)]`` array or tensor
        (more columns are zeroed); ConfigurationError for another dtype or shape, or a row
        out of range, before the mask is computed. Returns True: the row is the exact mask.

        ``max_work`` bounds the costly part of a mask, the walk of the tokens that end a
        lexeme through the parser, in work units (a token looked at is one, a parser step
        eight; a million took 14-25 ms on the project's 2-core test machine). When the walk would pass
        it, it stops and this returns False: the row then holds only the tokens already
        known to be allowed (a subset of the mask; the others may be decided one at a time
        with :meth:`check`, as masked sampling does). None: no bound. Grammars with
        indentation (Python's) always compute the whole mask."""
        bitmask.check_target(bitmask_out, row, (self._cg.vocab_size + 31) >> 5)
        words, undecided = self.bounded_words(max_work)
        bitmask.write_row(bitmask_out, row, words)
        return undecided is None

    def bounded_words(self, max_work: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """``(words, None)``: the exact mask packed (uint32 words, bit i = token i), or,
        when the exit walk would pass ``max_work`` (see :meth:`fill_bitmask`),
        ``(allowed, undecided)``: the tokens known allowed and those whose fate is open,
        both packed; the mask is then ``allowed`` plus the allowed ones of ``undecided``.
        The returned arrays may be shared: do not write them."""
        if max_work is not None:
            max_work = _whole_number(max_work, "max_work")
            if max_work < 0:
                raise ConfigurationError(f"max_work must be >= 0 or None, not {max_work}")
        try:
            return self._words(max_work), None
        except _WorkLimitReached as stop:
            return stop.allowed, self._pack_ranks(stop.undecided)

    def _token_id(self, token_id) -> int:
        """``token_id`` as an int in ``[0, vocab_size)``; ConfigurationError otherwise (a
        negative id would index the packed mask from its end)."""
        token_id = _whole_number(token_id, "a token id")
        if not 0 <= token_id < self._cg.vocab_size:
            raise ConfigurationError(f"token id {token_id} is out of range: this vocabulary has "
                                     f"ids 0 to {self._cg.vocab_size - 1}")
        return token_id

    def check(self, token_id: int) -> bool:
        """Whether ``token_id`` is allowed next, without computing the whole mask.

        Raises :class:`~gramgen.ConfigurationError` for an id that is not an int in
        ``[0, vocab_size)``."""
        if token_id.__class__ is not int or not 0 <= token_id < self._cg.vocab_size:
            token_id = self._token_id(token_id)
        if self._terminated:
            return False
        cg = self._cg
        if token_id in cg.vocab.eos_token_ids:
            return self.is_accepting()
        words = cg.mask_cache.get(self._chart[-1].sig)
        if words is not None:
            return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)
        data = self._token_bytes(token_id)
        if not data:
            return False
        chart, n = self._chart, len(self._chart)
        step = self._tables.step
        try:
            for b in data:
                s = step(chart, b)
                if s is None:
                    return False
                chart.append(s)
            return True
        finally:
            del chart[n:]

    def forced_bytes(self, limit: int = 4096) -> bytes:
        """The bytes the grammar forces next: while exactly one byte can follow and the text
        is not complete, that byte (at most ``limit``, an int of at least 0)."""
        limit = _whole_number(limit, "limit")
        if limit < 0:
            raise ConfigurationError(f"limit must be at least 0, not {limit}")
        if self._terminated:
            return b""
        tables = self._tables
        chart = self._chart
        n = len(chart)
        out = bytearray()
        try:
            while len(out) < limit and not tables.is_accepting(chart[-1]):
                allowed = tables.allowed_bytes(chart[-1])
                if allowed & (allowed - 1):  # more than one byte possible
                    break
                b = allowed.bit_length() - 1
                s = tables.step(chart, b)
                if s is None:  # pragma: no cover - allowed_bytes is exact
                    break
                chart.append(s)
                out.append(b)
        finally:
            del chart[n:]
        return bytes(out)

    def forced_tokens(self, limit: int = 4096) -> list[int]:
        """Jump-forward: a tokenisation (greedy, longest token first) of :meth:`forced_bytes`.

        Every token returned is allowed in turn. The last one is dropped when a longer
        token could also cover the forced tail plus later bytes, so forcing never rules
        out a tokenisation the model might prefer at the boundary. Whether to emit these
        without sampling (exact only when each is the single allowed token) or use them as
        a speculative draft is the caller's choice (see ``decoding``).
        """
        forced = self.forced_bytes(limit)
        tt = self._cg.token_table
        out: list[int] = []
        pos = 0
        while pos < len(forced):
            rest = forced[pos:]
            match = tt.longest_prefix_token(rest)
            if match is None:
                break
            token, size = match
            if pos + size == len(forced) and tt.count_with_prefix(rest) > 1:
                break
            out.append(token)
            pos += size
        return out

    # -- moves -----------------------------------------------------------------------------

    def advance(self, token_id: int) -> None:
        """Append one token; raises :class:`~gramgen.TokenRejected` if it is not allowed and
        :class:`~gramgen.ConfigurationError` for an id that is not an int in
        ``[0, vocab_size)``."""
        if token_id.__class__ is not int or not 0 <= token_id < self._cg.vocab_size:
            token_id = self._token_id(token_id)
        position = len(self._tokens)
        if self._terminated:
            raise TokenRejected(token_id, position, "the matcher has already accepted EOS")
        cg = self._cg
        if token_id in cg.vocab.eos_token_ids:
            if not self.is_accepting():
                raise TokenRejected(token_id, position, "EOS before the text is complete")
            self._bounds.append(len(self._chart))
            self._tokens.append(token_id)
            self._terminated = True
            return
        data = self._token_bytes(token_id)
        if not data:
            raise TokenRejected(token_id, position, "special or empty tokens are never allowed")
        n = len(self._chart)
        if not self._feed(data):
            raise TokenRejected(token_id, position, f"byte {self._first_failure(None, data)} of "
                                f"{data!r} leaves the language")
        self._bounds.append(n)
        self._tokens.append(token_id)

    def advance_text(self, text: str | bytes) -> None:
        """Advance over text that is not token ids: the start of the document the output
        continues (the code before the cursor). Only before any token (it becomes part of
        the start state: :meth:`rollback` never undoes it). :class:`~gramgen.TextRejected`
        locates the first byte after which no word of the language can continue (the
        state is then unchanged). To follow a text as it is edited, advancing only over
        what changed, use :class:`~gramgen.runtime.Document`."""
        data = _text_bytes(text)
        if self._tokens:
            raise ConfigurationError("advance_text() must come before any token is advanced")
        failed = self._advance_bytes(data)
        if failed is not None:
            raise text_rejected(data, failed)

    def _advance_bytes(self, data: bytes, marks: list | None = None, offset: int = 0) -> int | None:
        """Step the chart over ``data`` (None) or return the offset of the first byte that
        leaves the language, with the state unchanged, or with ``marks`` (for
        :class:`~gramgen.runtime.Document`) at the start of the line that holds it.
        ``marks`` receives ``(offset + end of each line, chart length, layout)``."""
        layout = before = self._layout_state()
        n = len(self._chart)
        start = 0
        for end in _line_ends(data):
            found = self._scan(layout, data[start:end])
            if found is None or not self._feed(found[1]):
                failed = start + self._first_failure(layout, data[start:end])   # from the line's start
                if marks is None:
                    self._restore(n, before)
                return failed
            layout = found[0]
            self._restore(len(self._chart), layout)
            start = end
            if marks is not None:
                marks.append((offset + end, len(self._chart), layout))
        return None

    def _first_failure(self, layout, data: bytes) -> int:
        """The offset of the byte of ``data`` at which stepping from here (with ``layout``)
        fails; the state is left as it was."""
        n = len(self._chart)
        try:
            for i in range(len(data)):
                found = self._scan(layout, data[i:i + 1])
                if found is None or not self._feed(found[1], sign=False):
                    return i
                layout = found[0]
            return len(data)
        finally:
            del self._chart[n:]

    def _scan(self, layout, data: bytes) -> tuple | None:
        """``(layout after data, the bytes the chart is fed for it)``, None where the text
        cannot go on (see IndentedMatcher); here the bytes themselves."""
        return layout, data

    def _feed(self, data: bytes, sign: bool = True) -> bool:
        """Step the chart over ``data``; False (chart unchanged) when it leaves the
        language. ``sign``: give the new sets the signatures masks read (not needed for
        sets dropped again at once)."""
        chart = self._chart
        n = len(chart)
        tables = self._tables
        step, intern = tables.step, self._cg.intern()
        last = len(data) - 1
        for i, b in enumerate(data):
            s = step(chart, b)
            if s is None:
                del chart[n:]
                return False
            chart.append(s)
            if sign and (s.n_items or i == last):   # (as advance: masks read them)
                s.sig = tables.signature(chart, len(chart) - 1, intern)
        return True

    def _layout_state(self):
        """What besides the chart a text position needs (see IndentedMatcher)."""
        return None

    def _restore(self, chart_length: int, layout) -> None:
        """To a text position recorded by :meth:`_advance_bytes` (no tokens advanced)."""
        del self._chart[chart_length:]

    def advance_many(self, token_ids: Iterable[int]) -> None:
        """Advance each token in turn; on a rejection (or a bad id) the earlier ones stay
        applied."""
        if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Iterable):
            raise ConfigurationError(f"advance_many() takes an iterable of token ids, not "
                                     f"{type(token_ids).__name__}")
        for t in token_ids:
            self.advance(t)

    def validate(self, token_ids: Iterable[int]) -> int:
        """How many of ``token_ids``, advanced in turn from here, the grammar accepts (the
        length of the longest accepted prefix; an accepted EOS ends it). The state is left
        as it was: what a speculative decoder asks to cut a draft before the model runs it.
        ConfigurationError for an id that is not an int in ``[0, vocab_size)``."""
        if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Iterable):
            raise ConfigurationError(f"validate() takes an iterable of token ids, not "
                                     f"{type(token_ids).__name__}")
        done = 0
        try:
            for t in token_ids:
                if self._terminated:
                    break
                try:
                    self.advance(t)
                except TokenRejected:
                    break
                done += 1
        finally:
            self.rollback(done)
        return done

    def rollback(self, n_tokens: int) -> None:
        """Undo the last ``n_tokens`` advances (an int from 0 to the number advanced)."""
        n_tokens = _whole_number(n_tokens, "rollback's n_tokens")
        if n_tokens < 0 or n_tokens > len(self._tokens):
            raise ConfigurationError(f"cannot roll back {n_tokens} tokens: give 0 to {len(self._tokens)}, "
                                     "the number of tokens advanced")
        if n_tokens == 0:
            return
        cut = self._bounds[-n_tokens]
        del self._chart[cut:]
        del self._bounds[-n_tokens:]
        del self._tokens[-n_tokens:]
        self._terminated = False

    def fork(self) -> "Matcher":
        """An independent matcher in the same state (shares the immutable sets)."""
        other = self.__class__.__new__(self.__class__)
        other._cg = self._cg
        other._tables = self._tables
        other._chart = list(self._chart)
        other._bounds = list(self._bounds)
        other._tokens = list(self._tokens)
        other._terminated = self._terminated
        other._walk_work = None
        return other

    def reset(self) -> None:
        self.rollback(len(self._tokens))

    # -- mask computation ------------------------------------------------------------------

    def _token_bytes(self, token_id: int) -> bytes:
        vocab = self._cg.vocab
        if token_id < 0 or token_id >= vocab.size or token_id in vocab.special_ids:
            return b""
        return vocab.token_bytes(token_id)

    def _words(self, limit: int | None = None) -> np.ndarray:
        """The packed mask; with a work ``limit`` (see :meth:`fill_bitmask`) it may raise
        :class:`_WorkLimitReached` instead (nothing partial is cached)."""
        cg = self._cg
        if self._terminated:
            return np.zeros(bitmask.n_words(cg.vocab_size), dtype=np.uint32)
        cur = self._chart[-1]
        words = cg.mask_cache.get(cur.sig)
        if words is None:
            words = self._compute_words(cur, limit)
            cg.mask_cache.put(cur.sig, words)
        return words

    def _compute_words(self, cur, limit: int | None = None) -> np.ndarray:
        cg = self._cg
        scans = cur.scans  # (read once: a native set makes this dict anew at each read)
        classes = [cg.classes.lexeme_tokens(k, q) for k, q in scans]
        if cur.n_items and cg.split_automata is not None and cg.INSIDE_NEIGHBORS:
            return self._automaton_words(cur, scans, classes, limit)
        if cur.n_items or not cg.INSIDE_NEIGHBORS or len(scans) > _NEIGHBOR_SCANS \
                or sum(lt.n_exits for lt in classes) <= _NEIGHBOR_EXITS:
            return self._full_words(cur, scans, classes, limit)
        found = self._inside_context(scans)
        if found is None:
            return self._full_words(cur, scans, classes, limit)
        context, states = found
        words = self._neighbour_words(context, states, classes, scans, limit)
        if words is None:
            words = self._full_words(cur, scans, classes, limit)
        cg.store_inside_mask(context, states, words)
        return words

    def _inside_context(self, scans: dict) -> tuple[tuple, tuple] | None:
        """For a position inside lexemes (no parser items): its parser context, each
        lexeme with the signatures of the sets it started from, and the lexemes' states
        in the same order; None when two scans share a context entry (no pairing)."""
        chart = self._chart
        parts = []
        for (k, q), origins in scans.items():
            sigs = []
            for o in origins:
                sig = chart[o].sig
                if sig is None:
                    return None
                sigs.append(sig)
            parts.append(((k, tuple(sorted(sigs))), q))
        parts.sort()
        context = tuple(entry for entry, _ in parts)
        if len(set(context)) != len(context):
            return None
        return context, tuple(q for _, q in parts)

    def _neighbour_words(self, context: tuple, states: tuple, classes: list, scans: dict,
                         limit: int | None = None) -> np.ndarray | None:
        """The mask from that of a recent position with the same parser context whose
        lexeme states agree with these on every string of at most ``d`` bytes: a token
        that short is allowed at both or at neither (byte by byte the same lexemes die,
        go on and complete, from the same origins, so the parser steps alike); only the
        longer tokens are decided here. Positions in a counted lexeme (a string with a
        maxLength, a bounded number) are distinct states that agree that deep. None when
        no recent position agrees deep enough for most tokens. ``classes``: the lexeme
        states' classes, in the order of ``scans`` (the current set's, read once)."""
        cg = self._cg
        tt = cg.token_table
        # (a neighbour that agrees less deep than this leaves too many tokens to decide: the
        # agreements stop at the first pair of states that falls short, e.g. two places in
        # a literal key, whose futures differ at once)
        need = tt.depth_for_share(cg.classes.NEIGHBOR_SHARE)
        if need is None:
            return None
        best, near = need - 1, None
        for prev, words in cg.inside_neighbours(context):
            d = tt.max_len
            for (k, _), q1, q2 in zip(context, prev, states):
                if q1 != q2:
                    d = min(d, cg.classes.agreement(k, q1, k, q2))
                    if d <= best:
                        break
            if d > best:
                best, near = d, words
        if near is None:
            return None
        long, short_ids, short_ranks = tt.longer_than(best)
        words = near & short_ids
        if not long.size:
            return words
        return self._decide_rest(words, ~short_ids, ~short_ranks, classes, scans, best, limit)

    def _decide_rest(self, words: np.ndarray, fresh_ids: np.ndarray, fresh_ranks: np.ndarray, classes: list,
                     scans: dict, subset, limit: int | None) -> np.ndarray:
        """``words`` (a neighbour's mask for the tokens it decides) with the ``fresh``
        tokens (packed by id and by rank) decided here: those inside the current lexemes
        by their classes, the exit tokens by the parser (``_exit_words``, with ``subset``
        naming this candidate set in its cache)."""
        tt = self._cg.token_table
        exits = None
        for lt in classes:
            lt.or_inside(words, fresh_ids)
            if lt.n_exits:
                if exits is None:
                    exits = np.zeros(tt.n_rank_words, dtype=np.uint32)
                lt.or_exits(exits, fresh_ranks)
        if exits is not None and exits.any():
            cands = bitmask.unknown_positions(exits, len(tt.sorted_bytes), tt.rank_to_id, words)
            if cands.size:
                words |= self._exit_words(cands, scans, subset=subset, limit=limit, known=words)
        return words

    def _automaton_words(self, cur, scans: dict, classes: list, limit: int | None = None) -> np.ndarray:
        """The mask at a position inside an automaton split into rules (a string with a
        pattern and a maxLength, see ``automata.split_automata``), from a recent position
        in the same automaton whose state agrees with this one on every string of at most
        ``d`` bytes, wherever that position was: a token that short which cannot leave
        the automaton before its last byte (none of its bytes may follow the automaton)
        reads the same labels to the same acceptance from both states, so it is allowed at
        both or at neither. Where no recent state agrees deep enough as a whole (after a
        space, the last ones after words), ``d`` is taken per first byte
        (``SplitAutomata.first_byte_depths``). The tokens left (the longer ones, or every
        token without a neighbour) that cannot leave the automaton are read by its walk
        character by character (``SplitAutomata.read_by_characters``) where it decides
        them; the parser walks the rest: the tokens that may leave it (a closing quote),
        and those with an escape or a cut-off UTF-8 character."""
        cg = self._cg
        automata = cg.split_automata
        pos = automata.position(cur.items, scans, len(self._chart) - 1)
        if pos is None:
            return self._full_words(cur, scans, classes, limit)
        x, state, _ = pos
        context = ("automaton", x)
        words = self._automaton_neighbour_words(cur, x, state, context, scans, classes, limit)
        if words is None:
            words = self._full_words(cur, scans, classes, limit)
        cg.store_inside_mask(context, (state,), words)
        return words

    #: a neighbour by first bytes is taken when it decides at least this share of the tokens
    _BY_FIRST_BYTES_SHARE = 0.5

    def _automaton_neighbour_words(self, cur, x: int, state: int, context: tuple, scans: dict, classes: list,
                                   limit: int | None) -> np.ndarray | None:
        cg = self._cg
        tt = cg.token_table
        automata = cg.split_automata
        cap = cg.classes.agreement_cap
        n_tokens = len(tt.sorted_bytes)
        by_chars = automata.by_characters(x, tt)
        neighbours = cg.inside_neighbours(context)
        best, near = -1, None
        for (prev,), words in neighbours:
            d = automata.agreement(x, prev, state, cap)
            if d > best:
                best, near = d, words
                if d >= cap:
                    break
        leave_ids, leave_ranks, leaves = cg.automaton_exit_tokens(x)
        fresh_ids = None   # (the tokens decided here, packed by id and by rank; None: all)
        if near is not None and tt.n_longer[min(best, tt.max_len)] <= cg.classes.NEIGHBOR_SHARE * n_tokens:
            _, short_ids, short_ranks = tt.longer_than(best)
            # decided here: the longer tokens and those that may leave the automaton (EOS
            # and the tokens left out of the token table are not in short_ids either)
            fresh_ids, fresh_ranks = ~short_ids | leave_ids, ~short_ranks | leave_ranks
            key = context + (best,)
        elif near is not None:
            (prev,), near = neighbours[0]
            depths = automata.first_byte_depths(x, prev, state, cap)
            reused = (tt.lengths <= np.repeat(depths, np.diff(tt.first_start))) & ~leaves
            if reused.sum() >= self._BY_FIRST_BYTES_SHARE * n_tokens:
                by_id = np.ones(cg.vocab_size, dtype=bool)
                by_id[tt.rank_to_id[reused]] = False
                fresh_ids, fresh_ranks = bitmask.pack(by_id), bitmask.pack(~reused)
                key = context + (depths.tobytes(),)
        if fresh_ids is None:
            if by_chars is None:
                return None
            # nothing to reuse: every token is decided here
            near = np.zeros(bitmask.n_words(cg.vocab_size), dtype=np.uint32)
            fresh_ids, fresh_ranks = ~near, np.full(tt.n_rank_words, 0xFFFFFFFF, dtype=np.uint32)
            key = context + (-1,)
        words = near & ~fresh_ids
        if self._tables.is_accepting(cur):
            bitmask.set_bits(words, cg.eos_ids)
        if by_chars is not None:
            # the fresh tokens that cannot leave the automaton and that its walk by
            # characters decides are read by it; the parser walks the rest (the same set
            # at every state, as the key of its cache requires)
            inside = np.flatnonzero(bitmask.unpack(fresh_ranks, n_tokens) & ~leaves & by_chars[1])
            if inside.size:
                bitmask.set_bits(words, inside[automata.read_by_characters(x, state, tt, inside)], tt.rank_to_id)
                by_id = np.zeros(cg.vocab_size, dtype=bool)
                by_id[tt.rank_to_id[inside]] = True
                by_rank = np.zeros(n_tokens, dtype=bool)
                by_rank[inside] = True
                fresh_ids, fresh_ranks = fresh_ids & ~bitmask.pack(by_id), fresh_ranks & ~bitmask.pack(by_rank)
                key = context + (key[-1], "by characters")
        return self._decide_rest(words, fresh_ids, fresh_ranks, classes, scans, key, limit)

    def _full_words(self, cur, scans: dict, classes: list, limit: int | None = None) -> np.ndarray:
        """The mask from the classes of the lexeme states of ``cur`` (in the order of
        ``scans``, its ``cur.scans``): their inside tokens, and the exit tokens the parser
        accepts."""
        cg = self._cg
        tt = cg.token_table
        words = np.zeros(bitmask.n_words(cg.vocab_size), dtype=np.uint32)
        exits = None
        decided = self._exits_by_starts(scans, classes, count=limit is None)
        self._walk_work = None
        for i, lt in enumerate(classes):
            lt.or_inside(words)
            if lt.n_exits:
                if exits is None:
                    exits = np.zeros(tt.n_rank_words, dtype=np.uint32)
                if decided and i in decided:
                    taken, part = decided[i]
                    words |= taken
                    exits |= part
                else:
                    lt.or_exits(exits)
        if self._tables.is_accepting(cur):
            bitmask.set_bits(words, cg.eos_ids)
        if exits is not None:
            cands = bitmask.unknown_positions(exits, len(tt.sorted_bytes), tt.rank_to_id, words)
            if cands.size:
                words |= self._exit_words(cands, scans, limit=limit, known=words)
            if self._walk_work is not None:
                cg.classes.note_exit_walk(scans, self._walk_work)
        return words

    def _exits_by_starts(self, scans: dict, classes: list, count: bool = True) -> dict | None:
        """Per scan of the current set (its index in ``scans``) whose exit tokens are decided by
        the lexemes that start after its lexeme ends (``TokenClasses.exits_after``): the
        tokens taken, and the exits left undecided. The scans of ignored lexemes
        (whitespace, comments: their states are classified at compile time) and those
        with many exits met before (``TokenClasses.exits_after_pays``; ``count``: whether
        this mask counts as a visit). None when there are none, or without the native
        tables."""
        cls = self._cg.classes
        if not cls.decides_exits():
            return None
        tables = self._tables
        out = None
        for i, (((k, q), origins), lt) in enumerate(zip(scans.items(), classes)):
            if not lt.n_exits or not cls.exits_after_pays(k, q, count):
                continue
            if out is None:
                out = {}
            out[i] = cls.exits_after(k, q, tables.native.started_after(self._chart, k, list(origins)))
        return out

    def _exit_words(self, cands: np.ndarray, scans: dict, subset=None,
                    limit: int | None = None, known: np.ndarray | None = None) -> np.ndarray:
        """Packed mask of the exit tokens the parser accepts from here.

        Most exit tokens only look a few parser levels up (``",`` closes a string and a
        pair; ``"}]`` goes further). What was decided at a *horizon* (a view of the chart
        in which reading a set that many origin links away or more is noticed) is cached
        under the local signature of that horizon and reused in every context that agrees
        up to it; the tokens it left go on to the next horizon, and finally to the whole
        chart. At the first horizon not cached, one walk decides every token left, and
        what it decided without reading beyond that horizon is cached there: a first
        visit costs one walk (walking the horizons in turn cost more than it saved), and
        the deeper horizons are cached on later visits. A horizon at which ending any of
        the current lexemes already looks beyond it decides nothing and is skipped without
        a walk. ``subset``: when ``cands`` are only part of the exit tokens (those longer
        than a neighbour's agreement depth, or those a split automaton's neighbour did not
        decide), a hashable naming which part: it is in the cache key, since an entry is
        for one candidate set.

        ``limit``: the walk's work limit; past it :class:`_WorkLimitReached` is raised with
        ``known`` (the tokens the caller decided allowed) and what the cached horizons
        decided, and the ranks still open (only the native walk counts work). ``scans``:
        the current set's (``cur.scans``, read once per mask).
        """
        cg = self._cg
        chart = self._chart
        j = len(chart) - 1
        ranks = cands  # then the tokens left undecided by each horizon

        def stopped() -> _WorkLimitReached:
            return _WorkLimitReached(out if known is None else out | known, ranks)

        local = LocalSignatures(self._tables, chart, j, cg.intern())
        out = np.zeros(bitmask.n_words(cg.vocab_size), dtype=np.uint32)
        exiting = None  # the scans with exit tokens, found on the first horizon missed
        for depth in _HORIZONS:
            key = (depth, local.at(depth)) if subset is None else (depth, local.at(depth), subset)
            entry = cg.cached_exits(key)
            if entry is None:
                if exiting is None:
                    exiting = [(k, origins) for (k, q), origins in scans.items()
                               if cg.classes.lexeme_tokens(k, q).n_exits]
                native = self._tables.native
                if native is not None:
                    # the horizon as chart positions; the native completion and walk note
                    # their reads of those
                    far = native.horizon(chart, j, depth)
                    reaches = any(native.complete_closure(chart, k, list(origins), far) for k, origins in exiting)
                    if reaches:
                        walked = self._native_walk(chart, far, ranks, limit)
                        if walked is None:
                            raise stopped()
                        found, beyond = walked
                else:
                    view, reads = tracked_view(chart, j, depth)
                    try:
                        reaches = any(self._tables.completes_within(view, reads, k, origins) for k, origins in exiting)
                        if reaches:
                            found, beyond = self._walk_exits(view, ranks, reads)
                    finally:
                        reads.wrapped.clear()  # the wrappers refer to `reads`: no cycle left behind
                if reaches:
                    # one walk decides every token; what it decided without reading beyond
                    # this horizon is cached for every context that agrees up to it
                    words = self._pack_ranks(found)
                    # ranks stand for bytes: in rank order a later walk can bisect them (a
                    # jump leaves them in the order of their rests); kept as a read-only
                    # array (a cache entry is shared)
                    far = _sorted_ranks(beyond)
                    cg.store_exits(key, (words & ~self._pack_ranks(far) if far.size else words, far))
                    return out | words
                # every exit token ends a lexeme whose completion looks further back
                entry = (self._pack_ranks([]), _sorted_ranks(ranks))
                cg.store_exits(key, entry)
            out |= entry[0]
            ranks = entry[1]
            if not len(ranks):
                return out
            if depth >= 3 and len(ranks) <= _FEW:
                break  # a few tokens that look far up (`"}]}`): walking them once is cheaper
        if self._tables.native is not None:
            walked = self._native_walk(chart, [], ranks, limit)
            if walked is None:
                raise stopped()
            found = walked[0]
        else:
            found, _ = self._walk_exits(list(chart), ranks, HorizonReads())
        return out | self._pack_ranks(found)

    def _pack_ranks(self, ranks) -> np.ndarray:
        cg = self._cg
        out = np.zeros(bitmask.n_words(cg.vocab_size), dtype=np.uint32)
        bitmask.set_bits(out, ranks, cg.token_table.rank_to_id)
        return out

    def _native_walk(self, chart: list, far: list[int], ranks,
                     limit: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`_walk_exits` in C, byte by byte over the trie (no jump plans; it caches
        the passes of big groups itself), on the chart's sets (the walk stacks its own on
        them), told which chart positions lie beyond the horizon (``far``); found and
        beyond as int32 arrays; None when its work passed ``limit``."""
        tt = self._cg.token_table
        walked = self._tables.native.walk_exits(chart, far, ranks, tt.blob, tt.offsets, 1, 1,
                                                -1 if limit is None else limit)
        if walked is None:
            return None
        # (what this mask's walks cost: see TokenClasses.note_exit_walk)
        self._walk_work = walked[3] + (self._walk_work or 0)
        return np.frombuffer(walked[0], dtype=np.int32), np.frombuffer(walked[1], dtype=np.int32)

    def _walk_exits(self, chart: list, ranks, reads: HorizonReads) -> tuple[list[int], list[int]]:
        """Which of these tokens (byte-sorted ranks) the parser accepts after ``chart`` (a
        scratch copy of the chart, extended and shrunk during the walk), and which of them
        (accepted or not) were decided by reading a set beyond the chart's horizon (a
        parser step that set ``reads.read``: ``chart, reads = tracked_view(...)``).

        A depth-first walk over the implicit trie of the sorted token bytes: tokens that
        share a prefix share the parser steps over it, and a dead prefix skips all of its
        tokens with one bisection. (The Python recogniser's walk; native tables walk in C,
        :meth:`_native_walk`.)
        """
        cg = self._cg
        tt = cg.token_table
        sorted_bytes = tt.sorted_bytes
        tables = self._tables
        found: list[int] = []
        beyond: list[int] = []
        key = sorted_bytes.__getitem__
        successor = _successor

        rows, accept, follow = tables.lex_rows, tables.lex_accept, tables.follow_bytes
        pass_cache = cg.pass_cache
        wrapped = reads.wrapped

        def unwrap(far: bool) -> None:
            """Past a read beyond the horizon the rest of a walk reads the sets as they are
            (far=True), back at the horizon the wrappers return (far=False)."""
            for idx, wrapper, real in wrapped:
                chart[idx] = real if far else wrapper

        def walk(rs: list[int], lo: int, hi: int, depth: int, checked: bool = False,
                 base: int = 0, far: bool = False) -> None:
            """The tokens rs[lo:hi] share their bytes base..depth-1 (and are sorted by their
            bytes from ``base`` on); chart[-1] is the set after those bytes. ``far``: a
            step on the way read beyond the horizon (the tokens are in ``beyond``)."""
            cur = chart[-1]
            if depth and not checked:
                # A token whose rest keeps one of the current lexemes alive is allowed, and
                # one that kills them all without ending one (before a byte that may follow
                # it) is not: run the lexeme DFAs over the rests, keep the parser for the rest.
                rs = lexeme_pass(cur, rs, lo, hi, depth)
                lo, hi = 0, len(rs)
                if not hi:
                    return
            # inside lexemes only: run their DFAs to the next completion at once, for
            # a group of tokens, or for one with a long way to go (a run of spaces
            # across a counted string) that byte by byte would cost a pass per byte
            if not cur.items and (hi - lo >= 4 or max(len(key(rs[lo])), len(key(rs[hi - 1]))) - depth >= _LONG_REST):
                jump(rs[lo:hi], depth, far)
                return
            allowed = tables.allowed_bytes(cur)
            by = key if base == 0 else (lambda r: sorted_bytes[r][base:])
            i = lo
            while i < hi:
                r = rs[i]
                data = sorted_bytes[r]
                if len(data) == depth:
                    found.append(r)
                    i += 1
                    continue
                b = data[depth]
                # the tokens sharing data[base:depth+1] are contiguous: find the first that doesn't
                succ = successor(data[base: depth + 1])
                j = hi if succ is None else bisect.bisect_left(rs, succ, i + 1, hi, key=by)
                if (allowed >> b) & 1:
                    reads.read = False
                    s = tables.step(chart, b)
                    if not far and reads.read:
                        beyond.extend(rs[i:j])
                        if s is not None:
                            unwrap(True)
                            chart.append(s)
                            walk(rs, i, j, depth + 1, base=base, far=True)
                            chart.pop()
                            unwrap(False)
                    elif s is not None:
                        chart.append(s)
                        walk(rs, i, j, depth + 1, base=base, far=far)
                        chart.pop()
                i = j

        def jump(group: list[int], depth: int, far: bool = False) -> None:
            """chart[-1] has no items, only lexemes being matched, so until one of them can
            end the parser only moves their DFAs: run the DFAs over every token at once, and
            take a parser step only at the byte where a token first completes one of them.
            Tokens completing one at the same byte from the same DFA states share that step
            and the walk of their rests, whatever their bytes before it."""
            scans = sorted(chart[-1].scans.items())
            states = tuple(kq for kq, _ in scans)
            key = (states, depth, tuple(group))
            plan = pass_cache.get(key)
            if plan is None:
                plan = jump_plan(states, group, depth)
                cg.store_pass(key, plan)
            n0 = len(chart)
            for pos, before, b, ranks in plan:
                if pos > depth:
                    merged: dict = {}
                    for (k, _), q, (_, origins) in zip(states, before, scans):
                        if q >= 0:
                            prev = merged.get((k, q))
                            merged[(k, q)] = origins if prev is None else prev | origins
                    chart.extend([tables.inside_lexemes(merged)] * (pos - depth))
                reads.read = False
                s = tables.step(chart, b)
                newly_far = not far and reads.read
                if newly_far:
                    beyond.extend(ranks)
                if s is not None:
                    if newly_far:
                        unwrap(True)
                    chart.append(s)
                    walk(ranks, 0, len(ranks), pos + 1, base=pos + 1, far=far or newly_far)
                    if newly_far:
                        unwrap(False)
                del chart[n0:]

        def jump_plan(states: tuple, group: list[int], depth: int) -> tuple:
            """(position, DFA states before it (-1: dead), byte, tokens sorted by their rest)
            for each way the tokens first complete one of the lexemes from ``states``
            (``lexeme_tokens.jump_plan``).

            The parser step at that byte depends only on the states the byte leads to
            (which lexemes go on, which complete), not on the states before it nor the
            byte: tokens that get there from different states (``ab"`` and ``abc"`` in
            a counted string) share one step and the walk of their rests, made from the
            states and byte of any one of them."""
            return plan_jumps(tt, [cg.sink_tables[k] for k, _ in states], [q for _, q in states], group, depth)

        def lexeme_pass(cur, rs: list[int], lo: int, hi: int, depth: int) -> list[int]:
            """Decide tokens that stay inside a lexeme or die; return those that may end one.

            Depends only on the lexeme states, the tokens and the depth, never on the parser
            context, so it is cached in the compiled grammar and reused by later walks."""
            key = (frozenset(cur.scans), depth, tuple(rs[lo:hi]))
            hit = pass_cache.get(key)
            if hit is None:
                n_found = len(found)
                rest = run_lexeme_pass(cur, rs, lo, hi, depth)
                # (tuples of ints: the collector stops tracking them, lists it never does)
                hit = (tuple(found[n_found:]), tuple(rest))
                cg.store_pass(key, hit)
            else:
                found.extend(hit[0])
            return hit[1]

        def run_lexeme_pass(cur, rs: list[int], lo: int, hi: int, depth: int) -> list[int]:
            scans = list(cur.scans)
            split = pass_split(tt, [(*cg.sink_tables[k], cg.follow_masks[k]) for k, _ in scans],
                               [q for _, q in scans], rs[lo:hi], depth)
            if split is not None:
                found.extend(split[0])
                return split[1]
            if hi - lo > 48:
                return lexeme_pass_vectorized(cur, scans, rs[lo:hi], depth)
            rest: list[int] = []
            first_bytes = tables.lex_first_bytes
            live_for: dict[int, list] = {}  # next byte -> the scans that can take it
            for i in range(lo, hi):
                r = rs[i]
                data = sorted_bytes[r]
                last = len(data) - 1
                if last < depth:
                    found.append(r)
                    continue
                b0 = data[depth]
                live = live_for.get(b0)
                if live is None:
                    live = live_for[b0] = [(k, q) for k, q in scans if (first_bytes[k][q] >> b0) & 1]
                may_end = False
                for k, q in live:
                    row, acc, fol = rows[k], accept[k], follow[k]
                    for pos in range(depth, last + 1):
                        q = row[q][data[pos]]
                        if q < 0:
                            break
                        if pos < last and acc[q] and (fol >> data[pos + 1]) & 1:
                            may_end = True
                    else:
                        found.append(r)  # this lexeme stays alive to the token's end
                        break
                else:
                    if may_end:
                        rest.append(r)
            return rest

        def lexeme_pass_vectorized(cur, scans, group, depth: int) -> list[int]:
            arr = np.asarray(group, dtype=np.int64)
            short = tt.lengths[arr] <= depth
            found.extend(arr[short].tolist())
            arr = arr[~short]
            # only tokens whose next byte some lexeme can take go on
            nxt = np.frombuffer(tables.allowed_bytes(cur).to_bytes(32, "little"), dtype=np.uint8)
            arr = arr[np.unpackbits(nxt, bitorder="little").view(bool)[tt.columns[depth][arr]]]
            alive = np.zeros(arr.shape[0], dtype=bool)
            may = np.zeros(arr.shape[0], dtype=bool)
            present = np.zeros(256, dtype=bool)
            present[tt.columns[depth][arr]] = True
            present_bits = int.from_bytes(np.packbits(present, bitorder="little").tobytes(), "little")
            first_bytes = tables.lex_first_bytes
            for k, q in scans:
                if not first_bytes[k][q] & present_bits:
                    continue  # no token's next byte keeps this lexeme alive
                table, acc = cg.sink_tables[k]
                a, e = run_suffixes(tt, table, acc, cg.follow_masks[k], q, arr, depth)
                alive |= a
                may |= e
            found.extend(arr[alive].tolist())
            return arr[may & ~alive].tolist()

        try:
            cur = chart[-1]
            if not cur.items:
                jump(list(ranks), 0)
                return found, beyond
            # the first byte, with numpy: exit candidates can be tens of thousands of tokens
            arr = np.asarray(ranks, dtype=np.int64)
            firsts = tt.columns[0][arr]
            allowed = tables.allowed_bytes(chart[-1])
            for b in np.flatnonzero(np.bincount(firsts, minlength=256)).tolist():
                if not (allowed >> b) & 1:
                    continue
                group = arr[firsts == b]
                reads.read = False
                s = tables.step(chart, b)
                far = reads.read
                if far:
                    beyond.extend(group.tolist())
                if s is None:
                    continue
                if far:
                    unwrap(True)
                chart.append(s)
                rest = lexeme_pass(s, group.tolist(), 0, group.shape[0], 1)
                walk(rest, 0, len(rest), 1, checked=True, far=far)
                chart.pop()
                if far:
                    unwrap(False)
            return found, beyond
        finally:
            # walk and jump refer to each other (and walk to itself) through their cells:
            # a cycle only the garbage collector would free, whose pauses land in later
            # masks; emptied here, all of it goes as soon as this returns
            walk = jump = None
