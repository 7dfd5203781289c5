"""Compiling a grammar against a vocabulary: :func:`compile` and its :class:`CompileOptions`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from numbers import Integral

from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError
from ..grammar.grammar import Grammar
from .compiled import CompiledGrammar


@dataclass(frozen=True)
class CompileOptions:
    """How :func:`compile` builds a :class:`CompiledGrammar`; every field has a default.

    Parameters
    ----------
    precompute : bool or None, default None
        When the vocabulary is classified for each lexeme state (which tokens stay inside
        the lexeme, which may end it). True: for every state at compile time; False: for
        each state on first use, during the first masks of a generation; None: at compile
        time only when the lexemes have at most
        :attr:`CompiledGrammar.AUTO_PRECOMPUTE_STATES` DFA states in all (JSON has 56).
        The states of ``%ignore``'d lexemes, and their exit tokens by what follows them, are
        classified at compile time unless ``precompute`` is False (a few ms at 128k tokens;
        whitespace is met at the first masks of nearly every text).
    max_dfa_states : int, default 10_000
        The most states the DFA of one lexeme may have (at least 1). A lexeme that needs
        more is rewritten as rules over smaller lexemes with the same language
        (:mod:`gramgen.grammar.split`); one that cannot be split (an ignored lexeme, a
        single character class) raises :class:`~gramgen.CompileLimitError`.
    mask_cache_size : int, default 4096
        How many masks one compiled grammar keeps, keyed by parser state, least recently
        used out first (0 keeps none). The same bound applies to its cached exit walks,
        and ``mask_cache_size // 8`` (at least 16) to the parser contexts whose masks are
        reused at positions inside lexemes.

    A value of the wrong type or out of range raises :class:`~gramgen.errors.ConfigurationError`
    naming the option.
    """

    precompute: bool | None = None
    max_dfa_states: int = 10_000
    mask_cache_size: int = 4096

    def __post_init__(self) -> None:
        if self.precompute is not None and not isinstance(self.precompute, bool):
            raise ConfigurationError(f"precompute must be True, False or None, not {self.precompute!r}")
        object.__setattr__(self, "max_dfa_states", _count("max_dfa_states", self.max_dfa_states, 1))
        object.__setattr__(self, "mask_cache_size", _count("mask_cache_size", self.mask_cache_size, 0))


def _count(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
        raise ConfigurationError(f"{name} must be an int of at least {least}, not {value!r}")
    return int(value)


class _FromOptions:
    """The default of :func:`compile`'s keyword arguments: take the value of ``options``."""

    def __repr__(self) -> str:
        return "<from options>"


_FROM_OPTIONS = _FromOptions()


def compile(grammar: Grammar, vocab, options: CompileOptions | None = None, *,
            precompute: bool | None | _FromOptions = _FROM_OPTIONS,
            max_dfa_states: int | _FromOptions = _FROM_OPTIONS,
            mask_cache_size: int | _FromOptions = _FROM_OPTIONS) -> CompiledGrammar:
    """Compile ``grammar`` for ``vocab`` (a :class:`~gramgen.Vocabulary`).

    ``options``: a :class:`CompileOptions` (its defaults when None). The keyword arguments,
    documented there, override its fields one by one:
    ``compile(g, vocab, precompute=True)`` is ``compile(g, vocab, CompileOptions(precompute=True))``.

    Raises :class:`~gramgen.errors.ConfigurationError` when ``grammar`` is not a
    :class:`~gramgen.Grammar`, ``vocab`` not a :class:`~gramgen.Vocabulary`, ``options``
    not a :class:`CompileOptions` or an option value is invalid, :class:`~gramgen.GrammarError` when a lexeme cannot be compiled and
    :class:`~gramgen.CompileLimitError` when a lexeme's DFA exceeds ``max_dfa_states`` and
    it cannot be split into rules.
    """
    if not isinstance(grammar, Grammar):
        raise ConfigurationError(f"compile() expects a gramgen.Grammar, not {type(grammar).__name__}")
    if not isinstance(vocab, Vocabulary):
        raise ConfigurationError(f"compile() expects a gramgen.Vocabulary (e.g. Vocabulary.from_huggingface"
                                 f"(tokenizer)), not {type(vocab).__name__}")
    if options is None:
        options = CompileOptions()
    elif not isinstance(options, CompileOptions):
        raise ConfigurationError(f"options must be a CompileOptions, not {type(options).__name__}")
    overrides = {name: value for name, value in (("precompute", precompute), ("max_dfa_states", max_dfa_states),
                                                 ("mask_cache_size", mask_cache_size))
                 if value is not _FROM_OPTIONS}
    if overrides:
        options = dataclasses.replace(options, **overrides)
    return CompiledGrammar(grammar, vocab, options)
