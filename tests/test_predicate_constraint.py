"""PredicateConstraint and UTF-8: predicates see whole characters only, EOS never comes
inside a character, and a token that starts a character is allowed exactly when some
character it can become is acceptable."""

from __future__ import annotations

import numpy as np
import pytest

import gramgen
from gramgen.generation import PredicateConstraint, SyntheticLM
from gramgen.generation.constraint import MAX_COMPLETIONS, completions

# ids:   0     1        2        3             4     5 (special)  6 (EOS)
PIECES = [b"a", b"\xc3", b"\xa9", "é".encode(), b"b", b"", b""]
A, LEAD, CONT, E_ACUTE, B, EOS = 0, 1, 2, 3, 4, 6


def vocab() -> gramgen.Vocabulary:
    return gramgen.Vocabulary(PIECES, eos_token_ids=[EOS], special_ids=[5])


def no_replacement(text: str) -> bool:
    return "\ufffd" not in text and len(text) <= 3


def test_no_eos_inside_a_character():
    """After "a" and the lead byte of "é", EOS is refused although "a" alone is complete
    (it was allowed: the predicate saw "a", the output ended in half a character)."""
    seen: list[str] = []

    def complete_ok(text: str) -> bool:
        seen.append(text)
        return len(text) >= 1

    c = PredicateConstraint(vocab(), no_replacement, complete_ok)
    c.advance(A)
    assert c.check(EOS)
    c.advance(LEAD)
    assert not c.check(EOS) and not c.is_complete()
    assert c.check(CONT) and not c.check(A)   # "a" after the lead byte would be invalid UTF-8
    c.advance(CONT)
    assert c.check(EOS) and c.text == "aé"
    assert "\ufffd" not in "".join(seen)


def test_a_lead_byte_is_allowed_exactly_when_a_character_can_follow():
    """ASCII only: the lead byte of "é" is refused (it was allowed, then nothing could
    follow it: a dead end). Only "é": the lead byte is allowed, then its continuation."""
    ascii_only = PredicateConstraint(vocab(), str.isascii, lambda t: True)
    assert ascii_only.check(A) and not ascii_only.check(LEAD) and not ascii_only.check(E_ACUTE)

    only_e = PredicateConstraint(vocab(), lambda t: "é".startswith(t), lambda t: t == "é")
    assert only_e.check(LEAD) and only_e.check(E_ACUTE) and not only_e.check(CONT)
    fork = only_e.fork()
    fork.advance(LEAD)
    assert fork.check(CONT) and not fork.check(EOS)
    fork.advance(CONT)
    assert fork.check(EOS) and fork.text == "é"


@pytest.mark.parametrize("sampler", ["awrs", "smc"])
def test_generated_text_never_ends_inside_a_character(sampler):
    """A model that wants to stop right after the lead byte: every output is whole UTF-8."""
    v = vocab()

    def logits(context):
        out = np.full(v.size, -4.0)
        out[LEAD] = 3.0 if context[-1] != LEAD else -4.0
        out[EOS] = 4.0 if context[-1] == LEAD else -1.0
        return out

    lm = SyntheticLM(v, logits)
    pred = PredicateConstraint(v, no_replacement, lambda t: len(t) >= 1)
    for seed in range(10):
        out = gramgen.generate(lm, [0], constraint=pred, sampler=sampler, seed=seed, max_new_tokens=6,
                               **({"num_particles": 3} if sampler == "smc" else {}))
        data = b"".join(v.token_bytes(t) for t in out.tokens)
        if out.complete:
            assert data.decode("utf-8") == out.text and out.text.startswith("é")


def test_completions_are_the_characters_that_start_with_the_bytes():
    for pending in (b"\xc3", b"\xe2\x82", b"\xe0", b"\xed", b"\xf0\x9f\x98"):
        chars = list(completions(pending))
        assert chars and all(c.encode().startswith(pending) for c in chars)
        size = len(chars[0].encode())
        expected = [c for cp in range(0x80, 0x110000) if not 0xD800 <= cp <= 0xDFFF
                    for c in [chr(cp)] if len(c.encode()) == size and c.encode().startswith(pending)] \
            if size < 4 else None
        if expected is not None:
            assert chars == expected


def test_the_search_for_a_completion_is_bounded_and_remembered():
    calls = []

    def ascii_only(text: str) -> bool:
        calls.append(text)
        return text.isascii()

    v = gramgen.Vocabulary([b"a", b"\xf4", b""], eos_token_ids=[2])
    c = PredicateConstraint(v, ascii_only, lambda t: True)
    c.check(1)
    assert len(calls) <= MAX_COMPLETIONS + 1
    calls.clear()
    c.fork().check(1)
    assert len(calls) == 1   # remembered, shared with forks
