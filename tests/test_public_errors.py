"""Property: every public entry point given malformed arguments either works or raises a
:class:`gramgen.GramgenError` (whose message says what to change), never a raw
``KeyError`` / ``TypeError`` / ``IndexError`` / ``RecursionError`` from inside.

Hypothesis draws the arguments: JSON-ish values as schemas (wrong-typed keyword values,
NaN, huge ints, non-string keys), random grammar text, compile options, matcher calls,
bitmask targets, the model-free parts of ``generate()`` with a :class:`SyntheticLM`, and
the calls transformers makes to a :class:`LogitsProcessor`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gramgen
from gramgen.generation.lm import SyntheticLM

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def outcome(call, *args, **kwargs):
    """``call``'s result, or None when it raised a GramgenError; any other exception fails
    the example (hypothesis shrinks it and prints the arguments)."""
    try:
        return call(*args, **kwargs)
    except gramgen.GramgenError as exc:
        assert str(exc), f"{type(exc).__name__} without a message"
        return None


# -- values ----------------------------------------------------------------------------------

#: the wrong-typed values an argument may get
ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=6), st.binary(max_size=4), st.just([]), st.just({}), st.just(()))

KEYWORDS = ["type", "properties", "required", "items", "prefixItems", "additionalProperties", "enum", "const",
            "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
            "pattern", "format", "minItems", "maxItems", "uniqueItems", "allOf", "anyOf", "oneOf", "not", "if",
            "then", "else", "$ref", "$defs", "definitions", "$schema", "$id", "$anchor", "propertyNames",
            "patternProperties", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
            "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "default",
            "title", "contentEncoding", "dependencies", "additionalItems"]
TYPES = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null", "any", "int"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.integers(-2**80, 2**80),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6), TYPES,
                    st.sampled_from(["#", "#/$defs/a", "#/properties/a", "email", "date-time", "[a-", "^a+$"]))


def _containers(children):
    keys = st.one_of(st.sampled_from(KEYWORDS), st.sampled_from(["a", "b", "$defs"]), st.text(max_size=3),
                     st.integers(-3, 3))  # non-string keys: not JSON, but a dict a caller may pass
    return st.one_of(st.lists(children, max_size=3), st.dictionaries(keys, children, max_size=4))


JSONISH = st.recursive(SCALARS, _containers, max_leaves=12)
SCHEMAS = st.one_of(st.booleans(), st.dictionaries(st.sampled_from(KEYWORDS), JSONISH, max_size=4), JSONISH)


@st.composite
def schema_options(draw):
    options = {}
    for name, good in [("whitespace", st.sampled_from(["compact", "standard", "flexible", "loose"])),
                       ("max_whitespace", st.integers(-2, 30)), ("property_order", st.sampled_from(["schema", "any", "x"])),
                       ("strict", st.booleans()), ("draft", st.sampled_from([None, 3, 4, 6, 7, 2019, 2020])),
                       ("lenient", st.booleans()), ("lenient_formats", st.booleans()),
                       ("max_lexeme_nodes", st.integers(-1, 3000))]:
        if draw(st.booleans()):
            options[name] = draw(st.one_of(good, ODD))
    return options


def small_vocab() -> gramgen.Vocabulary:
    pieces = ['"', "{", "}", "[", "]", ":", ",", " ", "a", "b", "0", "1", "-", ".", "e", "true", "false", "null",
              '{"', '":', '",', "ab"]
    return gramgen.Vocabulary([p.encode() for p in pieces] + [b""], eos_token_ids=[len(pieces)])


VOCAB = small_vocab()


# -- grammars --------------------------------------------------------------------------------

@settings(max_examples=150, **SETTINGS)
@given(schema=SCHEMAS, options=schema_options())
def test_from_json_schema(schema, options):
    grammar = outcome(gramgen.Grammar.from_json_schema, schema, **options)
    if grammar is not None:
        outcome(gramgen.compile, grammar, VOCAB)


GRAMMAR_PIECES = list('abAB_:|*+?()[]{}"\'/\\ \n=^$.-~019%#,<>;!') + [
    "start", "root", "::=", "->", "%import", "%ignore", "\\d", "{1,2}", "(?:", "(?P<n>", "\\u{41}"]
GRAMMAR_TEXT = st.lists(st.sampled_from(GRAMMAR_PIECES), max_size=20).map("".join)


@settings(max_examples=120, **SETTINGS)
@given(text=GRAMMAR_TEXT, start=st.one_of(st.none(), st.sampled_from(["start", "root", "a", ""]), ODD))
def test_grammar_text(text, start):
    for build in (gramgen.Grammar.from_lark, gramgen.Grammar.from_gbnf):
        grammar = outcome(build, text) if start is None else outcome(build, text, start)
        if grammar is not None:
            outcome(gramgen.compile, grammar, VOCAB)
    grammar = outcome(gramgen.Grammar.from_regex, text)
    if grammar is not None:
        outcome(gramgen.compile, grammar, VOCAB)


@settings(max_examples=30, **SETTINGS)
@given(value=ODD)
def test_grammar_sources_of_the_wrong_type(value):
    for build in (gramgen.Grammar.from_lark, gramgen.Grammar.from_gbnf, gramgen.Grammar.from_regex,
                  gramgen.Grammar.from_file, gramgen.Grammar.builtin):
        outcome(build, value)


# -- compile ---------------------------------------------------------------------------------

REGEX = gramgen.Grammar.from_regex(r'"[ab]{1,3}"')
COMPILED = gramgen.compile(REGEX, VOCAB)
OPTION_VALUES = st.one_of(st.sampled_from([None, True, False, 0, 1, 16, 4096]), ODD)


@settings(max_examples=60, **SETTINGS)
@given(precompute=OPTION_VALUES, max_dfa_states=OPTION_VALUES, mask_cache_size=OPTION_VALUES,
       grammar=st.one_of(st.just(REGEX), ODD), vocab=st.one_of(st.just(VOCAB), ODD))
def test_compile_arguments(precompute, max_dfa_states, mask_cache_size, grammar, vocab):
    outcome(gramgen.CompileOptions, precompute=precompute, max_dfa_states=max_dfa_states,
            mask_cache_size=mask_cache_size)
    outcome(gramgen.compile, grammar, vocab, precompute=precompute, max_dfa_states=max_dfa_states,
            mask_cache_size=mask_cache_size)
    outcome(gramgen.compile, REGEX, VOCAB, options=precompute)
    outcome(gramgen.CompiledGrammar, grammar, vocab, precompute)


def test_compile_names_what_it_needs():
    with pytest.raises(gramgen.ConfigurationError, match="Vocabulary"):
        gramgen.compile(REGEX, "gpt2")
    with pytest.raises(gramgen.ConfigurationError, match="batch_size"):
        gramgen.allocate_token_bitmask(-1, 10)
    with pytest.raises(gramgen.ConfigurationError, match=r"gramgen.compile\(grammar, vocab, options\)"):
        gramgen.CompiledGrammar(REGEX, VOCAB, None)


# -- matcher ---------------------------------------------------------------------------------

TOKEN_ARGS = st.one_of(st.integers(-40, 40), st.integers(-2**70, 2**70), ODD,
                       st.builds(np.int64, st.integers(-30, 30)))
CALLS = st.lists(st.tuples(st.sampled_from(["check", "advance", "advance_many", "rollback", "forced_bytes",
                                            "forced_tokens", "mask", "fill_bitmask", "fork", "reset",
                                            "is_accepting", "text_bytes"]),
                           st.one_of(TOKEN_ARGS, st.lists(TOKEN_ARGS, max_size=3))), max_size=12)


@settings(max_examples=200, **SETTINGS)
@given(calls=CALLS)
def test_matcher_calls(calls):
    m = COMPILED.matcher()
    for name, arg in calls:
        if name in ("mask", "fork", "reset", "is_accepting", "text_bytes"):
            outcome(getattr(m, name))
        elif name == "fill_bitmask":
            outcome(m.fill_bitmask, np.zeros((2, 1), dtype=np.int32), arg)
        else:
            outcome(getattr(m, name), arg)


DTYPES = st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint32, np.float32, np.float64, np.bool_])


@settings(max_examples=100, **SETTINGS)
@given(dtype=DTYPES, shape=st.lists(st.integers(0, 3), max_size=3), row=TOKEN_ARGS, as_tensor=st.booleans())
def test_fill_bitmask_targets(dtype, shape, row, as_tensor):
    target = np.zeros(shape, dtype=dtype)
    if as_tensor:
        torch = pytest.importorskip("torch")
        target = torch.from_numpy(target)
    m = COMPILED.matcher()
    outcome(m.fill_bitmask, target, row)
    outcome(m.fill_bitmask, target.tolist(), row)


# -- generate() ------------------------------------------------------------------------------

LM = SyntheticLM.hashed(VOCAB, seed=1)
PROMPTS = st.one_of(st.sampled_from([[1, 2], [[1], [2, 3]], [], [[]], [-1], [10**9], [1, "a"], [1.5], "", "ab"]),
                    st.lists(st.integers(-2, 30), max_size=3), ODD)
GENERATE_OPTIONS = {
    "temperature": st.one_of(st.sampled_from([0.0, 0.7, 1.0, -1.0, math.nan, math.inf]), ODD),
    "seed": st.one_of(st.sampled_from([None, 0, 7, -1, 2**70, "x", 1.5]), ODD),
    "num_particles": st.one_of(st.sampled_from([None, 0, 1, 2, -1, 2.5]), ODD),
    "top_p": st.one_of(st.sampled_from([None, 0.5, 1.0, 2.0, 0.0, -0.1, math.nan]), ODD),
    "top_k": st.one_of(st.sampled_from([None, 1, 3, 0, -1]), ODD),
    "max_new_tokens": st.one_of(st.integers(-1, 6), ODD),
    "sampler": st.one_of(st.sampled_from(["constrained", "awrs", "smc", "asap", "masked", ""]), ODD),
    "chat": st.one_of(st.booleans(), ODD),
    "jump_forward": st.one_of(st.booleans(), ODD),
    "whitespace": st.one_of(st.sampled_from(["compact", "standard", "flexible"]), ODD),
    "strict": st.one_of(st.booleans(), ODD),
}


@st.composite
def generate_kwargs(draw):
    kwargs = {name: draw(values) for name, values in GENERATE_OPTIONS.items() if draw(st.booleans())}
    if isinstance(kwargs.get("max_new_tokens"), int) and kwargs["max_new_tokens"] > 6:
        kwargs["max_new_tokens"] = 6  # (a valid huge budget is no malformed argument, only slow)
    constraint = draw(st.sampled_from(["regex", "schema", "grammar", "lark", "none", "two", "odd"]))
    if constraint == "regex":
        kwargs["regex"] = '"[ab]{1,3}"'
    elif constraint == "schema":
        kwargs["schema"] = draw(st.one_of(st.just({"type": "string", "maxLength": 2}), SCHEMAS))
    elif constraint == "grammar":
        kwargs["grammar"] = draw(st.sampled_from([REGEX, COMPILED]))
    elif constraint == "lark":
        kwargs["lark"] = draw(st.one_of(st.just('start: "a" "b"?'), GRAMMAR_TEXT))
    elif constraint == "two":
        kwargs["regex"], kwargs["lark"] = "a", 'start: "a"'
    elif constraint == "odd":
        kwargs[draw(st.sampled_from(["regex", "grammar", "lark", "gbnf", "constraint"]))] = draw(ODD)
    return kwargs


@settings(max_examples=120, **SETTINGS)
@given(prompt=PROMPTS, kwargs=generate_kwargs())
def test_generate_arguments(prompt, kwargs):
    outcome(gramgen.generate, LM, prompt, **kwargs)


@settings(max_examples=20, **SETTINGS)
@given(model=ODD)
def test_generate_with_no_model(model):
    outcome(gramgen.generate, model, [1], regex="a")


# -- LogitsProcessor -------------------------------------------------------------------------

@settings(max_examples=60, **SETTINGS)
@given(ids_shape=st.lists(st.integers(0, 3), min_size=1, max_size=3),
       scores_shape=st.lists(st.integers(0, 30), min_size=1, max_size=3),
       ids=st.lists(st.integers(-3, 30), max_size=4), score_dtype=st.sampled_from(["float32", "float16", "int64"]))
def test_logits_processor_calls(ids_shape, scores_shape, ids, score_dtype):
    torch = pytest.importorskip("torch")
    processor = gramgen.LogitsProcessor(COMPILED)
    n = int(np.prod(ids_shape))
    values = (ids * (n // max(len(ids), 1) + 1))[:n] if ids else [0] * n
    input_ids = torch.tensor(values, dtype=torch.long).reshape(ids_shape)
    scores = torch.zeros(scores_shape, dtype=getattr(torch, score_dtype))
    outcome(processor, input_ids, scores)
    outcome(processor, input_ids.tolist(), scores)


def test_an_empty_batch_of_scores():
    """No rows to mask: the scores come back as they are (apply_bitmask could not infer
    the width of a batch of no rows: RuntimeError)."""
    torch = pytest.importorskip("torch")
    processor = gramgen.LogitsProcessor(COMPILED)
    scores = torch.zeros((0, VOCAB.size + 3))
    assert processor(torch.zeros((0, 2), dtype=torch.long), scores).shape == (0, VOCAB.size + 3)
