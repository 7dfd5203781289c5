"""gramgen.testing: each helper answers right on small hand-checked cases and catches a
planted fault (a lying check, a shared fork, a flipped mask bit, ...)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import gramgen
from gramgen.testing import accepts, assert_consistent, assert_masks_exact, brute_force_mask
from reference import ReferenceGrammar, brute_force_mask as reference_mask
from synthetic import EXPR_LARK, EXPR_PIECES, small_vocab as vocab_of


BINARY_PIECES = ["0", "1", "00", "11", "01", "2", "a", " "]
BINARY = r"[01]{1,5}"
ENUM_PIECES = ['{"', 'color', '":', ':', ' "', 'red', 'green', 'blue', 'gre', 'en', '"}', '"', '}',
               'size', 'x', ' ', '{', 'é', '\u00e9"}']
ENUM_LARK = r'''
start: "{\"color\": \"" COLOR "\"}" | "{\"size\": \"" SIZE "\"}"
COLOR: "red" | "green" | "blue" | "bl\u00e9"
SIZE: "x" | "xx"
'''


def binary():
    vocab = vocab_of(BINARY_PIECES)
    return vocab, gramgen.compile(gramgen.Grammar.from_regex(BINARY), vocab)


def enum():
    vocab = vocab_of(ENUM_PIECES)
    return vocab, gramgen.compile(gramgen.Grammar.from_lark(ENUM_LARK), vocab)


def expr():
    vocab = vocab_of(EXPR_PIECES)
    return vocab, gramgen.compile(gramgen.Grammar.from_lark(EXPR_LARK), vocab)


SETUPS = [binary, enum, expr]


# -- accepts -------------------------------------------------------------------------------

def test_accepts_agrees_with_re_on_every_short_string():
    g = gramgen.Grammar.from_regex(BINARY)
    for n in range(7):
        for chars in itertools.product("01a", repeat=n):
            s = "".join(chars)
            expected = re.fullmatch(BINARY, s) is not None
            assert accepts(g, s) is expected, s
            assert accepts(g, s.encode()) is expected, s


def test_accepts_lark_and_a_compiled_grammar_of_another_vocabulary():
    _, cg = enum()
    for text, expected in [('{"color": "red"}', True), ('{"color": "bl\u00e9"}', True),
                           ('{"size": "xx"}', True), ('{"color": "re"}', False),
                           ('{"color": "red"', False), ('{"color": "red"} ', False),
                           ('{"size": "xxx"}', False), ("", False)]:
        assert accepts(cg, text) is expected, text
        assert accepts(cg.grammar, text) is expected, text


def test_accepts_utf8():
    g = gramgen.Grammar.from_regex(r'"[^"]*"')
    assert accepts(g, '"日本語 😀"')
    assert not accepts(g, '"日"'.encode()[:-2] + b'"')  # a cut UTF-8 character
    assert not accepts(g, '"a"b')


def test_accepts_rejects_other_objects():
    with pytest.raises(TypeError):
        accepts(BINARY, "0")


# -- brute_force_mask ----------------------------------------------------------------------

def allowed(vocab, mask) -> set[str]:
    eos = set(vocab.eos_token_ids)
    return {"<eos>" if t in eos else vocab.token_bytes(t).decode() for t in np.flatnonzero(mask)}


def test_brute_force_mask_hand_computed():
    vocab, cg = binary()
    m = cg.matcher()
    mask = brute_force_mask(m)
    assert mask.dtype == bool and mask.shape == (vocab.size,)
    assert allowed(vocab, mask) == {"0", "1", "00", "11", "01"}
    m.advance_many([BINARY_PIECES.index("01"), BINARY_PIECES.index("01")])  # "0101"
    assert allowed(vocab, brute_force_mask(m)) == {"0", "1", "<eos>"}
    m.advance(BINARY_PIECES.index("1"))
    assert allowed(vocab, brute_force_mask(m)) == {"<eos>"}
    m.advance(vocab.eos_token_ids[0])
    assert not brute_force_mask(m).any()
    assert m.tokens == [4, 4, 1, 9]  # brute force never moves the matcher it is given


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.__name__)
def test_brute_force_mask_equals_the_reference_recogniser(setup):
    """Against tests/reference.py (an Earley recogniser sharing nothing with the engine)."""
    vocab, cg = setup()
    ref = ReferenceGrammar(cg.grammar.ir)
    m = cg.matcher()
    for step in range(12):
        chart = ref.run(m.text_bytes())
        expected = reference_mask(ref, chart, vocab)
        assert set(np.flatnonzero(brute_force_mask(m)).tolist()) == expected, (step, m.tokens)
        choices = [t for t in expected if t not in vocab.eos_token_ids]
        if not choices:
            break
        m.advance(sorted(choices)[step % len(choices)])


# -- assert_masks_exact --------------------------------------------------------------------

@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.__name__)
def test_assert_masks_exact_passes_on_the_matcher(setup):
    _, cg = setup()
    for seed in range(3):
        assert_masks_exact(cg, steps=30, seed=seed)
    m = cg.matcher()
    m.advance(int(np.flatnonzero(m.mask())[0]))
    before = m.tokens
    assert_masks_exact(m, steps=10)
    assert m.tokens == before  # the walk runs on a fork


class FlippedMask:
    """A matcher whose mask() is wrong in one bit once ``at`` tokens were advanced."""

    def __init__(self, matcher, token: int, at: int):
        self.inner, self.token, self.at = matcher, token, at

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def mask(self):
        mask = self.inner.mask()
        if len(self.inner.tokens) == self.at:
            mask[self.token] = not mask[self.token]
        return mask

    def fork(self):
        return FlippedMask(self.inner.fork(), self.token, self.at)


@pytest.mark.parametrize("at", [0, 1, 2])
def test_assert_masks_exact_finds_one_flipped_bit(at):
    vocab, cg = expr()
    flipped = FlippedMask(cg.matcher(), token=EXPR_PIECES.index("z"), at=at)
    with pytest.raises(AssertionError, match=rf"step {at} .*token 9 \(b'z'\): mask\(\) says True, brute force says False"):
        assert_masks_exact(flipped, steps=10)
    dropped = FlippedMask(cg.matcher(), token=EXPR_PIECES.index("("), at=0)  # allowed first
    with pytest.raises(AssertionError, match=r"step 0 \(at the start\): .*token 2 \(b'\('\): mask\(\) says False, brute force says True"):
        assert_masks_exact(dropped)
    eos = FlippedMask(cg.matcher(), token=vocab.eos_token_ids[0], at=0)
    with pytest.raises(AssertionError, match=r"step 0 .*\(EOS\): mask\(\) says True"):
        assert_masks_exact(eos)


def test_assert_masks_exact_checks_shape():
    _, cg = binary()

    class Short(FlippedMask):
        def mask(self):
            return self.inner.mask()[:-1]

        def fork(self):
            return Short(self.inner.fork(), 0, 0)

    with pytest.raises(AssertionError, match=r"expected bool\[10\]"):
        assert_masks_exact(Short(cg.matcher(), 0, 0))


# -- assert_consistent ---------------------------------------------------------------------

def library_constraints():
    """The module with the library's MatcherConstraint / PredicateConstraint."""
    return gramgen.generation.constraint


class Counter:
    def __init__(self):
        self.count = 0


class Plain:
    """A correct constraint over a matcher, without a mask (the protocol's minimum)."""

    def __init__(self, matcher, counter=None):
        self.matcher = matcher
        self.counter = counter or Counter()

    def check(self, token):
        self.counter.count += 1
        return self.matcher.check(token)

    def advance(self, token):
        self.matcher.advance(token)

    def fork(self):
        return type(self)(self.matcher.fork(), self.counter)

    def is_complete(self):
        return self.matcher.is_accepting()


class WithMask(Plain):
    def mask(self):
        return self.matcher.mask()


LIE = EXPR_PIECES.index("(")  # allowed at the start of an expression


class LyingCheck(Plain):
    def check(self, token):
        return (not super().check(token)) if token == LIE else super().check(token)


class LyingCheckWithMask(LyingCheck, WithMask):
    pass


class LyingMask(WithMask):
    def mask(self):
        mask = super().mask()
        mask[EXPR_PIECES.index("z")] = True
        return mask


class SharedFork(Plain):
    def fork(self):
        return SharedFork(self.matcher, self.counter)


class LateSharedFork(Plain):
    """Forks share state once two tokens were advanced."""

    def fork(self):
        return LateSharedFork(self.matcher if len(self.matcher.tokens) >= 2 else self.matcher.fork(), self.counter)


class LazyFork(Plain):
    """A fork reads through to its parent's current state (copy-on-write gone wrong):
    advancing the parent moves its forks, advancing a fork leaves the parent alone."""

    def __init__(self, matcher, counter=None, parent=None):
        super().__init__(matcher, counter)
        self.parent, self.extra = parent, []

    def state(self):
        if self.parent is None:
            return self.matcher
        m = self.parent.state().fork()
        m.advance_many(self.extra)
        return m

    def check(self, token):
        self.counter.count += 1
        return self.state().check(token)

    def advance(self, token):
        if self.parent is None:
            self.matcher.advance(token)
        else:
            self.state().advance(token)
            self.extra.append(token)

    def fork(self):
        return LazyFork(None, self.counter, parent=self)

    def is_complete(self):
        return self.state().is_accepting()


class OwnCounter(Plain):
    def fork(self):
        return OwnCounter(self.matcher.fork())


class LyingComplete(Plain):
    def is_complete(self):
        return True


class WrongError(Plain):
    def advance(self, token):
        if not self.matcher.check(token):
            raise ValueError("no")
        self.matcher.advance(token)


class Lenient(Plain):
    """advance() never refuses: a rejected token is silently ignored."""

    def advance(self, token):
        if self.matcher.check(token):
            self.matcher.advance(token)


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.__name__)
def test_assert_consistent_passes_on_correct_constraints(setup):
    vocab, cg = setup()
    module = library_constraints()
    for seed in range(3):
        assert_consistent(module.MatcherConstraint(cg.matcher()), seed=seed)
        assert_consistent(Plain(cg.matcher()), seed=seed)
        assert_consistent(WithMask(cg.matcher()), seed=seed)
    c = Plain(cg.matcher())
    assert_consistent(c, tokens=[0, 1, 2, vocab.eos_token_ids[0]])
    assert c.matcher.tokens == []  # the walk runs on a fork


def test_assert_consistent_passes_on_a_predicate_constraint():
    vocab = vocab_of(BINARY_PIECES)
    module = library_constraints()
    c = module.PredicateConstraint(vocab, lambda s: re.fullmatch("[01]{0,5}", s) is not None,
                                   lambda s: re.fullmatch(BINARY, s) is not None)
    for seed in range(5):
        assert_consistent(c, seed=seed)


@pytest.mark.parametrize("broken, found", [
    (LyingCheck, r"step 0 \(at the start\), token 2 \(b'\('\): advance vs check: check\(\) says False but advance\(\) succeeded"),
    (LyingCheckWithMask, r"step 0 .*token 2 .*check vs mask: check\(\) says False but mask\(\) says True"),
    (LyingMask, r"token 9 \(b'z'\): check vs mask: check\(\) says False but mask\(\) says True"),
    (SharedFork, r"step 0 .*fork independence: advancing a fork (by this token )?changed the original's"),
    (LateSharedFork, r"step 2 \(after tokens \d+, \d+\).*fork independence"),
    (LazyFork, r"step 0 .*fork independence: advancing the original changed a fork's check\(\) from"),
    (OwnCounter, r"fork: a fork does not share the counter"),
    (LyingComplete, r"token 12 \(EOS\): is_complete vs check\(eos\): is_complete\(\) says True but check\(eos\) says False"),
    (WrongError, r"advance: advance\(\) raised ValueError\('no'\), which is not a gramgen.GramgenError"),
    (Lenient, r"advance vs check: check\(\) says False but advance\(\) succeeded"),
], ids=lambda x: getattr(x, "__name__", ""))
def test_assert_consistent_finds_a_planted_fault(broken, found):
    _, cg = expr()
    with pytest.raises(AssertionError, match=found):
        assert_consistent(broken(cg.matcher()), steps=10)


def test_assert_consistent_needs_a_constraint():
    _, cg = binary()
    with pytest.raises(TypeError, match="is_complete"):
        assert_consistent(cg.matcher())  # a Matcher has is_accepting, not is_complete

    class NoVocab(Plain):
        matcher = None

        def __init__(self, inner, counter=None):
            self.inner, self.counter = inner, counter or Counter()

        def check(self, token):
            return self.inner.check(token)

        def advance(self, token):
            self.inner.advance(token)

        def fork(self):
            return NoVocab(self.inner.fork(), self.counter)

        def is_complete(self):
            return self.inner.is_accepting()

    with pytest.raises(TypeError, match="vocab_size"):
        assert_consistent(NoVocab(cg.matcher()))
    assert_consistent(NoVocab(cg.matcher()), vocab_size=10)
