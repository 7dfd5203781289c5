"""Self-checks for grammars, matchers and constraints, yours included.

::

    accepts(grammar, text)                 does the grammar accept this whole text?
    brute_force_mask(matcher)              the exact mask, found by trying every token
    assert_masks_exact(matcher, ...)       mask() equals brute force along a random walk
    assert_consistent(constraint, ...)     check / mask / advance / fork / is_complete agree

The ``assert_*`` functions raise :class:`AssertionError` naming the step, the token and the
property that failed, so they can be called from any test runner. A "constraint" is any
object with ``check(token) -> bool``, ``advance(token)``, ``fork()``, ``is_complete()`` and
a ``counter`` (optionally ``mask()``): the protocol the samplers use.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Iterable

import numpy as np

from .automata.vocabulary import Vocabulary
from .errors import GramgenError, TokenRejected
from .grammar import Grammar
from .runtime import CompiledGrammar
from .runtime import compile as compile_grammar

__all__ = ["accepts", "assert_consistent", "assert_masks_exact", "brute_force_mask"]

#: at most this many token ids are checked per state of a walk (a random sample beyond)
MAX_CHECKED = 4096
#: per state, this many allowed and this many rejected tokens are also advanced on a fork
ADVANCE_SAMPLE = 16

_BYTES = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256], kind="bytes")
_byte_grammars: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def accepts(grammar: Grammar | CompiledGrammar, text: str | bytes) -> bool:
    """Whether ``text`` (UTF-8 if a str) is a complete word of the grammar's language.

    Runs a matcher over a vocabulary of the 256 single bytes, so the answer does not
    depend on any tokenizer; a :class:`CompiledGrammar` is judged by its grammar.
    """
    if isinstance(grammar, CompiledGrammar):
        grammar = grammar.grammar
    if not isinstance(grammar, Grammar):
        raise TypeError("accepts() expects a Grammar or CompiledGrammar, "
                        f"got {type(grammar).__name__}")
    try:
        compiled = _byte_grammars.get(grammar)
    except TypeError:  # a grammar that cannot be a weak key is compiled every time
        compiled = None
    if compiled is None:
        compiled = compile_grammar(grammar, _BYTES)
        try:
            _byte_grammars[grammar] = compiled
        except TypeError:
            pass
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    matcher = compiled.matcher()
    try:
        matcher.advance_many(list(data))
    except TokenRejected:
        return False
    return matcher.is_accepting()


def brute_force_mask(matcher, vocab: Vocabulary | None = None) -> np.ndarray:
    """The exact mask of ``matcher``'s state, one token at a time.

    A token is allowed iff advancing a fresh fork by it raises no
    :class:`~gramgen.TokenRejected`; EOS ids iff the text is complete (and EOS was not
    accepted yet); other special tokens never. Slow (a fork and an advance per token):
    an oracle for :meth:`Matcher.mask`, not a replacement.
    """
    vocab = vocab if vocab is not None else _vocab_of(matcher)
    if vocab is None:
        raise TypeError(f"cannot find the vocabulary of a {type(matcher).__name__}: pass vocab=")
    out = np.zeros(vocab.size, dtype=bool)
    eos = set(vocab.eos_token_ids)
    if matcher.is_terminated():
        return out
    complete = matcher.is_accepting()
    for t in range(vocab.size):
        if t in eos:
            out[t] = complete
            continue
        if t in vocab.special_ids:
            continue
        try:
            matcher.fork().advance(t)
        except TokenRejected:
            continue
        out[t] = True
    return out


def assert_masks_exact(matcher_or_compiled, steps: int = 20, seed: int = 0, *,
                       vocab: Vocabulary | None = None) -> None:
    """Along a random walk of allowed tokens, ``mask()`` equals :func:`brute_force_mask`.

    Starts from a fork of the matcher given (or a fresh matcher of a compiled grammar),
    compares ``steps`` states and stops early when only EOS or nothing is allowed.
    """
    if isinstance(matcher_or_compiled, CompiledGrammar):
        matcher = matcher_or_compiled.matcher()
    else:
        matcher = matcher_or_compiled.fork()
    vocab = vocab if vocab is not None else _vocab_of(matcher)
    if vocab is None:
        raise TypeError(f"cannot find the vocabulary of a {type(matcher).__name__}: pass vocab=")
    rng = random.Random(seed)
    eos = set(vocab.eos_token_ids)
    walked: list[int] = []
    for step in range(steps):
        mask = np.asarray(matcher.mask())
        if mask.shape != (vocab.size,) or mask.dtype != bool:
            raise AssertionError(f"step {step}{_after(walked)}: mask() is "
                                 f"{mask.dtype}{list(mask.shape)}, expected bool[{vocab.size}]")
        exact = brute_force_mask(matcher, vocab)
        wrong = np.flatnonzero(mask != exact)
        if wrong.size:
            lines = [f"token {t} {_spell(vocab, t)}: mask() says {bool(mask[t])}, "
                     f"brute force says {bool(exact[t])}" for t in wrong[:5].tolist()]
            more = f" (and {wrong.size - 5} more)" if wrong.size > 5 else ""
            raise AssertionError(f"step {step}{_after(walked)}: mask() is not exact: "
                                 + "; ".join(lines) + more)
        choices = [t for t in np.flatnonzero(exact).tolist() if t not in eos]
        if not choices:
            return
        token = rng.choice(choices)
        matcher.advance(token)
        walked.append(token)


def assert_consistent(constraint, vocab_size: int | None = None, *, steps: int = 20,
                      seed: int = 0, tokens: Iterable[int] | None = None) -> None:
    """Check that a constraint agrees with itself along a random walk of allowed tokens.

    At each state: ``check(t)`` agrees with ``mask()[t]`` (when there is a ``mask``);
    ``is_complete()`` equals ``check(eos)`` for every EOS id (when the vocabulary is
    known); a fork answers like the original, shares its ``counter``, and advancing one of
    the two changes nothing in the other; ``advance(t)`` on a fork succeeds exactly when
    ``check(t)`` is True and otherwise raises a :class:`~gramgen.GramgenError` (for a
    sample of allowed and rejected tokens, EOS always among them).

    ``tokens``: the ids checked at each state (default: every id, or a random sample of
    :data:`MAX_CHECKED` for larger vocabularies). ``vocab_size`` is needed only when it
    cannot be read from the constraint. The walk runs on a fork: ``constraint`` itself is
    left as it was (if its ``fork`` is right).
    """
    kind = type(constraint).__name__
    missing = [m for m in ("check", "advance", "fork", "is_complete")
               if not callable(getattr(constraint, m, None))]
    if missing:
        raise TypeError(f"a {kind} is not a constraint: no {', '.join(missing)}")
    vocab = _vocab_of(constraint)
    if vocab_size is None:
        vocab_size = vocab.size if vocab is not None else getattr(constraint, "vocab_size", None)
    if vocab_size is None and callable(getattr(constraint, "mask", None)):
        vocab_size = len(constraint.mask())
    if vocab_size is None and tokens is None:
        raise TypeError(f"cannot find the vocabulary size of a {kind}: pass vocab_size")
    walk = _Walk(constraint.fork(), vocab, vocab_size, tokens, random.Random(seed))
    if not isinstance(getattr(getattr(constraint, "counter", None), "count", None), int):
        walk.fail(None, "counter", "the constraint has no counter with an integer count")
    for walk.step in range(steps):
        if not walk.check_state():
            return


class _Walk:
    """The state of :func:`assert_consistent`: one method per property of one state."""

    def __init__(self, current, vocab: Vocabulary | None, vocab_size: int | None,
                 tokens: Iterable[int] | None, rng: random.Random):
        self.current, self.vocab, self.vocab_size, self.rng = current, vocab, vocab_size, rng
        self.fixed = None if tokens is None else sorted(set(int(t) for t in tokens))
        self.eos = [] if vocab is None else [t for t in vocab.eos_token_ids
                                             if vocab_size is None or t < vocab_size]
        self.step = 0
        self.walked: list[int] = []
        self.answers: dict[int, bool] = {}

    def fail(self, token: int | None, prop: str, detail: str):
        where = f"step {self.step}{_after(self.walked)}"
        if token is not None:
            where += f", token {token} {_spell(self.vocab, token)}"
        raise AssertionError(f"{where}: {prop}: {detail}")

    def check_state(self) -> bool:
        """All properties of the current state, then one step; False at the walk's end."""
        if self.fixed is not None:
            candidates = self.fixed
        elif self.vocab_size <= MAX_CHECKED:
            candidates = list(range(self.vocab_size))
        else:
            sample = self.rng.sample(range(self.vocab_size), MAX_CHECKED)
            candidates = sorted(set(sample) | set(self.eos))
        self.answers = {}
        for t in candidates:
            answer = self.current.check(t)
            if not isinstance(answer, (bool, np.bool_)):
                self.fail(t, "check", f"check() returned a {type(answer).__name__}, not a bool")
            self.answers[t] = bool(answer)
        self.complete = bool(self.current.is_complete())
        self.allowed = [t for t in candidates if self.answers[t]]
        probe = set(self.rng.sample(candidates, min(64, len(candidates))))
        self.probe = sorted(probe | set(self.allowed[:8]) | set(self.eos) & set(self.answers))
        if callable(getattr(self.current, "mask", None)):
            self.check_mask()
        self.check_eos()
        self.check_fork()
        self.check_advance(candidates)
        return self.advance()

    def check_mask(self) -> None:
        mask = np.asarray(self.current.mask())
        if mask.ndim != 1 or (self.vocab_size is not None and mask.shape[0] != self.vocab_size):
            self.fail(None, "mask", f"mask() has shape {mask.shape}, expected ({self.vocab_size},)")
        for t, answer in self.answers.items():
            if t < mask.shape[0] and bool(mask[t]) != answer:
                self.fail(t, "check vs mask",
                          f"check() says {answer} but mask() says {bool(mask[t])}")

    def check_eos(self) -> None:
        for t in self.eos:
            if t in self.answers and self.answers[t] != self.complete:
                self.fail(t, "is_complete vs check(eos)", f"is_complete() says {self.complete} "
                                                          f"but check(eos) says {self.answers[t]}")

    def unchanged(self, other, what: str) -> None:
        """``other`` still gives this state's answers on the probe tokens."""
        for t in self.probe:
            if bool(other.check(t)) != self.answers[t]:
                self.fail(t, "fork independence", f"{what} check() from {self.answers[t]}")
        if bool(other.is_complete()) != self.complete:
            self.fail(None, "fork independence", f"{what} is_complete() from {self.complete}")

    def check_fork(self) -> None:
        fork = self.current.fork()
        if getattr(fork, "counter", None) is not self.current.counter:
            self.fail(None, "fork", "a fork does not share the counter of its original")
        for t in self.probe:
            if bool(fork.check(t)) != self.answers[t]:
                self.fail(t, "fork", f"the original's check() says {self.answers[t]}, "
                                     f"a fresh fork's says {not self.answers[t]}")
        moves = [t for t in self.allowed if t not in self.eos] or self.allowed
        if moves:
            move = self.rng.choice(moves)
            try:
                fork.advance(move)
            except Exception as exc:  # noqa: BLE001 - any exception is the finding
                self.fail(move, "advance vs check",
                          f"check() says True but advance() on a fork raised {exc!r}")
            self.unchanged(self.current, "advancing a fork changed the original's")

    def check_advance(self, candidates: list[int]) -> None:
        """advance(t) on a fork succeeds exactly when check(t) is True."""
        rejected = [t for t in candidates if not self.answers[t]]
        sample = set(self.rng.sample(self.allowed, min(ADVANCE_SAMPLE, len(self.allowed))))
        sample |= set(self.rng.sample(rejected, min(ADVANCE_SAMPLE, len(rejected))))
        sample |= set(self.eos) & set(self.answers)
        for t in sorted(sample):
            try:
                self.current.fork().advance(t)
            except GramgenError as exc:
                if self.answers[t]:
                    self.fail(t, "advance vs check",
                              f"check() says True but advance() raised {exc!r}")
            except Exception as exc:  # noqa: BLE001 - any other exception is the finding
                self.fail(t, "advance",
                          f"advance() raised {exc!r}, which is not a gramgen.GramgenError")
            else:
                if not self.answers[t]:
                    self.fail(t, "advance vs check", "check() says False but advance() succeeded")
                if bool(self.current.check(t)) != self.answers[t]:
                    self.fail(t, "fork independence", "advancing a fork by this token changed "
                              f"the original's check() from {self.answers[t]}")

    def advance(self) -> bool:
        """One step of the walk (a non-EOS allowed token); False when there is none."""
        moves = [t for t in self.allowed if t not in self.eos]
        if not moves:
            return False
        token = self.rng.choice(moves)
        before = self.current.fork()
        try:
            self.current.advance(token)
        except Exception as exc:  # noqa: BLE001
            self.fail(token, "advance vs check", f"check() says True but advance() raised {exc!r}")
        self.unchanged(before, "advancing the original changed a fork's")
        self.walked.append(token)
        return True


# -- helpers -------------------------------------------------------------------------------

def _vocab_of(obj) -> Vocabulary | None:
    """The vocabulary behind a matcher, a compiled grammar or a constraint, if it has one."""
    paths = (("vocab",), ("compiled", "vocab"), ("_cg", "vocab"),
             ("matcher", "vocab"), ("matcher", "compiled", "vocab"), ("matcher", "_cg", "vocab"))
    for path in paths:
        found = obj
        for name in path:
            found = getattr(found, name, None)
            if found is None:
                break
        if isinstance(found, Vocabulary):
            return found
    return None


def _spell(vocab: Vocabulary | None, token: int) -> str:
    if vocab is None or not 0 <= token < vocab.size:
        return ""
    if token in vocab.eos_token_ids:
        return "(EOS)"
    if token in vocab.special_ids:
        return "(special)"
    return f"({vocab.token_bytes(token)!r})"


def _after(walked: list[int]) -> str:
    if not walked:
        return " (at the start)"
    shown = ", ".join(map(str, walked[-8:]))
    return f" (after tokens {'..., ' if len(walked) > 8 else ''}{shown})"
