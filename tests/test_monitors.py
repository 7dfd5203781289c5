"""Monitors as constraints: the conjunction with a grammar, liveness, every sampler,
speculation, and ``generate(..., monitors=...)`` (with a table of names instead of jedi;
the jedi monitor has its own tests in test_monitors_jedi.py).

Also the helpers the other monitor tests import: :class:`DictMonitor`, :func:`fires`,
:func:`code_vocab`.
"""

from __future__ import annotations

import string

import numpy as np
import pytest
from conftest import vocabulary

import gramgen
from gramgen import ConfigurationError, TokenRejected
from gramgen.generation import PredicateConstraint, SyntheticLM
from gramgen.monitors import (MonitoredConstraint, PythonScanner, Unconstrained, monitored,
                              prompt_document, python_kinds)
from gramgen.testing import assert_consistent

# -- helpers -----------------------------------------------------------------------------------


class DictMonitor:
    """Names from a table: those of the longest key the trigger's text ends with (None when
    no key matches). ``fail``: raise it instead. Records every trigger it is asked about."""

    def __init__(self, table, lookahead=False, fail: Exception | None = None, triggers=None):
        self.table = table
        self.lookahead = lookahead
        self.fail = fail
        kinds = python_kinds(lookahead)
        self.kinds = kinds if triggers is None else {k: kinds[k] for k in triggers}
        self.asked = []

    def scanner(self):
        return PythonScanner(self.kinds)

    def names(self, trigger):
        self.asked.append(trigger)
        if self.fail is not None:
            raise self.fail
        for key in sorted(self.table, key=len, reverse=True):
            if trigger.text.endswith(key):
                return self.table[key]
        return None


def fires(text: str):
    """(index of the character, kind) of every trigger a fresh PythonScanner fires."""
    scanner = PythonScanner()
    return [(i, kind) for i, char in enumerate(text) if (kind := scanner.feed(char)) is not None]


def described(text: str) -> list[tuple[int, str]]:
    """:func:`fires` as (index, "name/mode")."""
    return [(i, f"{kind.name}/{kind.mode}") for i, kind in fires(text)]


PIECES = list(dict.fromkeys([c for c in string.printable if c not in "\x0b\x0c\r"] + [
    ".radious", "radious", "radius", "rad", "ius", "area", "scale", "describe", "Circle",
    "append", "apply", "app", "count", "(", ")", "()", " =", "zzz", ".append"]))


def code_vocab(pieces=PIECES) -> gramgen.Vocabulary:
    """Every printable ASCII character plus a few words; EOS last."""
    return gramgen.Vocabulary([p.encode() for p in pieces] + [b""], eos_token_ids=[len(pieces)])


def encode(vocab, text: str) -> list[int]:
    """Longest piece first."""
    by_bytes = {t: i for i, t in enumerate(vocab.tokens) if t}
    data, out, i = text.encode(), [], 0
    while i < len(data):
        n = max(n for n in range(1, 9) if data[i:i + n] in by_bytes)
        out.append(by_bytes[data[i:i + n]])
        i += n
    return out


def preferring(vocab, scores_after, default=-5.0, eos_after=("radius", "radious", "area", "scale", "count")):
    """A synthetic LM: logits ``default`` but ``scores_after(text)`` (a {piece: logit}
    for the text so far), EOS strongly once the text ends with one of ``eos_after``."""
    index = {t.decode(): i for i, t in enumerate(vocab.tokens) if t}
    eos = vocab.eos_token_ids[0]

    def logits(context):
        text = b"".join(vocab.tokens[t] for t in context).decode()
        row = np.full(vocab.size, default)
        for piece, score in scores_after(text).items():
            row[index[piece]] = score
        if text.endswith(eos_after):
            row[eos] = 20.0
        return row

    return SyntheticLM(vocab, logits)


CIRCLE = {"c.": {"radius", "area", "scale", "describe"}}
DOCUMENT = "c = Circle(2.0)\nc"


def adversarial(text: str) -> dict[str, float]:
    """Puts its mass on the misspelled ``.radious``."""
    if text.endswith("."):
        return {"radious": 10.0, "rad": 4.0, "radius": 3.0}
    return {".radious": 10.0, ".": 5.0}


# -- generate ----------------------------------------------------------------------------------


def test_adversarial_model_writes_a_real_member_with_the_monitor():
    vocab = code_vocab()
    lm = preferring(vocab, adversarial)
    prompt = encode(vocab, DOCUMENT)
    plain = gramgen.generate(lm, prompt, constraint=Unconstrained(vocab), max_new_tokens=8)
    assert plain.text == ".radious"
    for sampler in ("constrained", "awrs", "smc"):
        monitor = DictMonitor(CIRCLE)
        out = gramgen.generate(lm, prompt, monitors=[monitor], max_new_tokens=8, sampler=sampler, seed=0)
        assert out.text.startswith(".") and out.text[1:] in CIRCLE["c."], (sampler, out.text)
        assert out.complete and out.stats.monitor_triggers >= 1
        assert out.stats.monitor_queries == 1 and out.stats.monitor_fallbacks == 0
        assert [t.text for t in monitor.asked] == [DOCUMENT + "."]


def test_sampled_outputs_only_use_real_names():
    vocab = code_vocab()
    lm = SyntheticLM.hashed(vocab, seed=3, scale=3.0)
    prompt = encode(vocab, "c = Circle(2.0)\nc.")
    for seed in range(6):
        out = gramgen.generate(lm, prompt, monitors=[DictMonitor(CIRCLE)], max_new_tokens=6,
                               temperature=1.0, seed=seed)
        name = ""
        for char in out.text:
            if not (char.isalnum() or char == "_"):
                break
            name += char
        assert any(n.startswith(name) for n in CIRCLE["c."]) and name, out.text
        if len(name) < len(out.text):
            assert name in CIRCLE["c."], out.text


@pytest.mark.parametrize("lookahead", [False, True])
def test_unknown_names_change_nothing(lookahead):
    """Where the analyser knows nothing (names None), the output is plain decoding's,
    greedy and sampled. Without lookahead, a token that carries a member trigger and a name
    (``.append``) is refused after any expression, known or not, so that case runs on a
    vocabulary without such tokens (GPT-2 and Llama 2 have one or two)."""
    pieces = PIECES if lookahead else [p for p in PIECES if not (p.startswith(".") and len(p) > 1)]
    vocab = code_vocab(pieces)
    prompt = encode(vocab, "x = f()\nx")
    for seed in range(4):
        lm = SyntheticLM.hashed(vocab, seed=seed, scale=3.0)
        for temperature in (0.0, 1.0):
            plain = gramgen.generate(lm, prompt, constraint=Unconstrained(vocab), max_new_tokens=16,
                                     temperature=temperature, seed=seed)
            out = gramgen.generate(lm, prompt, monitors=[DictMonitor({}, lookahead)], max_new_tokens=16,
                                   temperature=temperature, seed=seed)
            assert out.tokens == plain.tokens
            assert out.stats.monitor_fallbacks == 0


def test_without_lookahead_a_token_carrying_a_member_name_is_refused():
    vocab = code_vocab()
    lm = preferring(vocab, lambda text: {"append": 10.0} if text.endswith(".") else {".append": 10.0, ".": 5.0})
    prompt = encode(vocab, "x = f()\nx")
    quiet = gramgen.generate(lm, prompt, monitors=[DictMonitor({})], max_new_tokens=2)
    assert quiet.text == ".append" and len(quiet.tokens) == 2     # "." then "append"
    exact = gramgen.generate(lm, prompt, monitors=[DictMonitor({}, lookahead=True)], max_new_tokens=1)
    assert exact.text == ".append" and len(exact.tokens) == 1


def test_a_failing_analyser_restricts_nothing_and_says_so():
    vocab = code_vocab()
    lm = preferring(vocab, adversarial)
    prompt = encode(vocab, DOCUMENT)
    monitor = DictMonitor(CIRCLE, fail=RuntimeError("the analyser crashed"))
    out = gramgen.generate(lm, prompt, monitors=[monitor], max_new_tokens=8)
    assert out.text == ".radious"
    assert out.stats.monitor_failures == 1 and out.stats.monitor_queries == 1


def test_the_document_starts_inside_an_identifier():
    """``c.rad|``: the completion is constrained from its first token."""
    vocab = code_vocab()
    lm = preferring(vocab, lambda text: {"o": 7.0, "i": 6.0, "u": 5.0, "s": 5.0})
    prompt = encode(vocab, "c = Circle(2.0)\nc.rad")
    out = gramgen.generate(lm, prompt, monitors=[DictMonitor(CIRCLE)], max_new_tokens=5)
    assert out.text == "ius"
    plain = gramgen.generate(lm, prompt, constraint=Unconstrained(vocab), max_new_tokens=3)
    assert plain.text.startswith("o")


def test_a_batch_gives_each_prompt_its_own_document():
    vocab = code_vocab()
    lm = preferring(vocab, adversarial)
    table = {"c.": {"radius"}, "d.": {"area"}}
    prompts = [encode(vocab, "c"), encode(vocab, "d")]
    outs = gramgen.generate(lm, prompts, monitors=[DictMonitor(table)], max_new_tokens=8)
    assert [o.text for o in outs] == [".radius", ".area"]


def test_monitors_with_a_grammar_and_speculation():
    """Greedy speculative decoding gives plain greedy's tokens with a monitor too."""
    vocab = code_vocab()
    grammar = gramgen.Grammar.from_regex(r"\.[a-z]+(\(\))?( =)?")
    prompt = encode(vocab, DOCUMENT)
    for seed in range(5):
        lm = SyntheticLM.hashed(vocab, seed=seed, scale=3.0)
        kwargs = dict(grammar=grammar, monitors=[DictMonitor(CIRCLE)], max_new_tokens=10)
        plain = gramgen.generate(lm, prompt, **kwargs)
        for draft in ("prompt_lookup", "forced"):
            fast = gramgen.generate(lm, prompt, speculative=gramgen.Speculation(draft=draft, num_draft_tokens=3,
                                                                                 adaptive=False), **kwargs)
            assert fast.tokens == plain.tokens
        assert plain.text[1:].split("(")[0].split(" ")[0] in CIRCLE["c."]


def test_asap_and_bad_monitors_are_refused():
    vocab = code_vocab()
    lm = SyntheticLM.hashed(vocab)
    with pytest.raises(ConfigurationError, match="asap.*monitor"):
        gramgen.generate(lm, [1, 2], regex="[a-z]+", monitors=[DictMonitor(CIRCLE)], sampler="asap")
    with pytest.raises(ConfigurationError, match="not a monitor"):
        gramgen.generate(lm, [1, 2], monitors=[object()])
    with pytest.raises(ConfigurationError, match="list of monitors"):
        gramgen.generate(lm, [1, 2], monitors=DictMonitor(CIRCLE))


def test_prompt_document():
    vocab = code_vocab()
    assert prompt_document("x = c.", [1], vocab, chat=False) == "x = c."
    assert prompt_document("x = c.", [1], vocab, chat=True) == ""
    assert prompt_document([5, 6], encode(vocab, "ab."), vocab, chat=False) == "ab."


# -- the constraint ----------------------------------------------------------------------------


def _walk(constraint, vocab, rng, steps=12):
    """States along a random walk of allowed tokens."""
    for _ in range(steps):
        yield constraint
        allowed = np.flatnonzero(constraint.mask())
        allowed = [t for t in allowed if t not in vocab.eos_token_ids] or allowed
        pick = int(rng.choice(allowed))
        if pick in vocab.eos_token_ids:
            return
        constraint.advance(pick)


@pytest.mark.parametrize("vocab_name", ["gpt2", "llama2"])
def test_the_conjunction_never_allows_what_the_grammar_forbids(vocab_name):
    vocab = vocabulary(vocab_name)
    grammar = gramgen.compile(gramgen.Grammar.from_regex(r"\.(append|apply|zzz|count|app)\((x|key=1)\)"), vocab)
    table = {"obj.": {"append", "apply", "app", "count", "__len__"}, "(": {"key"}}
    rng = np.random.default_rng(0)
    for _ in range(3):
        inner = gramgen.generation.MatcherConstraint(grammar.matcher())
        constraint = monitored(inner, [DictMonitor(table)], vocab, "x = obj")
        for state in _walk(constraint, vocab, rng):
            grammar_mask = state.inner.matcher.mask()
            mask = state.mask()
            assert not (mask & ~grammar_mask).any()
            assert mask.any()
            if state.live():
                assert np.array_equal(mask, grammar_mask & state.monitor_mask())
        assert b"zzz" not in b"".join(vocab.tokens[t] for t in state.inner.matcher.tokens)


def test_liveness_falls_back_to_the_grammar_and_counts_it():
    vocab = code_vocab()
    grammar = gramgen.compile(gramgen.Grammar.from_regex(r"\.zzz"), vocab)
    inner = gramgen.generation.MatcherConstraint(grammar.matcher())
    constraint = monitored(inner, [DictMonitor({"c.": {"radius"}})], vocab, "c")
    dot = vocab.tokens.index(b".")
    constraint.advance(dot)
    grammar_mask = constraint.inner.matcher.mask()
    assert constraint.monitor_mask()[vocab.tokens.index(b"r")]
    assert not (grammar_mask & constraint.monitor_mask()).any()
    assert np.array_equal(constraint.mask(), grammar_mask)           # fallback: the grammar alone
    assert constraint.stats.fallbacks == 1
    zzz = vocab.tokens.index(b"zzz")
    assert constraint.check(zzz)
    constraint.advance(zzz)                                           # the monitor refused it: set aside
    assert not constraint.restricting
    constraint.mask()
    assert constraint.stats.fallbacks == 1                             # counted once


def test_liveness_holds_wherever_a_name_is_spelled_by_the_grammar():
    vocab = vocabulary("gpt2")
    grammar = gramgen.compile(gramgen.Grammar.from_regex(r"\.[a-z_]+"), vocab)
    names = {"append", "count", "__len__"}
    constraint = monitored(gramgen.generation.MatcherConstraint(grammar.matcher()),
                           [DictMonitor({"obj.": names})], vocab, "x = obj")
    constraint.advance(vocab.tokens.index(b"."))
    mask = constraint.mask()
    assert mask.any() and constraint.stats.fallbacks == 0
    assert {vocab.tokens[t] for t in np.flatnonzero(mask)} >= {b"append", b"count", b"__"}


def test_refused_tokens_raise_and_leave_the_state_as_it_was():
    vocab = code_vocab()
    constraint = monitored(None, [DictMonitor(CIRCLE)], vocab, DOCUMENT + ".")
    bad = vocab.tokens.index(b"radious")
    assert not constraint.check(bad)
    with pytest.raises(TokenRejected):
        constraint.advance(bad)
    good = vocab.tokens.index(b"radius")
    assert constraint.check(good)
    constraint.advance(good)
    assert constraint.is_complete()


@pytest.mark.parametrize("inner", ["grammar", "predicate", "none"])
def test_monitored_constraints_are_consistent(inner):
    vocab = code_vocab()
    if inner == "grammar":
        grammar = gramgen.compile(gramgen.Grammar.from_regex(r"\.[a-z]+( =|\(\))?"), vocab)
        base = gramgen.generation.MatcherConstraint(grammar.matcher())
    elif inner == "predicate":
        base = PredicateConstraint(vocab, lambda text: len(text) < 12, lambda text: True)
    else:
        base = None
    constraint = monitored(base, [DictMonitor(CIRCLE)], vocab, DOCUMENT)
    assert isinstance(constraint, MonitoredConstraint)
    assert hasattr(constraint, "mask") == (inner != "predicate")
    assert (constraint.matcher is not None) == (inner == "grammar")
    for seed in range(4):
        assert_consistent(constraint, steps=10, seed=seed)


def test_forks_are_independent_and_share_counter_and_stats():
    vocab = code_vocab()
    constraint = monitored(None, [DictMonitor(CIRCLE)], vocab, DOCUMENT)
    fork = constraint.fork()
    fork.advance(vocab.tokens.index(b"."))
    assert constraint.check(vocab.tokens.index(b"x")) and not fork.check(vocab.tokens.index(b"x"))
    assert fork.counter is constraint.counter and fork.stats is constraint.stats
    assert fork.stats.triggers == 1


def test_two_monitors_must_both_agree():
    vocab = code_vocab()
    first = DictMonitor({"c.": {"radius", "area"}})
    second = DictMonitor({"c.": {"area", "scale"}})
    constraint = monitored(None, [first, second], vocab, DOCUMENT + ".")
    allowed = {vocab.tokens[t] for t in np.flatnonzero(constraint.mask())}
    assert b"area" in allowed and b"radius" not in allowed and b"scale" not in allowed
