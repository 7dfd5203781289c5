"""generate()'s own arguments, on SyntheticLM (exact and cheap): strict JSON by default, the
JSON layout options, and a ConfigurationError naming the argument for every bad value,
raised before any work (no model call, no compile)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic import binary_setup, small_vocab

import gramgen
from gramgen.generation import SyntheticLM, target_for

# -- strict by default --------------------------------------------------------------------

EXTRA_PIECES = ['{"a":1', ',"b":2', '}', 'x']
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def extra_key_lover() -> tuple[gramgen.Vocabulary, SyntheticLM]:
    """A model that, after ``{"a":1``, prefers inventing the key ``b`` (once) to closing."""
    vocab = small_vocab(EXTRA_PIECES)
    eos = vocab.eos_token_ids[0]

    def logits(context):
        out = np.full(vocab.size, -5.0)
        out[1] = 3.0 if 1 not in context[1:] else -5.0
        out[2] = 1.0
        out[eos] = 2.0
        return out

    return vocab, SyntheticLM(vocab, logits)


def test_schema_targets_allow_no_undeclared_keys_by_default():
    """The schema says nothing about other keys (JSON Schema: allowed); generate() is strict
    unless told otherwise (fails before: the extra key was generated)."""
    _, lm = extra_key_lover()
    out = gramgen.generate(lm, [0], schema=SCHEMA, max_new_tokens=8, whitespace="compact")
    assert out.text == '{"a":1}' and out.value == {"a": 1} and out.complete
    lax = gramgen.generate(lm, [0], schema=SCHEMA, max_new_tokens=8, strict=False, whitespace="compact")
    assert lax.text == '{"a":1,"b":2}' and lax.value == {"a": 1, "b": 2}
    # a schema that allows other keys explicitly keeps them, strict or not
    open_schema = dict(SCHEMA, additionalProperties=True)
    assert gramgen.generate(lm, [0], schema=open_schema, max_new_tokens=8, whitespace="compact").text == '{"a":1,"b":2}'


def test_pydantic_models_are_strict_by_default():
    pydantic = pytest.importorskip("pydantic")

    class Thing(pydantic.BaseModel):
        a: int

    _, lm = extra_key_lover()
    out = gramgen.generate(lm, [0], schema=Thing, max_new_tokens=8, whitespace="compact")
    assert out.text == '{"a":1}' and out.value == Thing(a=1)
    assert gramgen.generate(lm, [0], schema=Thing, max_new_tokens=8, strict=False, whitespace="compact").text == '{"a":1,"b":2}'


def test_strict_and_layout_are_part_of_the_compile_cache_key():
    vocab, _ = extra_key_lover()
    strict = target_for(vocab, schema=SCHEMA).compiled
    assert target_for(vocab, schema=SCHEMA, strict=True).compiled is strict
    lax = target_for(vocab, schema=SCHEMA, strict=False).compiled
    assert lax is not strict and target_for(vocab, schema=SCHEMA, strict=False).compiled is lax
    spaced = target_for(vocab, schema=SCHEMA, separators=(", ", ": ")).compiled
    assert spaced is not strict
    assert target_for(vocab, schema=SCHEMA, separators=(", ", ": ")).compiled is spaced
    assert target_for(vocab, schema=SCHEMA, indent=2).compiled not in (strict, spaced)


def test_reordered_properties_compile_their_own_order():
    """Two schemas with the same properties in another order are two object layouts: the
    compile cache must not hand the second the first one's grammar."""
    vocab = small_vocab([chr(c) for c in range(32, 127)])
    ab = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"], "additionalProperties": False}
    ba = {**ab, "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}}
    first = target_for(vocab, schema=ab, whitespace="compact").compiled
    second = target_for(vocab, schema=ba, whitespace="compact").compiled
    assert second is not first
    assert _accepts(vocab, first, '{"a":1,"b":2}') and not _accepts(vocab, first, '{"b":2,"a":1}')
    assert _accepts(vocab, second, '{"b":2,"a":1}') and not _accepts(vocab, second, '{"a":1,"b":2}')


def _accepts(vocab: gramgen.Vocabulary, cg, text: str) -> bool:
    """Whether ``cg`` accepts ``text`` spelled one character token at a time."""
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    m = cg.matcher()
    for ch in text:
        if not m.check(ids[ch.encode()]):
            return False
        m.advance(ids[ch.encode()])
    return m.is_accepting()


@pytest.mark.parametrize("layout, dumps", [
    (dict(whitespace="compact"), dict(separators=(",", ":"))),
    (dict(whitespace="standard"), dict()),
    (dict(separators=(", ", ": ")), dict(separators=(", ", ": "))),
    (dict(indent=2), dict(indent=2)),
])
def test_layout_options_reach_the_schema_compiler(layout, dumps):
    """generate()/target_for pass whitespace=, separators= and indent= on: the compiled
    grammar accepts exactly json.dumps' layout of a value."""
    import json

    vocab = small_vocab([chr(c) for c in range(32, 127)] + ["\n"])
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a", "b"]}
    cg = target_for(vocab, schema=schema, **layout).compiled
    value = {"a": 1, "b": "x"}
    assert _accepts(vocab, cg, json.dumps(value, **dumps))
    others = {json.dumps(value, separators=s) for s in ((",", ":"), (", ", ": "))}
    others.add(json.dumps(value, indent=2))
    for other in others - {json.dumps(value, **dumps)}:
        assert not _accepts(vocab, cg, other), other


def test_layout_options_need_a_schema():
    vocab, cg, lm = binary_setup()
    with pytest.raises(gramgen.ConfigurationError, match="separators= and indent="):
        gramgen.generate(lm, [0], regex="[01]", separators=(",", ":"))
    with pytest.raises(gramgen.ConfigurationError, match="separators= and indent="):
        gramgen.generate(lm, [0], grammar=cg, indent=2)
    with pytest.raises(gramgen.ConfigurationError, match="strict"):
        gramgen.generate(lm, [0], schema=SCHEMA, strict="yes", whitespace="compact")


# -- bad arguments --------------------------------------------------------------------------

class Tokenizing(SyntheticLM):
    """A SyntheticLM with a tokenizer that adds no BOS (one token per character, ids 0/1)."""

    def prompt_ids(self, prompt: str, chat: bool = True) -> list[int]:
        return [int(c == "1") for c in prompt]


BAD = [
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature="hot"), "temperature"),
    (dict(temperature=True), "temperature"),
    (dict(temperature=1.0, top_p=0.0), "top_p"),
    (dict(temperature=1.0, top_p=1.5), "top_p"),
    (dict(temperature=1.0, top_p=float("nan")), "top_p"),
    (dict(temperature=1.0, top_k=0), "top_k"),
    (dict(temperature=1.0, top_k=2.5), "top_k"),
    (dict(sampler="smc", num_particles=0), "num_particles"),
    (dict(sampler="smc", num_particles=-3), "num_particles"),
    (dict(sampler="smc", num_particles=True), "num_particles"),
    (dict(sampler="smc", num_particles=2.0), "num_particles"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(seed="x"), "seed"),
    (dict(seed=-1), "seed"),
    (dict(seed=1.5), "seed"),
    (dict(seed=2**64, temperature=1.0), "seed"),
    (dict(chat="no"), "chat"),
    (dict(jump_forward=None), "jump_forward"),
    (dict(sampler=gramgen.generation.SMC(num_particles=2), num_particles=4), "num_particles"),
]


@pytest.mark.parametrize("kwargs, word", BAD, ids=[f"{k}" for k, _ in BAD])
def test_bad_arguments_are_configuration_errors_before_any_work(kwargs, word):
    """Each bad value raises a ConfigurationError naming its argument, and no model call
    was made (NaN temperature used to reach torch.multinomial: RuntimeError; seed='x'
    ran greedily, or reached torch's manual_seed)."""
    _, cg, lm = binary_setup()
    with pytest.raises(gramgen.ConfigurationError, match=word):
        gramgen.generate(lm, [0], grammar=cg, max_new_tokens=kwargs.pop("max_new_tokens", 8),
                         **kwargs)
    assert lm.calls == 0


def test_num_particles_zero_is_not_the_default():
    """``num_particles=0`` is an error, never the default 8 (an ``x or default`` bug)."""
    _, cg, lm = binary_setup()
    with pytest.raises(gramgen.ConfigurationError, match="num_particles must be a positive int, not 0"):
        gramgen.generate(lm, [0], grammar=cg, sampler="smc", num_particles=0, max_new_tokens=8)
    with pytest.raises(gramgen.ConfigurationError, match="num_particles"):
        gramgen.generation.SMC(num_particles=0)
    out = gramgen.generate(lm, [0], grammar=cg, sampler="smc", num_particles=1, max_new_tokens=8, seed=0)
    assert len(out.extras["particles"]) == 1


@pytest.mark.parametrize("prompt, word", [
    (None, "prompt must be"),
    (3, "prompt must be"),
    ([[0], None], r"prompt\[1\]"),
    ([[]], r"prompt\[0\] is an empty list"),
    ([0, 99], "token id 99"),
    ([-1], "token id -1"),
    ([True, 0], r"prompt\[0\] must be a string or a list of token ids, not bool"),
    ("", "comes to no tokens"),
])
def test_bad_prompts(prompt, word):
    """None, an empty prompt, ids outside the vocabulary: ConfigurationError before any
    work. An empty string with a tokenizer that adds no BOS comes to no tokens: an error
    (a model cannot continue nothing)."""
    vocab, cg, _ = binary_setup()
    lm = Tokenizing(vocab, lambda ctx: np.zeros(vocab.size))
    with pytest.raises(gramgen.ConfigurationError, match=word):
        gramgen.generate(lm, prompt, grammar=cg, max_new_tokens=8, chat=False)
    assert lm.calls == 0
    assert gramgen.generate(lm, [], grammar=cg, max_new_tokens=8) == []   # an empty batch


def test_prompts_must_fit_the_context_length():
    vocab, cg, _ = binary_setup()
    lm = SyntheticLM.hashed(vocab, seed=0, context_length=16)
    with pytest.raises(gramgen.ConfigurationError, match="20 tokens, but the model's context holds 16"):
        gramgen.generate(lm, [0] * 20, grammar=cg, max_new_tokens=4)
    with pytest.raises(gramgen.ConfigurationError,
                       match=r"\(10 tokens\) plus max_new_tokens=8 exceeds the model's context of 16 "
                             r"tokens: use max_new_tokens <= 6"):
        gramgen.generate(lm, [0] * 10, grammar=cg, max_new_tokens=8)
    with pytest.raises(gramgen.ConfigurationError, match=r"prompt\[1\]"):
        gramgen.generate(lm, [[0], [0] * 16], grammar=cg, max_new_tokens=1)
    assert lm.calls == 0
    out = gramgen.generate(lm, [0] * 10, grammar=cg, max_new_tokens=6)
    assert len(out.tokens) <= 6
    assert math.isfinite(out.logprob)


@pytest.mark.parametrize("kwargs", [dict(temperature=float("nan")), dict(temperature=True),
                                    dict(top_p=float("nan")), dict(top_k=True)])
def test_the_constrained_options_object_checks_as_generate_does(kwargs):
    """sampler=Constrained(...) took NaN temperatures that temperature= refuses."""
    from gramgen.generation import Constrained

    with pytest.raises(gramgen.ConfigurationError):
        Constrained(**kwargs)
