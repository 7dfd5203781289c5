"""The :class:`CompiledGrammar`: a grammar bound to a vocabulary (made by :func:`gramgen.compile`)."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from .._lru import LRU
from ..automata import bitmask
from ..automata.alphabet import TokenFilter, language_bytes
from ..automata.bitmask import set_bits
from ..automata.dfa import canonical_form, compile_lexemes, probe_bytes
from ..automata.earley import Interner, ParserTables
from ..automata import lexeme_tokens as _lexeme_tokens
from ..automata.lexeme_tokens import (LexemeTokens, chain_memo, classify_tokens, classify_tokens_excepted,
                                      classify_tokens_from, run_suffixes)
from ..automata.lexer_automaton import LexerAutomaton
from ..automata.token_table import TokenTable, token_table_for
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError
from ..grammar.grammar import Grammar
from .document import Document
from .indenter import IndentedMatcher
from .matcher import Matcher


class CompiledGrammar:
    """A grammar bound to a vocabulary. Immutable to its users and safe to share.

    Holds the parser tables, the per-(lexeme, state) token classes (computed on first use)
    and a bounded cache of masks keyed by parser-state signature. Caches only ever hold
    values that are a pure function of their key, so concurrent matchers can share them.
    """

    #: ``precompute=None`` classifies the vocabulary for every lexeme state at compile time
    #: when the lexemes have at most this many DFA states in all (JSON has 56): one pass over
    #: the vocabulary each, paid once instead of on the first masks of a generation
    AUTO_PRECOMPUTE_STATES = 64

    #: a lexeme state reuses the classification of a recent state (one of the last
    #: NEIGHBORS classified of its lexeme, or of another lexeme with the same follow bytes,
    #: see :meth:`_classify`) when at most this share of the tokens is longer than the
    #: depth to which the two agree; only those are walked
    NEIGHBOR_SHARE = 0.1
    NEIGHBORS = 4
    #: a state whose first bytes start fewer than 1 / SPARSE_SHARE of the tokens is
    #: classified by the full walk (it visits only those) without looking for a neighbour
    SPARSE_SHARE = 16

    #: a state no recent state agrees with deeply enough is classified by walking the
    #: vocabulary from it and from a recent state of its lexeme side by side (see
    #: :meth:`_classify`; needs the native kernel)
    PAIR_WALK = True

    #: masks kept per parser context of the positions inside lexemes (see
    #: :meth:`inside_neighbours`; 0 turns the reuse off)
    INSIDE_NEIGHBORS = 4

    def __init__(self, grammar: Grammar, vocab, options: "CompileOptions"):
        """Made by :func:`gramgen.compile`: ``options`` is a validated
        :class:`~gramgen.runtime.CompileOptions` (read here by its fields only)."""
        # (options by their fields: compile.py imports this module)
        if not (isinstance(grammar, Grammar) and isinstance(vocab, Vocabulary)
                and all(hasattr(options, f) for f in ("precompute", "max_dfa_states", "mask_cache_size"))):
            raise ConfigurationError("make a CompiledGrammar with gramgen.compile(grammar, vocab, options), "
                                     f"not CompiledGrammar({type(grammar).__name__}, {type(vocab).__name__}, "
                                     f"{type(options).__name__})")
        self.grammar = grammar
        self.vocab = vocab
        self.options = options
        #: the grammar the parser runs: ``grammar.ir``, with lexemes too big for one DFA
        #: rewritten as rules over smaller ones (see :func:`~gramgen.automata.dfa.compile_lexemes`)
        self.ir, dfas = compile_lexemes(grammar.ir, max_states=options.max_dfa_states)
        self.tables = ParserTables(self.ir, dfas)
        self.token_table: TokenTable = token_table_for(vocab)
        self._first_sizes = np.diff(self.token_table.first_start)  # tokens per first byte
        self.vocab_size = vocab.size
        self.eos_ids = np.array(sorted(vocab.eos_token_ids), dtype=np.int64)
        #: per lexeme: its DFA with an explicit sink state, and bool[256] of the bytes that
        #: may follow it (see ParserTables.follow_bytes); shared by classification and walks
        self.sink_tables = [d.sink_table() for d in self.tables.lex_dfas]
        #: per lexeme, what the native walk learned of its DFA states (lexeme_tokens.chain_memo)
        self._memos = _LazyMemos(self.sink_tables)
        self.follow_masks = [np.unpackbits(np.frombuffer(f.to_bytes(32, "little"), dtype=np.uint8),
                                      bitorder="little").astype(bool)
                        for f in self.tables.follow_bytes]
        self._follow_key = [m.tobytes() for m in self.follow_masks]
        self.lexer = LexerAutomaton(self.tables)
        self._lexeme_tokens: dict[tuple[int, int], LexemeTokens] = {}
        self._recent: dict[int, deque] = {}  # lexeme -> its states classified last
        self._recent_any: deque = deque(maxlen=4 * self.NEIGHBORS)  # (lexeme, state) classified last
        self._filtered: set = set()  # (lexeme, state) whose hopeless exits were dropped
        #: dense states by what each byte leads to (dead / alive / accepting): candidates
        #: for reuse across lexemes beyond the last classified (see :meth:`_classify`)
        self._by_ahead: dict[bytes, deque] = {}
        #: parser-state signature -> its packed mask (read and written by the matchers)
        self.mask_cache: LRU = LRU(options.mask_cache_size)
        #: parser context of a position inside lexemes -> its recent (lexeme states, mask)
        self._inside_masks: LRU = LRU(max(16, options.mask_cache_size // (2 * max(1, self.INSIDE_NEIGHBORS))))
        self._agreement: dict = {}  # (lexeme, state, lexeme, state) -> agreement depth
        self._probes: dict = {}  # (lexeme, lexeme) -> the bytes their agreement tries
        #: exit walks per horizon (see Matcher._exit_words), first in first out
        self._exit_cache: LRU = LRU(options.mask_cache_size)
        #: context-free parts of exit walks (lexeme passes, in-lexeme jumps), keyed by
        #: lexeme states, tokens and depth (see Matcher._walk_exits)
        self.pass_cache: dict = {}
        self._intern = Interner()
        self._lock = threading.Lock()
        self._documents: list = []   # most recently used last (see matcher_after)
        self._token_filter: TokenFilter | None = None   # made on first use
        self._initial = self.tables.initial_set()
        self._initial.sig = self.tables.signature([self._initial], 0, self._intern)
        precompute = options.precompute
        if precompute is None:
            precompute = sum(d.n_states for d in self.tables.lex_dfas) <= self.AUTO_PRECOMPUTE_STATES
        if precompute:
            self.precompute()

    def matcher(self) -> Matcher:
        """A fresh :class:`~gramgen.Matcher` at the start of the language (an
        :class:`~gramgen.runtime.indenter.IndentedMatcher` for a grammar with lark's Python
        indenter)."""
        if self.grammar.ir.meta.get("indenter"):
            return IndentedMatcher(self)
        return Matcher(self)

    #: documents kept for :meth:`matcher_after`
    DOCUMENTS = 8

    def matcher_after(self, text: str | bytes) -> Matcher:
        """A fresh matcher advanced over ``text`` (the start of the document the output
        continues, e.g. the code before the cursor); :class:`~gramgen.TextRejected` where
        no word of the language starts with it. The last :attr:`DOCUMENTS` texts are kept
        as :class:`~gramgen.Document` s: a text that shares a start with one of them (the
        same file after an edit) is advanced only from the last line start they share."""
        data = text.encode("utf-8", errors="surrogatepass") if isinstance(text, str) else text
        with self._lock:
            docs = self._documents
            shared, best = max(((d.common_prefix(data), d) for d in docs), key=lambda p: p[0],
                               default=(0, None))
            if best is None or shared == 0 and len(docs) < self.DOCUMENTS:
                best = Document(self)
            else:
                docs.remove(best)
            docs.append(best)
            del docs[:-self.DOCUMENTS]
        return best.update(data)

    # -- tokens ruled out before any check (samplers that check one token at a time) --------

    @property
    def token_filter(self) -> TokenFilter:
        """The grammar's byte alphabet and the tokens' first bytes as vectors over the
        vocabulary (see ``automata.alphabet``), made on first use."""
        found = self._token_filter
        if found is None:
            found = TokenFilter(self.token_table, language_bytes(self.tables.lex_dfas), self.eos_ids)
            with self._lock:
                if self._token_filter is None:
                    self._token_filter = found
                found = self._token_filter
        return found

    def possible_tokens(self, matcher: Matcher) -> np.ndarray | None:
        """bool[vocab.size], not to be written to: a superset of the tokens ``matcher.check``
        allows in its current state, found without checking any (EOS ids always in). The
        cached mask of the state where there is one; else the tokens in the grammar's
        alphabet whose first byte can come next. None for an :class:`IndentedMatcher` (its
        scanner rewrites the text the chart sees)."""
        if type(matcher) is not Matcher or matcher._cg is not self:
            return None
        if matcher._terminated:
            return np.zeros(self.vocab_size, dtype=bool)
        cur = matcher._chart[-1]
        words = self.mask_cache.peek(cur.sig)
        if words is not None:
            out = bitmask.unpack(words, self.vocab_size).copy()
            out[self.token_filter.eos_ids] = True
            return out
        return self.token_filter.possible(self.tables.allowed_bytes(cur))

    # -- caches shared by matchers ---------------------------------------------------------

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
        among the classes of every grammar compiled for this vocabulary in this process:
        equal futures (``dfa.canonical_form``) and follow bytes classify alike, whichever
        lexeme and grammar they come from. Else a state whose chain of like states takes
        all but a few tokens whole walks only those (``classify_tokens_excepted``), and any
        other see :meth:`_classify_here`. A state whose first bytes start few tokens is
        walked in full at once."""
        table, acc = self.sink_tables[lexeme]
        tt = self.token_table
        alive = table[state] != table.shape[0] - 1
        n_alive = int(self._first_sizes[alive].sum())
        if n_alive * self.SPARSE_SHARE < len(tt.sorted_bytes):
            # few tokens start with a byte this state takes: the full walk visits only
            # those, cheaper than looking for a neighbour
            return classify_tokens(tt, table, acc, state, self.follow_masks[lexeme], self._memos[lexeme])
        key = None
        if self.SHARED_STATES:
            key = canonical_form(table, acc, state, self.SHARED_STATES)
            if key is not None:
                key += self._follow_key[lexeme]
                found = tt.shared_classes.get(key)
                if found is not None:
                    return found
        # a string body walks only its few exceptions, cheaper than finding a neighbour
        found = classify_tokens_excepted(tt, table, acc, state, self.follow_masks[lexeme], self._memos[lexeme])
        if found is None:
            found = self._classify_here(lexeme, state, alive, n_alive)
        if key is not None and not self._filtered:
            # (after precompute, classes reused from a state with dropped exits may lack
            # exits that hold in another grammar: those are not shared)
            tt.shared_classes.put(key, found)
        return found

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
        at most that many bytes, up to the longest token, is alive / accepted from both
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
            d = dfas[k1].agreement_depth(q1, q2, self.token_table.max_len, other=dfas[k2], probe=probe)
            if len(self._agreement) >= 100_000:
                self._agreement = {}  # a reader holding the old dict still reads correct values
            self._agreement[key] = d
        return d

    def inside_neighbours(self, context) -> tuple:
        """The (lexeme states, mask) of recent positions inside lexemes with this parser
        context: the same lexemes, started where the chart has equal signatures. Such a
        position's future differs only through the lexeme states (see
        ``Matcher._neighbour_words``)."""
        found = self._inside_masks.peek(context)
        return tuple(found) if found else ()

    def store_inside_mask(self, context, states: tuple, words: np.ndarray) -> None:
        if not self.INSIDE_NEIGHBORS:
            return
        with self._lock:
            found = self._inside_masks.get(context)  # now the most recent
            if found is None:
                # the masks are those of the mask cache (the same arrays) while it holds them
                found = deque(maxlen=self.INSIDE_NEIGHBORS)
                self._inside_masks.put(context, found)
            if all(st != states for st, _ in found):
                found.appendleft((states, words))

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
        ranks = np.flatnonzero(bitmask.unpack(found.exits, len(tt.sorted_bytes)))
        alive = self.lexer.alive(tt, self.lexer.state_of([(lexeme, state)]), ranks)
        if alive.all():
            return found
        keep = np.zeros(len(tt.sorted_bytes), dtype=bool)
        keep[ranks[alive]] = True
        return LexemeTokens(inside=found.inside, exits=bitmask.pack(keep), n_exits=int(alive.sum()))

    def store_pass(self, key, value) -> None:
        if len(self.pass_cache) >= 200_000:
            self.pass_cache = {}  # readers holding the old dict still read correct values
        self.pass_cache[key] = value

    def cached_exits(self, key):
        return self._exit_cache.peek(key)  # (a hit does not make the entry recent)

    def store_exits(self, key, words: np.ndarray) -> None:
        self._exit_cache.put(key, words)

    def intern(self) -> Interner:
        return self._intern

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


def possible_tokens(matcher) -> np.ndarray | None:
    """:meth:`CompiledGrammar.possible_tokens` of the matcher's own compiled grammar (None
    for anything but a plain :class:`Matcher`)."""
    if type(matcher) is not Matcher:
        return None
    return matcher._cg.possible_tokens(matcher)


class _LazyMemos(dict):
    """lexeme -> its chain memo, made on first use (most lexemes never need one)."""

    def __init__(self, sink_tables: list):
        super().__init__()
        self._tables = sink_tables

    def __missing__(self, lexeme: int):
        # (two threads may both make one; either is fine, the loser's is dropped)
        return self.setdefault(lexeme, chain_memo(self._tables[lexeme][0]))

