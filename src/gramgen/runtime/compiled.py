"""The :class:`CompiledGrammar`: a grammar bound to a vocabulary (made by :func:`gramgen.compile`)."""

from __future__ import annotations

import dataclasses
import threading
from collections import deque

import numpy as np

from .._lru import LRU
from ..automata import bitmask
from ..automata.alphabet import TokenFilter, language_bytes
from ..automata.dfa import compile_lexemes, untrack_trees
from ..automata.earley import Interner, ParserTables
from ..automata.lexeme_tokens import LexemeTokens
from ..automata.split_automata import SplitAutomata
from ..automata.token_classes import TokenClasses
from ..automata.token_table import TokenTable, token_table_for
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError
from ..grammar.grammar import Grammar
from ..grammar.split import SPLIT_AUTOMATA
from .document import Document
from .indenter import IndentedMatcher
from .json_standard import ensure_standard_classes
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
        self.token_table: TokenTable = token_table_for(vocab)
        # (a mask reads at most the longest token ahead: signatures need not tell apart
        # what differs only beyond it)
        self.tables = ParserTables(self.ir, dfas, window=self.token_table.max_len)
        untrack_trees(grammar.ir, self.ir)
        #: the automata of lexemes split into rules, where masks reuse a neighbour's (None
        #: without any; see ``Matcher._automaton_words``)
        self.split_automata = (SplitAutomata(self.tables, self.ir.meta) or None) if SPLIT_AUTOMATA in self.ir.meta else None
        self._automaton_exits: dict = {}
        self.vocab_size = vocab.size
        self.eos_ids = np.array(sorted(vocab.eos_token_ids), dtype=np.int64)
        if self.split_automata is not None:
            for x, usable in enumerate(self.split_automata.usable):
                if usable:
                    # (~1 ms at 128k tokens, and ~10 ms for a 16k-state automaton read by
                    # characters: not in a mask)
                    self.automaton_exit_tokens(x)
                    self.split_automata.by_characters(x, self.token_table)
        #: per lexeme: its DFA with an explicit sink state, and bool[256] of the bytes that
        #: may follow it (see ParserTables.follow_bytes); shared by classification and walks
        self.sink_tables = [d.sink_table() for d in self.tables.lex_dfas]
        follow = np.unpackbits(np.frombuffer(self.tables.follow_blob, dtype=np.uint8).reshape(-1, 32), axis=1,
                               bitorder="little").view(bool)
        follow.flags.writeable = False
        self.follow_masks = list(follow)
        #: the vocabulary classified per lexeme state, on first use
        self.classes = TokenClasses(self.tables, self.token_table, self.sink_tables, self.follow_masks)
        layout = grammar.ir.meta.get("json_layout")
        if layout is not None:
            # the classes every JSON Schema grammar of this layout shares, once per vocabulary
            ensure_standard_classes(self.token_table, vocab, layout,
                                    lambda g: CompiledGrammar(g, vocab, dataclasses.replace(options, precompute=False)))
        #: parser-state signature -> its packed mask (read and written by the matchers)
        self.mask_cache: LRU = LRU(options.mask_cache_size)
        #: parser context of a position inside lexemes -> its recent (lexeme states, mask)
        self._inside_masks: LRU = LRU(max(16, options.mask_cache_size // (2 * max(1, self.INSIDE_NEIGHBORS))))
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
            self.classes.precompute()
        if options.precompute is not False:
            # (the ignored lexemes' states: whitespace is met at the first masks of nearly
            # every text; with precompute=False those too are classified on first use)
            self.classes.precompute_ignored()

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
        """The vocabulary classified from state ``state`` of lexeme ``lexeme`` (see
        :class:`~gramgen.automata.token_classes.TokenClasses`)."""
        return self.classes.lexeme_tokens(lexeme, state)

    def precompute(self) -> None:
        """Classify the vocabulary for every lexeme state now instead of on first use."""
        self.classes.precompute()
        self.classes.precompute_ignored()

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

    def automaton_exit_tokens(self, automaton: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tokens that may leave a split automaton before their last byte (those with a
        byte that may follow it), packed by token id and by rank, and bool by rank."""
        found = self._automaton_exits.get(automaton)
        if found is None:
            tt = self.token_table
            leaves = ~tt.made_only_of(~_byte_set(self.split_automata.follow_bytes(automaton)))   # by rank
            by_id = np.zeros(self.vocab_size, dtype=bool)
            by_id[tt.rank_to_id[leaves]] = True
            leaves.flags.writeable = False
            found = self._automaton_exits[automaton] = (bitmask.pack(by_id), bitmask.pack(leaves), leaves)
        return found

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


def _byte_set(bits: int) -> np.ndarray:
    """A set of bytes given as an int (bit ``b`` for byte ``b``) as bool[256]."""
    return np.unpackbits(np.frombuffer(bits.to_bytes(32, "little"), dtype=np.uint8), bitorder="little").astype(bool)


def possible_tokens(matcher) -> np.ndarray | None:
    """:meth:`CompiledGrammar.possible_tokens` of the matcher's own compiled grammar (None
    for anything but a plain :class:`Matcher`)."""
    if type(matcher) is not Matcher:
        return None
    return matcher._cg.possible_tokens(matcher)
