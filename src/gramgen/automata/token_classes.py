"""The vocabulary classified per lexeme state: which tokens stay inside the lexeme, which may end it.

A mask walks the tokens from the lexeme states of the parser's scans; what a token does
inside one lexeme (stays inside, may end it, dies) depends on the lexeme state alone, so
each state's :class:`~gramgen.automata.lexeme_tokens.LexemeTokens` is computed once per
compiled grammar, on first use (or all at compile time, :meth:`TokenClasses.precompute`).
Computing one is a walk over the vocabulary; :class:`TokenClasses` avoids most of it by
reusing the classes of a state that agrees with the new one on every string as long as
most tokens, of a state with the same small future in another grammar compiled for the
same vocabulary, or by walking the new state side by side with a recent one.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from . import bitmask
from . import lexeme_tokens as _lexeme_tokens
from .bitmask import set_bits
from .dfa import canonical_form, probe_bytes
from .earley import ParserTables
from .lexeme_tokens import (LexemeTokens, chain_memo, chain_tokens, classify_tokens,
                            classify_tokens_excepted, classify_tokens_from, first_tokens, run_suffixes,
                            single_chain)
from .lexer_automaton import LexerAutomaton
from .token_table import TokenTable

__all__ = ["TokenClasses"]


class TokenClasses:
    """The classes of the vocabulary per (lexeme, DFA state) of one grammar's lexemes.

    Holds only values that are a pure function of their key, so the matchers of every
    thread share one instance (writes take its lock)."""

    #: a lexeme state reuses the classification of a recent state (one of the last
    #: NEIGHBORS classified of its lexeme, or of another lexeme with the same follow bytes,
    #: see :meth:`_classify`) when at most this share of the tokens is longer than the
    #: depth to which the two agree; only those are walked
    NEIGHBOR_SHARE = 0.1
    NEIGHBORS = 4
    #: see ``agreement_cap``: the share (1 / AGREEMENT_TAIL) of the tokens longer than the
    #: deepest agreement looked for
    AGREEMENT_TAIL = 256
    #: a state whose first bytes start fewer than 1 / SPARSE_SHARE of the tokens is
    #: classified by the full walk (it visits only those) without looking for a neighbour
    SPARSE_SHARE = 16

    #: a state no recent state agrees with deeply enough is classified by walking the
    #: vocabulary from it and from a recent state of its lexeme side by side (see
    #: :meth:`_classify`; needs the native kernel)
    PAIR_WALK = True

    def __init__(self, tables: ParserTables, token_table: TokenTable, sink_tables: list, follow_masks: list):
        """``sink_tables``: per lexeme its DFA with an explicit sink state (``ByteDFA.sink_table``);
        ``follow_masks``: per lexeme bool[256] of the bytes that may follow it."""
        self.tables = tables
        self.token_table = token_table
        self.sink_tables = sink_tables
        self.follow_masks = follow_masks
        self._first_sizes = token_table.first_sizes  # tokens per first byte
        #: per lexeme, what the native walk learned of its DFA states (lexeme_tokens.chain_memo)
        self._memos = _LazyMemos(sink_tables)
        self._follow_key = [m.tobytes() for m in follow_masks]
        self.lexer = LexerAutomaton(tables)
        self._lexeme_tokens: dict[tuple[int, int], LexemeTokens] = {}
        self._recent: dict[int, deque] = {}  # lexeme -> its states classified last
        self._recent_any: deque = deque(maxlen=4 * self.NEIGHBORS)  # (lexeme, state) classified last
        self._filtered: set = set()  # (lexeme, state) whose hopeless exits were dropped
        #: dense states by what each byte leads to (dead / alive / accepting): candidates
        #: for reuse across lexemes beyond the last classified (see :meth:`_classify`)
        self._by_ahead: dict[bytes, deque] = {}
        self._agreement: dict = {}  # (lexeme, state, lexeme, state) -> agreement depth
        #: how deep :meth:`agreement` looks: past the length that all but AGREEMENT_TAIL of
        #: the tokens keep within, a deeper agreement spares walking few tokens and costs a
        #: search as long as the longest token (most of a neighbour search's time)
        self.agreement_cap = token_table.depth_for_tail(self.AGREEMENT_TAIL)
        self._probes: dict = {}  # (lexeme, lexeme) -> the bytes their agreement tries
        #: (lexeme, state) -> its exit tokens by what their rests stay inside, and
        #: (lexeme, state, lexemes started after it) -> those decided (see :meth:`exits_after`)
        self._exit_classes_of: dict = {}
        self._exits_after: dict = {}
        #: (lexeme, state) met -> (walks of its exits noted, the least work of one; see
        #: exits_after_pays)
        self._exit_visits: dict = {}
        #: lexeme -> the reads per exit token of the first classes made for one of its
        #: states (see EXIT_CLASS_WORK)
        self._exit_reads: dict = {}
        self._lock = threading.Lock()

    def lexeme_tokens(self, lexeme: int, state: int) -> LexemeTokens:
        key = (lexeme, state)
        found = self._lexeme_tokens.get(key)
        if found is None:
            found = self._classify(lexeme, state)
            with self._lock:
                found = self._lexeme_tokens.setdefault(key, found)
                recent = self._recent.get(lexeme)
                if recent is None:
                    recent = self._recent[lexeme] = deque(maxlen=self.NEIGHBORS)
                recent.appendleft(state)
                self._recent_any.appendleft(key)
        return found

    #: a dense state whose future has at most this many DFA states is looked up in (and
    #: its classes stored into) the classes shared by every grammar compiled for the
    #: vocabulary, keyed by that future and the follow bytes (see :meth:`_classify`)
    SHARED_STATES = 48

    def _classify(self, lexeme: int, state: int) -> LexemeTokens:
        """The vocabulary classified from one lexeme state. A dense state whose future
        is small (a string body, with the bytes that may follow its end) is looked up
        among the standard classes of JSON Schema grammars (``runtime.json_standard``) and
        the classes of every grammar compiled for this vocabulary in this process:
        equal futures (``dfa.canonical_form``) and follow bytes classify alike, whichever
        lexeme and grammar they come from. Else a state whose chain of like states takes
        all but a few tokens whole walks only those (``classify_tokens_excepted``), and any
        other see :meth:`_classify_here`. A state whose first bytes start few tokens is
        walked in full at once."""
        table, acc = self.sink_tables[lexeme]
        rest, end = self._chain(lexeme, state)
        if rest:
            return chain_tokens(self.token_table, rest, table, acc, end, self.follow_masks[lexeme])
        tt = self.token_table
        n_alive = first_tokens(tt, table, state)
        if n_alive * self.SPARSE_SHARE < len(tt.sorted_bytes):
            # few tokens start with a byte this state takes: the full walk visits only
            # those, cheaper than looking for a neighbour
            return classify_tokens(tt, table, acc, state, self.follow_masks[lexeme], self._memos[lexeme])
        key = self._shared_key(lexeme, state)
        if key is not None:
            found = tt.standard_classes.get(key)
            if found is None:
                found = tt.shared_classes.get(key)
            if found is not None:
                return found
        # a string body walks only its few exceptions, cheaper than finding a neighbour
        found = classify_tokens_excepted(tt, table, acc, state, self.follow_masks[lexeme], self._memos[lexeme])
        if found is None:
            found = self._classify_here(lexeme, state, table[state] != table.shape[0] - 1, n_alive)
        if key is not None and not self._filtered:
            # (after precompute, classes reused from a state with dropped exits may lack
            # exits that hold in another grammar: those are not shared)
            tt.shared_classes.put(key, found)
        return found

    #: the longest string a state's chain is followed for (see :meth:`_chain`)
    CHAIN_BYTES = 64

    def _chain(self, lexeme: int, state: int) -> tuple[bytes, int]:
        """The string the lexeme's DFA reads from ``state`` while each state on the way
        takes a single byte and does not accept (a property name up to its closing quote),
        and the state after it."""
        table, acc = self.sink_tables[lexeme]
        return single_chain(table, acc, state, self.CHAIN_BYTES)

    def _shared_key(self, lexeme: int, state: int) -> bytes | None:
        """The key of a state's classes among those shared by the grammars of this
        vocabulary: its future (``dfa.canonical_form``) and its lexeme's follow bytes; None
        when the future has more than SHARED_STATES states."""
        if not self.SHARED_STATES:
            return None
        table, acc = self.sink_tables[lexeme]
        key = canonical_form(table, acc, state, self.SHARED_STATES)
        return None if key is None else key + self._follow_key[lexeme]

    def shared_states(self) -> list[tuple[bytes, int, int]]:
        """(key, lexeme, state) of every state whose classes :meth:`_classify` looks up
        among the shared ones (dense, with a small future), one per key: what
        ``runtime.json_standard`` keeps of a grammar."""
        tt, found = self.token_table, {}
        for k, (table, _) in enumerate(self.sink_tables):
            for q in range(table.shape[0] - 1):
                if first_tokens(tt, table, q) * self.SPARSE_SHARE < len(tt.sorted_bytes):
                    continue
                key = self._shared_key(k, q)
                if key is not None:
                    found.setdefault(key, (key, k, q))
        return list(found.values())

    def _classify_here(self, lexeme: int, state: int, alive: np.ndarray, n_alive: int) -> LexemeTokens:
        """The vocabulary classified from one dense lexeme state (``alive``: its first
        bytes, which start ``n_alive`` tokens): from a recently classified
        state that agrees with it on every string as long as most tokens (see
        ``ByteDFA.agreement_depth``), only the longer tokens are walked; otherwise the
        whole vocabulary is. Candidates: recent states of the same lexeme, and of other
        lexemes with the same follow bytes (exits depend on them) whose classes carry no
        exits dropped as hopeless (:meth:`precompute`; those depend on which lexemes
        follow), unless the same lexemes follow both. Failing that, a recent state of the
        same lexeme that goes the same way on most first bytes is walked side by side
        with this one (:meth:`_pair_candidate`)."""
        tt = self.token_table
        table, acc = self.sink_tables[lexeme]
        follow = self.follow_masks[lexeme]
        followers = self.tables.follow_lexemes
        candidates_same = tuple(self._recent.get(lexeme, ()))
        candidates = [(lexeme, q) for q in candidates_same]
        follow_bytes, filtered = self.tables.follow_bytes, self._filtered
        # states of other lexemes: the last classified, and those that look the same one
        # byte ahead (equal states do: the value body of two key-value lexemes)
        row = table[state]
        ahead = (alive.view(np.uint8) | (acc[row].view(np.uint8) << 1)).tobytes() + bytes((int(acc[state]),))
        others = tuple(self._recent_any) + tuple(self._by_ahead.get(ahead, ()))
        candidates += [(k, q) for k, q in dict.fromkeys(others) if k != lexeme and (
            followers[k] == followers[lexeme]
            or follow_bytes[k] == follow_bytes[lexeme] and (k, q) not in filtered)]
        with self._lock:
            found = self._by_ahead.get(ahead)
            if found is None:
                if len(self._by_ahead) >= 4096:
                    self._by_ahead = {}  # a reader holding the old dict still reads correct values
                found = self._by_ahead[ahead] = deque(maxlen=self.NEIGHBORS)
            found.appendleft((lexeme, state))
        depth, near = -1, None
        for k, q in candidates:
            d = self.agreement(k, q, lexeme, state)
            if d > depth:
                depth, near = d, (k, q)
                if d >= self.agreement_cap:
                    break  # none agrees deeper than the cap
        if near is not None and tt.n_longer[min(depth, tt.max_len)] <= self.NEIGHBOR_SHARE * len(tt.sorted_bytes):
            return self._classify_near(lexeme, state, self._lexeme_tokens[near], depth)
        if candidates_same and self.PAIR_WALK and _lexeme_tokens.NATIVE:
            q = self._pair_candidate(table, state, alive, n_alive, candidates_same)
            if q is not None:
                return classify_tokens_from(tt, table, acc, state, follow, q, self._lexeme_tokens[(lexeme, q)])
        return classify_tokens(tt, table, acc, state, follow, self._memos[lexeme])

    def _pair_candidate(self, table: np.ndarray, state: int, alive: np.ndarray, n_alive: int,
                        candidates) -> int | None:
        """A recent state of the same lexeme to classify ``state`` from, walking the two
        side by side (``classify_tokens_from``): one that goes to the same state as
        ``state`` on the first byte of at least half the tokens ``state`` keeps alive, so
        that the walk of most tokens stops there (a key automaton inside one of the
        excluded names and one past them, both back in the plain string body after a
        byte). None when no candidate qualifies."""
        sizes = self._first_sizes
        row = table[state]
        best, found = n_alive // 2, None
        for q in candidates:
            met = int(sizes[alive & (table[q] == row)].sum())
            if met >= best:
                best, found = met, q
        return found

    def agreement(self, k1: int, q1: int, k2: int, q2: int) -> int:
        """How deep state ``q1`` of lexeme ``k1`` and ``q2`` of ``k2`` agree (every string of
        at most that many bytes, up to ``agreement_cap``, is alive / accepted from both
        or from neither; ``ByteDFA.agreement_depth``), memoized."""
        if (k1, q1) > (k2, q2):  # symmetric: one entry per pair
            k1, q1, k2, q2 = k2, q2, k1, q1
        key = (k1, q1, k2, q2)
        d = self._agreement.get(key)
        if d is None:
            dfas = self.tables.lex_dfas
            probe = self._probes.get((k1, k2))
            if probe is None:
                probe = self._probes[(k1, k2)] = probe_bytes(dfas[k1], dfas[k2])
            d = dfas[k1].agreement_depth(q1, q2, self.agreement_cap, other=dfas[k2], probe=probe)
            if len(self._agreement) >= 100_000:
                self._agreement = {}  # a reader holding the old dict still reads correct values
            self._agreement[key] = d
        return d

    def _classify_near(self, lexeme: int, state: int, near: LexemeTokens, depth: int) -> LexemeTokens:
        """``near`` classified a state that agrees with ``state`` on all strings of at most
        ``depth`` bytes: it stands for the tokens that short; the others are walked."""
        tt = self.token_table
        long, short_ids, short_ranks = tt.longer_than(depth)
        if not long.size:
            return near
        table, acc = self.sink_tables[lexeme]
        alive_end, may_end = run_suffixes(tt, table, acc, self.follow_masks[lexeme], state, long, 0)
        inside = near.inside & short_ids
        set_bits(inside, tt.rank_to_id[long[alive_end]])
        exits = near.exits & short_ranks
        set_bits(exits, long[may_end & ~alive_end])
        return LexemeTokens(inside=inside, exits=exits, n_exits=bitmask.count(exits))

    #: whether exit tokens are decided by the lexemes that start after their lexeme ends,
    #: without the parser's walk, where they can be (see :meth:`exits_after`; off: the
    #: walk decides every exit token)
    EXITS_BY_STARTS = True
    #: a scan of a lexeme that is not ignored goes through :meth:`exits_after` when its
    #: state has at least this many exit tokens (an ignored lexeme's states are classified
    #: at compile time). The classes cost a pass over the exits plus ~0.5 ms of numpy on
    #: the visit that makes them: with fewer exits, a walk is about as cheap and the
    #: visits that make classes stand out in the tail (the shipped Python grammar with
    #: SmolLM2's 49k tokens: mask p99 1.2 -> 1.7 ms at 4,096; unchanged at this bound, while
    #: with Llama 3's 128k tokens its p50 goes 0.73 -> 0.54 ms)
    EXITS_BY_STARTS_MIN = 32768
    #: ... and when each of the first two walks of its exits did at least 1 / EXIT_WALK_SHARE
    #: units of work (``Matcher.fill_bitmask(max_work=)``'s units) per exit token. The
    #: classes read every exit token's rest from each lexeme that may start in it, ~50 ns
    #: per token; a walk costs far less once the first one has cached its passes: at the
    #: end of a long string's 64-character block, 109,000 exit tokens cross into the next
    #: block, the first walk did 430,000 units, the next ones ~3,000 (0.1 ms), and the
    #: classes took 5 ms (Llama 3, JSONSchemaBench Github_easy/o9773, once per block state:
    #: that case's slowest masks, 7-13 ms)
    EXIT_WALK_SHARE = 2
    #: the walks noted before classes are made (the first caches passes the next ones use)
    EXIT_WALKS_SEEN = 2
    #: ... and when making them is foreseen to cost at most this much: a byte read by a
    #: lexeme started on an exit token's rest is one unit (~2.5 ns), a token
    #: EXIT_CLASS_TOKEN_UNITS more; a lexeme's reads per exit token are those of the first
    #: classes made for one of its states (``exit_classes`` counts them). Past it, the mask
    #: that made them would cost several walks at once: a long string's block end with
    #: 120,000 exit tokens whose rests 12 lexemes may start on (42 reads per token) took 14
    #: ms, where each walk took ~3 ms (Llama 3, JSONSchemaBench Github_hard/o13152); with 4
    #: lexemes (14 reads per token), 7 ms (Github_easy/o9773); a Python name's state with
    #: 49,000 exit tokens (8.6 reads each), 2.2 ms
    EXIT_CLASS_WORK = 2_000_000
    EXIT_CLASS_TOKEN_UNITS = 12
    #: before the first classes of a lexeme, its reads per exit token are measured on this
    #: many of the state's exit tokens, spread over them (~0.1 ms): a long string's block
    #: end whose 57,000 exit tokens take 42 reads each is refused (its classes took 5.5 ms,
    #: 9-10 ms in a slow hour), one with 14 reads each is not
    EXIT_READS_SAMPLE = 1024

    def decides_exits(self) -> bool:
        """Whether :meth:`exits_after` is used (the native tables are built)."""
        return bool(self.EXITS_BY_STARTS and self.tables.native is not None)

    def exits_after_pays(self, lexeme: int, state: int, count: bool = True) -> bool:
        """Whether a scan of this lexeme state should go through :meth:`exits_after`: an
        ignored lexeme's always (classified at compile time), another's when it has at
        least :attr:`EXITS_BY_STARTS_MIN` exits, after two visits whose walks were not much
        cheaper than the classes (:attr:`EXIT_WALK_SHARE`, noted by :meth:`note_exit_walk`):
        those visits walk them as before, and the classes serve every later visit; never
        when making them is foreseen to cost more than :attr:`EXIT_CLASS_WORK`.
        ``count=False`` (a mask under a work bound) does not count this visit, so that a
        bounded mask stops alike when repeated."""
        if self.tables.is_ignore[lexeme] or (lexeme, state) in self._exit_classes_of:
            return True
        n_exits = self.lexeme_tokens(lexeme, state).n_exits
        if not count or n_exits < self.EXITS_BY_STARTS_MIN:
            return False
        with self._lock:
            walks, work = self._exit_visits.setdefault((lexeme, state), (0, 0))
        if walks < self.EXIT_WALKS_SEEN or work * self.EXIT_WALK_SHARE < n_exits:
            return False
        per_exit = self._exit_reads.get(lexeme)
        if per_exit is None:
            per_exit = self._sample_reads(lexeme, state)
        return n_exits * (self.EXIT_CLASS_TOKEN_UNITS + per_exit) <= self.EXIT_CLASS_WORK

    def _sample_reads(self, lexeme: int, state: int) -> float:
        """The reads per exit token of a lexeme, measured on :attr:`EXIT_READS_SAMPLE` of
        this state's exit tokens, spread over them (kept as the lexeme's, as the first
        classes' would be)."""
        ranks = self.lexeme_tokens(lexeme, state).exit_ranks()
        sample = ranks[:: max(1, len(ranks) // self.EXIT_READS_SAMPLE)]
        _, _, reads = self._native_exit_classes(lexeme, state, sample, True)
        with self._lock:
            return self._exit_reads.setdefault(lexeme, reads / max(1, len(sample)))

    def note_exit_walk(self, scans, work: int) -> None:
        """After a mask's walk: ``work``, that walk's units of work, for each of these
        (lexeme, state) scans that :meth:`exits_after_pays` was asked about (a mask that
        found its exits cached does not call this)."""
        with self._lock:
            for key in scans:
                seen = self._exit_visits.get(key)
                if seen is not None and seen[0] < self.EXIT_WALKS_SEEN:
                    self._exit_visits[key] = (seen[0] + 1, work if not seen[0] else min(work, seen[1]))

    def precompute_ignored(self) -> None:
        """Classify the states of the ignored lexemes now, and their exit tokens by what
        their rests stay inside (:meth:`exits_after`): whitespace is met at the first
        masks of nearly every text, where this would cost a few milliseconds."""
        if not self.decides_exits():
            return
        for k in self.tables.ignore_lexemes:
            for q in range(self.tables.lex_dfas[k].n_states):
                if self.lexeme_tokens(k, q).n_exits:
                    self._exit_classes(k, q)

    #: most (lexeme, state, lexemes) entries kept by :meth:`exits_after`
    EXITS_AFTER_ENTRIES = 4096
    #: a class of at least this many exit tokens is kept as masks (OR-ed whole)
    BIG_CLASS = 1024

    def exits_after(self, lexeme: int, state: int, starts: bytes) -> tuple[np.ndarray, np.ndarray]:
        """The exit tokens of ``lexeme`` in ``state`` decided without the parser where,
        once it has ended, the lexemes ``starts`` start (a bit per lexeme, in uint64 words:
        ``Tables.started_after``): (the tokens taken, packed by token id; the exits left
        undecided, packed by rank like ``LexemeTokens.exits``). Needs the native tables
        (:meth:`decides_exits`).

        Wherever inside a token the lexeme ends, the parser completes it the same way (the
        items waiting on it in the sets it started from; for an ignored lexeme, those
        sets' items resumed), so the same lexemes start there: ``starts``, which the
        caller gets from the parser (``Tables.started_after``). The rest of the token is
        read from those lexemes' starts: if one reads it to its end alive, the token is
        taken (no parser step); if each dies in it without ending before a byte that may
        follow it, no parse goes on this way. Only a rest that ends one of them is left
        to the parser's walk. So the answer depends on the lexeme state and ``starts``
        alone: whitespace before a word of a programming language is most of a large
        vocabulary, which the walk would otherwise go through at every mask."""
        key = (lexeme, state, starts)
        found = self._exits_after.get(key)
        if found is not None:
            return found
        within = int.from_bytes(starts, "little") & ~self.tables.follow_lexemes[lexeme] == 0
        ranks, class_of, class_bits, big = self._exit_classes(lexeme, state, within)
        tt = self.token_table
        n_words = class_bits.shape[1] // 2
        wanted = np.frombuffer(starts, dtype=np.uint64)
        taken = (class_bits[:, :n_words] & wanted).any(axis=1)
        open_ = ~taken & (class_bits[:, n_words:] & wanted).any(axis=1)
        words = np.zeros(tt.n_words, dtype=np.uint32)
        undecided = np.zeros(tt.n_rank_words, dtype=np.uint32)
        for c, (id_words, rank_words) in big.items():
            if taken[c]:
                words |= id_words
            elif open_[c]:
                undecided |= rank_words
        set_bits(words, ranks[taken[class_of]], tt.rank_to_id)
        set_bits(undecided, ranks[open_[class_of]])
        found = (words, undecided)
        with self._lock:
            if len(self._exits_after) >= self.EXITS_AFTER_ENTRIES:
                self._exits_after = {}  # a reader holding the old dict still reads correct values
            self._exits_after[key] = found
        return found

    def _exit_classes(self, lexeme: int, state: int, within: bool = True):
        """The exit tokens of a lexeme state (ranks), each one's class (an index into the
        classes: uint64 words per class, the lexemes that read its rest alive, then those
        that end inside it; see ``_earley.Tables.exit_classes``). ``within``: only the
        lexemes that may follow this one anywhere (``ParserTables.follow_lexemes``) are
        read, which hold every set of lexemes the parser starts after it (a long string's
        block is followed by the next block or its tail, not by the grammar's hundred other
        lexemes that start with a letter); else all are."""
        key = (lexeme, state) if within else (lexeme, state, "all")
        found = self._exit_classes_of.get(key)
        if found is None:
            tt = self.token_table
            lt = self.lexeme_tokens(lexeme, state)
            ranks = lt.exit_ranks()
            lex_words = (len(self.tables.lex_dfas) + 63) // 64   # uint64 words of a set of lexemes
            class_of, bits, reads = self._native_exit_classes(lexeme, state, ranks, within)
            if len(ranks):
                with self._lock:
                    self._exit_reads.setdefault(lexeme, reads / len(ranks))
            class_of = np.frombuffer(class_of, dtype=np.int32)
            class_bits = np.frombuffer(bits, dtype=np.uint64).reshape(-1, 2 * lex_words)
            # the classes of many tokens (a space and a word) as masks, OR-ed whole; the
            # other tokens are set one by one
            sizes = np.bincount(class_of, minlength=len(class_bits))
            is_big = sizes >= self.BIG_CLASS
            big = {}
            for c in np.flatnonzero(is_big):
                members = ranks[class_of == c]
                id_words = np.zeros(tt.n_words, dtype=np.uint32)
                set_bits(id_words, members, tt.rank_to_id)
                rank_words = np.zeros(tt.n_rank_words, dtype=np.uint32)
                set_bits(rank_words, members)
                big[int(c)] = (id_words, rank_words)
            small = ~is_big[class_of]
            found = (ranks[small], class_of[small], class_bits, big)
            with self._lock:
                self._exit_classes_of[key] = found
        return found

    def _native_exit_classes(self, lexeme: int, state: int, ranks: np.ndarray, within: bool):
        """``Tables.exit_classes`` of these exit tokens (see :meth:`_exit_classes`)."""
        native = self.tables.native
        if native is None:
            raise RuntimeError("gramgen's native recogniser (gramgen.automata._earley) is not built")
        tt = self.token_table
        lex_words = (len(self.tables.lex_dfas) + 63) // 64   # uint64 words of a set of lexemes
        args = (self.tables.follow_lexemes[lexeme].to_bytes(8 * lex_words, "little"),) if within else ()
        return native.exit_classes(lexeme, state, ranks, tt.blob, tt.offsets, *args)

    def _drop_hopeless_exits(self, found: LexemeTokens, lexeme: int, state: int) -> LexemeTokens:
        """Exit tokens whose rest cannot be cut into lexemes that may follow one another
        are rejected in every context (see ``automata.lexer_automaton``).

        Only for states classified at compile time (:meth:`precompute`): there the bigram
        lexer's pass is paid once and spares every later mask walks of those tokens. A
        state classified on the mask path is not filtered: the pass would land on the same
        mask that walks its exits, and it cost more than it saved (bench, JSON Schema,
        Python and Lark grammars: mask p99 8–18 % and first masks 33–49 % lower without
        it). The masks are the same either way: the parser walk rejects those tokens too."""
        tt = self.token_table
        ranks = found.exit_ranks()
        alive = self.lexer.alive(tt, self.lexer.state_of([(lexeme, state)]), ranks)
        if alive.all():
            return found
        return found.with_exits(ranks[alive])

    def precompute(self) -> None:
        """Classify the vocabulary for every lexeme state now instead of on first use."""
        for k, dfa in enumerate(self.tables.lex_dfas):
            for q in range(dfa.n_states):
                found = self.lexeme_tokens(k, q)
                with self._lock:
                    # every state classified here may carry dropped exits, its own or
                    # (reused for its short tokens) those of a state of its lexeme
                    self._filtered.add((k, q))
                if found.n_exits:
                    filtered = self._drop_hopeless_exits(found, k, q)
                    with self._lock:
                        self._lexeme_tokens[(k, q)] = filtered


class _LazyMemos(dict):
    """lexeme -> its chain memo, made on first use (most lexemes never need one)."""

    def __init__(self, sink_tables: list):
        super().__init__()
        self._tables = sink_tables

    def __missing__(self, lexeme: int):
        # (two threads may both make one; either is fine, the loser's is dropped)
        return self.setdefault(lexeme, chain_memo(self._tables[lexeme][0]))
