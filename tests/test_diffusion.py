"""Masked-diffusion decoding under a grammar (gramgen.generation.diffusion).

Two models over the smollm2 tokenizer: a randomly initialised one-layer BERT masked LM
(no diffusion weights can be downloaded here) and a scripted adversarial model whose
highest logits go to EOS and to tokens that break JSON and C (closing brackets, quotes,
separators, keywords). On a JSON Schema (a string, an integer and an enum) and on the
C-like grammar of tests/data/clike: every output is valid (jsonschema and gramgen for the
schema, lark's Earley parser for C), every committed canvas is feasible (re-checked with
an Infiller of its own, from segments built here), and the dead-end rate is printed.

The BERT's mask id is 16 (``<empty_output>``, a special token of smollm2 that is not EOS):
smollm2 has no mask token, and any special id other than EOS works, since special ids are
never proposed.
"""

from __future__ import annotations

import json
from functools import cache

import jsonschema
import lark
import numpy as np
import pytest
import torch
from conftest import ROOT, hf_tokenizer, vocabulary

import gramgen
from gramgen import ConfigurationError, Hole, Infiller
from gramgen.generation.api import target_for
from gramgen.generation.diffusion import (CallableDiffusionLM, DiffusionLM, TransformersDiffusionLM,
                                          generate_diffusion)
from gramgen.testing import accepts

MASK = 16   # <empty_output> in smollm2
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer"},
        "color": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "color"],
    "additionalProperties": False,
}
CLIKE = (ROOT / "tests" / "data" / "clike" / "c_like.lark").read_text()
SCHEDULES = ("confidence", "random", "blocks")


# -- models -----------------------------------------------------------------------------------

@cache
def smollm2():
    return vocabulary("smollm2")


@cache
def random_mlm() -> TransformersDiffusionLM:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(hf_tokenizer("smollm2")), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    return TransformersDiffusionLM(BertForMaskedLM(config), smollm2(), tokenizer=hf_tokenizer("smollm2"),
                                   mask_token_id=MASK)


@cache
def bad_ids() -> np.ndarray:
    """Tokens that break JSON or C-like text almost anywhere they go."""
    tok = hf_tokenizer("smollm2")
    pieces = ["}", "]", '"', ",", ";", "{", ")", "(", ":", "=", "\\", "}}", "]]", '",', ");", "\n",
              " while", " int", " return", " else", "#", "'", "<", "@"]
    ids = {tid for p in pieces for tid in tok.encode(p, add_special_tokens=False)[:1]}
    return np.array(sorted(ids))


def adversarial(seed: int) -> CallableDiffusionLM:
    """Its highest logits go to EOS (most confidently at the first slots, to end the text
    early) and to breaking tokens, in an order shuffled per slot; the rest is noise."""
    vocab = smollm2()
    rng = np.random.default_rng(seed)
    eos = vocab.eos_token_ids[0]
    eos_boost = rng.uniform(6.0, 14.0)
    bad = bad_ids()

    def fn(canvas: list[int]) -> np.ndarray:
        n = len(canvas)
        x = rng.normal(0.0, 1.0, (n, vocab.size)).astype(np.float32)
        for i in range(n):
            x[i, rng.permutation(bad)] += 10.0 + 0.1 * np.arange(len(bad))[::-1]
            x[i, eos] += eos_boost + 0.2 * (n - i)
        return x

    return CallableDiffusionLM(fn, vocab, MASK, context_length=64)


# -- oracles ----------------------------------------------------------------------------------

@cache
def clike_parser() -> lark.Lark:
    return lark.Lark(CLIKE, parser="earley", lexer="dynamic_complete")


def parses_clike(text: str) -> bool:
    try:
        clike_parser().parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def valid_schema(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def segments_of(state: tuple, vocab, mode: str) -> list:
    """A canvas (token ids, None where masked, EOS padding) as Infiller segments, built
    here from the module docstring's rules, not by the code under test."""
    eos = set(vocab.eos_token_ids)
    end = next((i for i, t in enumerate(state) if t in eos), len(state))
    out: list = []
    i = 0
    while i < end:
        if state[i] is not None:
            out.append(vocab.token_bytes(state[i]))
            i += 1
            continue
        j = i
        while j < end and state[j] is None:
            j += 1
        m, tail = j - i, j == end
        if mode == "exact":
            out.append(Hole(max_tokens=m) if tail else Hole(tokens=m))
        elif mode == "bytes":
            out.append(Hole() if tail else Hole(min_bytes=m))
        else:
            out.append(Hole())
        i = j
    return out or [b""]


def assert_states_feasible(result, cg, mode: str) -> None:
    """Every committed canvas of ``result.trace`` can still be completed."""
    assert result.trace, "no committed state recorded"
    inf = Infiller(cg, budget=None)
    for k, state in enumerate(result.trace):
        segments = segments_of(state, cg.vocab, mode)
        assert inf.feasible(segments), f"committed state {k} is infeasible: {segments!r}"
    final = segments_of(result.trace[-1], cg.vocab, mode)
    assert not any(isinstance(s, Hole) for s in final), "the last state still has masked slots"


def run_many(model_of, n: int, oracle, cg, *, length: int, prompts, check_states_every: int = 3,
             **kw) -> dict:
    """``n`` decodes rotating schedule, greedy/sampled, prompt and ``fit``; every output
    valid, every committed state feasible on every ``check_states_every``-th run."""
    counts = dict(runs=0, dead_end_runs=0, dead_ends=0, grown=0, eos=0, checks=0, rejections=0,
                  fit_runs=0, fit_dead_end_runs=0)
    for i in range(n):
        schedule = SCHEDULES[i % 3]
        temperature = 0.0 if i % 2 == 0 else 1.0
        trace = i % check_states_every == 0
        r = generate_diffusion(model_of(i), prompts[i % len(prompts)], grammar=cg, length=length,
                               steps=max(1, length // 4), schedule=schedule,
                               block_size=8 if schedule == "blocks" else None,
                               temperature=temperature, seed=i, trace=trace, fit=i % 4 < 2, **kw)
        assert oracle(r.text), f"run {i} ({schedule}, T={temperature}): invalid output {r.text!r}"
        assert accepts(cg, r.text), f"run {i}: gramgen refuses its own output {r.text!r}"
        assert b"".join(cg.vocab.token_bytes(t) for t in r.tokens).decode("utf-8", "replace") == r.text
        if trace:
            assert_states_feasible(r, cg, kw.get("canvas", "bytes"))
        counts["runs"] += 1
        counts["fit_runs"] += i % 4 < 2
        counts["fit_dead_end_runs"] += i % 4 < 2 and r.stats.dead_ends > 0
        counts["dead_end_runs"] += r.stats.dead_ends > 0
        counts["dead_ends"] += r.stats.dead_ends
        counts["grown"] += r.stats.grown
        counts["eos"] += r.finish_reason == "eos"
        counts["checks"] += r.stats.checks
        counts["rejections"] += r.stats.rejections
    return counts


def report(name: str, counts: dict) -> None:
    print(f"\n{name}: {counts['runs']} runs, dead ends in {counts['dead_end_runs']} "
          f"({100 * counts['dead_end_runs'] / counts['runs']:.0f} %; with fit=True "
          f"{counts['fit_dead_end_runs']} of {counts['fit_runs']}), {counts['dead_ends']} in all, "
          f"{counts['grown']} slots grown, {counts['eos']} ended by EOS, "
          f"{counts['checks'] / counts['runs']:.0f} checks and "
          f"{counts['rejections'] / counts['runs']:.0f} rejections per run")


def word_prompts(seed: int, k: int = 8) -> list[list[int]]:
    """Short prompts of smollm2 ids (0 to 3 tokens): the canvas after them differs per run."""
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(100, 40000, size=int(rng.integers(0, 4)))] for _ in range(k)]


@cache
def schema_cg():
    return target_for(smollm2(), schema=SCHEMA).compiled


@cache
def clike_cg():
    return target_for(smollm2(), lark=CLIKE).compiled


# -- the four model x constraint runs -----------------------------------------------------------

def test_random_masked_lm_on_a_json_schema():
    counts = run_many(lambda i: random_mlm(), 10, valid_schema, schema_cg(), length=22,
                      prompts=word_prompts(1), max_tries=4)
    report("random MLM, JSON Schema", counts)


def test_adversarial_model_on_a_json_schema():
    counts = run_many(adversarial, 12, valid_schema, schema_cg(), length=22, prompts=[[]], max_tries=4)
    report("adversarial, JSON Schema", counts)


def test_random_masked_lm_on_the_c_like_grammar():
    counts = run_many(lambda i: random_mlm(), 12, parses_clike, clike_cg(), length=16,
                      prompts=word_prompts(2), max_tries=4)
    report("random MLM, C-like", counts)


def test_adversarial_model_on_the_c_like_grammar():
    counts = run_many(adversarial, 12, parses_clike, clike_cg(), length=16, prompts=[[]], max_tries=4)
    report("adversarial, C-like", counts)
    assert counts["eos"] < counts["runs"], "the adversary's EOS won every run: the test saw no C"


# -- canvases --------------------------------------------------------------------------------

def small_vocab() -> gramgen.Vocabulary:
    """48 tokens: every byte C-like text needs and a few multi-byte ones; EOS and mask last."""
    singles = [bytes([c]) for c in b"abcdefinrtuwxyz0123456789 (){};=+<"]
    multi = [b"int ", b"if", b"while", b"return", b"==", b" = ", b"x", b"();"]
    tokens = list(dict.fromkeys(singles + multi)) + [b"", b""]
    n = len(tokens)
    return gramgen.Vocabulary(tokens, eos_token_ids=[n - 2], special_ids=[n - 1])


def noisy(vocab, seed: int) -> CallableDiffusionLM:
    rng = np.random.default_rng(seed)
    return CallableDiffusionLM(lambda c: rng.normal(0.0, 3.0, (len(c), vocab.size)), vocab, vocab.size - 1)


def test_an_exact_canvas_never_dead_ends_and_keeps_its_length():
    vocab = small_vocab()
    cg = gramgen.compile(gramgen.Grammar.from_lark(CLIKE), vocab)
    for i in range(6):
        r = generate_diffusion(noisy(vocab, i), [], grammar=cg, length=8, steps=4, canvas="exact",
                               schedule=SCHEDULES[i % 3], temperature=float(i % 2), seed=i,
                               budget=None, trace=True)
        assert parses_clike(r.text), r.text
        assert r.stats.dead_ends == 0 and r.stats.grown == 0 and r.stats.shrunk == 0
        assert len(r.trace[-1]) == 8 and None not in r.trace[-1]
        assert_states_feasible(r, cg, "exact")


def test_additive_canvas_grows_without_dead_ends():
    cg = schema_cg()
    grown = 0
    for i in range(6):
        r = generate_diffusion(adversarial(100 + i), [], grammar=cg, length=6, steps=3,
                               canvas="additive", seed=i, trace=True, max_tries=4)
        assert valid_schema(r.text), r.text
        assert r.stats.dead_ends == 0 and r.finish_reason != "dead_end"
        assert_states_feasible(r, cg, "additive")
        grown += r.stats.grown
    assert grown > 0   # six slots never hold the schema's shortest object: runs grew


def test_a_dead_end_is_completed_from_a_witness():
    """The model commits '{"' first and '}' last with one slot between: no token of
    smollm2 spells what must go there, so (without ``fit``) the run is filled from a
    witness and grows."""
    vocab = smollm2()
    tok = hf_tokenizer("smollm2")
    first, = tok.encode('{"', add_special_tokens=False)
    last, = tok.encode("}", add_special_tokens=False)

    def fn(canvas):
        x = np.zeros((len(canvas), vocab.size), dtype=np.float32)
        x[0, first] = 30.0
        x[-1, last] = 20.0
        return x

    model = CallableDiffusionLM(fn, vocab, MASK)
    r = generate_diffusion(model, [], schema=SCHEMA, length=3, steps=3, trace=True, fit=False)
    assert r.tokens[0] == first and vocab.token_bytes(r.tokens[-1]) == b"}"
    assert r.stats.dead_ends == 1 and r.stats.grown > 0 and r.finish_reason == "dead_end"
    assert valid_schema(r.text) and r.value == json.loads(r.text)
    assert_states_feasible(r, schema_cg(), "bytes")
    # with fit=True the three slots are seen to be too few for the shortest object at once:
    # the canvas comes from a witness before any forward pass
    fitted = generate_diffusion(model, [], schema=SCHEMA, length=3, steps=3, trace=True)
    assert fitted.stats.dead_ends == 1 and fitted.stats.forward_passes == 0
    assert fitted.stats.committed == 0 and valid_schema(fitted.text)


def test_fit_refuses_a_token_that_leaves_too_few_slots():
    """'}' committed two slots after '{"' leaves one slot for what must go between: the
    byte canvas admits it, the fit test does not."""
    vocab = smollm2()
    tok = hf_tokenizer("smollm2")
    first, = tok.encode('{"', add_special_tokens=False)
    last, = tok.encode("}", add_special_tokens=False)

    def fn(canvas):
        x = np.zeros((len(canvas), vocab.size), dtype=np.float32)
        x[0, first] = 30.0
        x[2, last] = 20.0
        return x

    model = CallableDiffusionLM(fn, vocab, MASK)
    loose = generate_diffusion(model, [], schema=SCHEMA, length=24, steps=24, trace=True, fit=False)
    assert loose.trace[1][2] == last and loose.stats.dead_ends > 0 and valid_schema(loose.text)
    fitted = generate_diffusion(model, [], schema=SCHEMA, length=24, steps=24, trace=True)
    assert fitted.stats.unfit > 0 and all(state[2] != last for state in fitted.trace)
    assert valid_schema(fitted.text)
    assert_states_feasible(fitted, schema_cg(), "bytes")


def test_an_early_eos_pads_the_canvas():
    """EOS is allowed only where the text can end; once committed, the slots after it are
    padding and the text is what comes before."""
    vocab = smollm2()
    eos = vocab.eos_token_ids[0]
    cg = target_for(vocab, regex=r"(ab)*").compiled
    tok = hf_tokenizer("smollm2")
    ab = tok.encode("ab", add_special_tokens=False)

    def fn(canvas):
        x = np.zeros((len(canvas), vocab.size), dtype=np.float32)
        x[:, eos] = 5.0
        x[:, ab[0]] = 1.0
        x[1, eos] = 9.0     # EOS most confidently after the first slot
        x[0, ab[0]] = 8.0
        return x

    r = generate_diffusion(CallableDiffusionLM(fn, vocab, MASK), [], grammar=cg, length=6, steps=2,
                           trace=True)
    assert r.finish_reason == "eos" and r.eos_token == eos
    assert r.text == "ab" * len(r.tokens) and eos not in r.tokens
    assert r.trace[-1][len(r.tokens):] == (eos,) * (6 - len(r.tokens))


# -- schedules, sampling, prompts ------------------------------------------------------------

def scripted_confidence(vocab, conf: list[float], token: int) -> CallableDiffusionLM:
    """Every slot proposes ``token``; slot i with confidence growing with conf[i]."""
    def fn(canvas):
        x = np.zeros((len(canvas), vocab.size), dtype=np.float32)
        offset = len(canvas) - len(conf)
        for i, c in enumerate(conf):
            x[offset + i, token] = c
        return x
    return CallableDiffusionLM(fn, vocab, MASK)


def commit_order(trace) -> list[int]:
    order, before = [], (None,) * len(trace[0])
    for state in trace:
        order += [i for i, (a, b) in enumerate(zip(before, state)) if a is None and b is not None]
        before = state
    return order


def test_confidence_schedule_commits_the_most_confident_slots_first():
    vocab = smollm2()
    a, = hf_tokenizer("smollm2").encode("a", add_special_tokens=False)
    conf = [1.0, 9.0, 3.0, 7.0, 5.0, 2.0]
    model = scripted_confidence(vocab, conf, a)
    r = generate_diffusion(model, [], length=6, steps=6, schedule="confidence", trace=True)
    assert commit_order(r.trace) == [1, 3, 4, 2, 5, 0]
    assert r.stats.forward_passes == 6 and r.text == "a" * 6 and r.finish_reason == "length"


def test_blocks_schedule_finishes_a_block_before_the_next():
    vocab = smollm2()
    a, = hf_tokenizer("smollm2").encode("a", add_special_tokens=False)
    conf = [1.0, 2.0, 3.0, 9.0, 8.0, 7.0, 6.0, 5.0]
    r = generate_diffusion(scripted_confidence(vocab, conf, a), [], length=8, steps=4,
                           schedule="blocks", block_size=4, trace=True)
    assert commit_order(r.trace) == [3, 2, 1, 0, 4, 5, 6, 7]


def test_random_schedule_is_seeded():
    vocab = smollm2()
    a, = hf_tokenizer("smollm2").encode("a", add_special_tokens=False)
    model = scripted_confidence(vocab, [1.0] * 10, a)
    orders = [commit_order(generate_diffusion(model, [], length=10, steps=10, schedule="random",
                                              seed=s, trace=True).trace) for s in (1, 1, 2)]
    assert orders[0] == orders[1] and orders[0] != orders[2]
    assert sorted(orders[0]) == list(range(10))


def test_greedy_and_sampled_decoding():
    cg = schema_cg()
    model = random_mlm()
    g1 = generate_diffusion(model, [500], grammar=cg, length=20, steps=5, seed=1, max_tries=4)
    g2 = generate_diffusion(model, [500], grammar=cg, length=20, steps=5, seed=2, max_tries=4)
    assert g1.tokens == g2.tokens   # greedy: the seed does not matter
    s = [generate_diffusion(model, [500], grammar=cg, length=20, steps=5, temperature=1.0, seed=k,
                            max_tries=4) for k in (7, 7, 8)]
    assert s[0].tokens == s[1].tokens and s[0].tokens != s[2].tokens
    assert all(valid_schema(r.text) for r in (g1, g2, *s))


def test_sampling_follows_the_model_distribution():
    """Unconstrained, one slot, temperature 1: the committed token's frequencies follow the
    softmax (chi-square style bound on a 3-token distribution)."""
    vocab = smollm2()
    ids = [300, 400, 500]
    logits = np.full(vocab.size, -np.inf, dtype=np.float32)
    logits[ids] = np.log([0.5, 0.3, 0.2])
    model = CallableDiffusionLM(lambda c: np.tile(logits, (len(c), 1)), vocab, MASK)
    n = 600
    got = [generate_diffusion(model, [], length=1, steps=1, temperature=1.0, seed=k).tokens[0]
           for k in range(n)]
    freq = np.array([got.count(t) for t in ids]) / n
    assert np.all(np.abs(freq - [0.5, 0.3, 0.2]) < 0.07), freq


def test_the_prompt_is_read_but_not_constrained():
    """Logits are taken at the canvas's positions (after the prompt): a model that wants
    digit ``p % 10`` at absolute position ``p`` writes the digits after a 3-token prompt."""
    vocab = smollm2()
    tok = hf_tokenizer("smollm2")
    digits = [tok.encode(str(d), add_special_tokens=False)[0] for d in range(10)]

    def fn(canvas):
        x = np.zeros((len(canvas), vocab.size), dtype=np.float32)
        for p in range(len(canvas)):
            x[p, digits[p % 10]] = 5.0
        return x

    prompt = tok.encode("{{{", add_special_tokens=False)[:1] * 3   # not valid JSON: never checked
    r = generate_diffusion(CallableDiffusionLM(fn, vocab, MASK), prompt, regex=r"[0-9]+", length=4, steps=2)
    assert r.text == "3456"
    assert r.stats.prompt_tokens == 3


def test_string_prompts_use_the_tokenizer():
    model = random_mlm()
    r = generate_diffusion(model, "Name:", regex=r"[a-z]{1,6}", length=4, steps=2)
    assert r.stats.prompt_tokens == len(hf_tokenizer("smollm2")("Name:")["input_ids"])
    assert accepts(target_for(smollm2(), regex=r"[a-z]{1,6}").compiled, r.text)


def test_unconstrained_loop_takes_the_models_best():
    vocab = smollm2()
    a, = hf_tokenizer("smollm2").encode("a", add_special_tokens=False)
    r = generate_diffusion(scripted_confidence(vocab, [1.0] * 5, a), [], length=5, steps=5)
    assert r.text == "aaaaa" and r.stats.checks == 0 and r.stats.forward_passes == 5


# -- transformers adapters -------------------------------------------------------------------

def test_transformers_adapter_reads_per_position_logits_and_shifts_for_dream():
    model = random_mlm()
    canvas = [[1, 200, 300, MASK, MASK]]
    plain = model.logits(canvas)
    with torch.inference_mode():
        direct = model.hf_model(input_ids=torch.tensor(canvas)).logits
    torch.testing.assert_close(plain, direct)
    dream = TransformersDiffusionLM(model.hf_model, smollm2(), mask_token_id=MASK, shifted=True)
    shifted = dream.logits(canvas)
    torch.testing.assert_close(shifted[:, 1:], direct[:, :-1])
    torch.testing.assert_close(shifted[:, 0], direct[:, 0])
    assert plain.device == next(model.hf_model.parameters()).device
    assert isinstance(model, DiffusionLM) and model.context_length == 64


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(length=0), "length must be a positive int"),
    (dict(length=-3), "length must be a positive int"),
    (dict(length=8, steps=0), "steps must be a positive int"),
    (dict(length=8, steps=9), "steps=9 exceeds length=8"),
    (dict(length=70), "exceeds the model's context of 64"),
    (dict(length=8, schedule="zigzag"), "schedule must be"),
    (dict(length=8, block_size=4), "block_size= is for schedule='blocks'"),
    (dict(length=8, temperature=-1.0), "temperature must be"),
    (dict(length=8, canvas="tokens"), "canvas must be"),
    (dict(length=8, seed=-1), "seed must be"),
    (dict(length=8, max_tries=0), "max_tries must be"),
    (dict(length=8, schema=SCHEMA, regex="a"), "give exactly one"),
])
def test_bad_arguments_are_configuration_errors(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        generate_diffusion(random_mlm(), [5, 6], **kwargs)


def test_prompt_and_context_limits():
    model = random_mlm()
    with pytest.raises(ConfigurationError, match=r"prompt \(60 tokens\) plus length=8 exceeds"):
        generate_diffusion(model, [5] * 60, length=8)
    callable_model = CallableDiffusionLM(lambda c: np.zeros((len(c), 4)), small_vocab(), 0)
    with pytest.raises(ConfigurationError, match="has no tokenizer"):
        generate_diffusion(callable_model, "text", length=2)
    with pytest.raises(ConfigurationError, match="outside the model's vocabulary"):
        generate_diffusion(model, [10**6], length=2)
    with pytest.raises(ConfigurationError, match="model must be a diffusion LM"):
        generate_diffusion(object(), [], length=2)
    with pytest.raises(ConfigurationError, match="mask_token_id must be"):
        CallableDiffusionLM(lambda c: c, small_vocab(), 999)
    with pytest.raises(ConfigurationError, match="no mask token"):
        TransformersDiffusionLM(model.hf_model, tokenizer=hf_tokenizer("smollm2"))
