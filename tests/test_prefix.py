"""``generate(..., prefix=...)``: the output continues a document the grammar has already
read (code completion in a half-written file)."""

from __future__ import annotations

import ast
import functools

import pytest

import gramgen
from conftest import vocabulary
from gramgen.generation import SyntheticLM
from synthetic import smollm2

CODE = '''import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2

    def scale(self, k):
        '''


@functools.cache
def python_for(vocab):
    return gramgen.compile(gramgen.Grammar.builtin("python"), vocab)


def viable(cg, text: str) -> bool:
    try:
        cg.matcher_after(text)
        return True
    except gramgen.TextRejected:
        return False


def test_every_output_continues_the_prefix_validly():
    """A random model (hashed logits over SmolLM2's 49k tokens) under the Python grammar
    from the middle of a method: each output, appended to the prefix, is still a prefix of
    a Python file, and a complete one parses."""
    vocab = vocabulary("smollm2")
    cg = python_for(vocab)
    for seed in range(3):
        lm = SyntheticLM.hashed(vocab, seed=seed, scale=4.0)
        out = gramgen.generate(lm, [1, 2, 3], grammar=cg, prefix=CODE, max_new_tokens=12,
                               temperature=1.0, seed=seed)
        assert out.tokens and viable(cg, CODE + out.text), out.text
        if out.complete:
            ast.parse(CODE + out.text)
    assert not viable(cg, CODE + "return )")


def test_a_prefix_outside_the_language_is_refused_before_any_work():
    vocab = vocabulary("smollm2")
    lm = SyntheticLM.hashed(vocab, seed=0)
    with pytest.raises(gramgen.TextRejected) as info:
        gramgen.generate(lm, [1], grammar=python_for(vocab), prefix="def f(x):\n    return x\n  y\n")
    assert (info.value.line, info.value.column) == (3, 3)


@pytest.mark.parametrize("bad, match", [
    (dict(prefix=3), "prefix= takes"),
    (dict(prefix=["a", "b"]), "2 texts for 1 prompts"),
    (dict(prefix="x", sampler="asap"), "asap"),
])
def test_bad_prefix_arguments(bad, match):
    vocab = vocabulary("smollm2")
    lm = SyntheticLM.hashed(vocab, seed=0)
    with pytest.raises(gramgen.ConfigurationError, match=match):
        gramgen.generate(lm, [1], grammar=python_for(vocab), **bad)


def test_prefix_needs_something_to_advance():
    lm = SyntheticLM.hashed(vocabulary("smollm2"), seed=0)
    with pytest.raises(gramgen.ConfigurationError, match="needs a grammar"):
        gramgen.generate(lm, [1], prefix="x = ")


def test_smollm2_completion_is_a_valid_continuation_and_greedy_where_valid():
    """SmolLM2 completes the method body. Greedy under the grammar equals plain greedy as
    long as plain greedy stays valid (a mask never forbids a valid token), and the whole
    constrained output is a valid continuation."""
    lm, tok = smollm2()
    cg = python_for(lm.vocab)
    ids = tok.encode(CODE, add_special_tokens=False)
    plain = gramgen.generate(lm, ids, max_new_tokens=24, regex=r"(.|\n)*")
    ours = gramgen.generate(lm, ids, grammar=cg, prefix=CODE, max_new_tokens=24)
    assert viable(cg, CODE + ours.text)
    valid = 0
    while valid < len(plain.tokens) and viable(cg, CODE + tok.decode(plain.tokens[:valid + 1])):
        valid += 1
    assert ours.tokens[:valid] == plain.tokens[:valid]
    assert valid >= 3   # the model starts the method body validly
