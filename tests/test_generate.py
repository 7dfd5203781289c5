"""generate() with the real SmolLM2-135M-Instruct (not mocked): greedy, batches, sampling,
jump-forward, finish reasons, and outputs that validate (lark parse, jsonschema)."""

from __future__ import annotations

import functools
import json
import random
import re

import lark
import pytest

from conftest import require_shared

import gramgen
from gramgen.generation import Constrained, MatcherConstraint, Sequence, run, target_for
from gramgen.generation.samplers import MaskedSampler
from gramgen.grammar.sources import builtin_grammar_text

PERSON = r"""
start: "{\"name\":" STR ",\"age\":" INT ",\"city\":" STR "}"
STR: /"[A-Za-z ]{1,20}"/
INT: /[1-9][0-9]{0,2}/
"""
PROMPTS = ["Describe Alice, a 30 year old from Paris, as JSON.",
           "Give me a JSON person.",
           "Bob lives in Rome and is 52. Output JSON."]


@functools.cache
def shared_model() -> gramgen.Model:
    """One SmolLM2 per test session (converted once, then loaded from the user cache).

    One torch thread: CI runs two test workers on two cores, where torch's own threads
    would only contend (3x slower per forward pass when measured under load)."""
    import torch

    torch.set_num_threads(1)
    return gramgen.load_model("smollm2", device="cpu")


@pytest.fixture(scope="session")
def model() -> gramgen.Model:
    return shared_model()


def test_model_wraps_tokenizer_and_chat_end_token(model):
    im_end = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert model.end_of_turn_token_id() == im_end
    assert im_end in model.vocab.eos_token_ids
    assert model.vocab.size == len(model.tokenizer)
    assert str(model.device) == "cpu"
    ids = model.prompt_ids("hi")
    assert model.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    assert model.prompt_ids("hi", chat=False) == model.tokenizer("hi")["input_ids"]


def test_load_model_rejects_unknown_name(tmp_path):
    with pytest.raises(gramgen.GramgenError, match="neither a known model name"):
        gramgen.load_model(str(tmp_path / "nothing-here"))


def test_greedy_output_follows_grammar_and_finishes_by_grammar(model):
    out = gramgen.generate(model, PROMPTS[0], lark=PERSON, max_new_tokens=40)
    assert isinstance(out, gramgen.GenerationResult)
    assert out.complete and out.finish_reason == "grammar"
    lark.Lark(PERSON).parse(out.text)
    assert out.value is None   # not a schema: no parsed value
    assert "".join(model.tokenizer.decode(out.tokens)) == out.text
    # jump-forward: the literal keys are forced, so fewer forward passes than tokens
    assert out.stats.forced_tokens > 0
    assert out.stats.forward_passes < len(out.tokens)
    assert out.stats.forced_tokens + out.stats.sampled_tokens == len(out.tokens)


def test_logprob_and_kv_cache_match_a_full_forward_pass(model):
    """Recompute every step from one forward pass over prompt + output: each emitted token is
    the argmax of the masked logits (forced ones are the only allowed token), and the summed
    masked log-probs equal the reported logprob."""
    import torch

    out = gramgen.generate(model, PROMPTS[2], lark=PERSON, max_new_tokens=40)
    prompt = model.prompt_ids(PROMPTS[2])
    ids = torch.tensor([prompt + out.tokens])
    with torch.inference_mode():
        logits = model.hf_model(ids).logits[0, len(prompt) - 1:].float()
    m = target_for(model.vocab, lark=PERSON).compiled.matcher()
    total = 0.0
    for step, token in enumerate(out.tokens):
        allowed = torch.from_numpy(m.mask())
        logp = torch.log_softmax(logits[step].masked_fill(~allowed, float("-inf")), -1)
        assert int(torch.argmax(logp)) == token
        total += float(logp[token])
        m.advance(token)
    assert int(m.mask().sum()) == 1 and m.mask()[model.vocab.eos_token_ids[0]]
    assert out.logprob == pytest.approx(total, abs=2e-3)


def test_batch_equals_one_by_one(model):
    batch = gramgen.generate(model, PROMPTS, lark=PERSON, max_new_tokens=40)
    assert isinstance(batch, list) and len(batch) == len(PROMPTS)
    for prompt, b in zip(PROMPTS, batch):
        one = gramgen.generate(model, prompt, lark=PERSON, max_new_tokens=40)
        assert b.tokens == one.tokens
        assert b.finish_reason == one.finish_reason
        assert b.logprob == pytest.approx(one.logprob, abs=1e-3)
    assert gramgen.generate(model, [], lark=PERSON) == []


def test_max_new_tokens_marks_the_output_incomplete(model):
    out = gramgen.generate(model, "Count to ten.", regex=r"[0-9]+( [0-9]+)*", max_new_tokens=3)
    assert out.finish_reason == "max_new_tokens"
    assert not out.complete and out.value is None
    assert len(out.tokens) == 3
    assert re.fullmatch(r"[0-9]+( [0-9]+)*", out.text)


def test_model_choosing_eos(model):
    out = gramgen.generate(model, "Answer yes or no: is the sky blue?", regex=r"(yes|no)[a-z ]*",
                           max_new_tokens=20)
    assert out.complete and out.finish_reason in ("eos", "grammar")
    assert re.fullmatch(r"(yes|no)[a-z ]*", out.text)


def test_sampling_is_seeded_and_stays_in_the_language(model):
    kwargs = dict(regex=r"[a-z]+(, [a-z]+){2}", max_new_tokens=16, temperature=1.0,
                  top_p=0.9, top_k=50)
    a = gramgen.generate(model, "Name three fruits.", seed=7, **kwargs)
    b = gramgen.generate(model, "Name three fruits.", seed=7, **kwargs)
    assert a.tokens == b.tokens and a.logprob == b.logprob
    outs = gramgen.generate(model, ["Name three fruits."] * 2, seed=1, **kwargs)
    for out in [a, *outs]:
        assert out.logprob <= 0
        if out.complete:
            assert re.fullmatch(r"[a-z]+(, [a-z]+){2}", out.text)


def test_gbnf_and_grammar_objects(model):
    gbnf = 'root ::= "The answer is " [0-9]+ "."'
    out = gramgen.generate(model, "What is 6 times 7?", gbnf=gbnf, max_new_tokens=12)
    assert out.complete and re.fullmatch(r"The answer is [0-9]+\.", out.text)
    g = gramgen.Grammar.from_regex(r"(red|green|blue)")
    first = gramgen.generate(model, "A color?", grammar=g, max_new_tokens=5)
    assert first.text in ("red", "green", "blue")
    cg = gramgen.compile(g, model.vocab)
    assert gramgen.generate(model, "A color?", grammar=cg, max_new_tokens=5).tokens == first.tokens


def test_chat_false_uses_the_raw_prompt(model):
    out = gramgen.generate(model, "The capital of France is", regex=r" [A-Z][a-z]+", chat=False,
                           max_new_tokens=6)
    assert out.stats.prompt_tokens == len(model.tokenizer("The capital of France is")["input_ids"])
    assert re.fullmatch(r" [A-Z][a-z]+", out.text) or not out.complete


def test_clear_errors_for_bad_arguments(model):
    with pytest.raises(gramgen.ConfigurationError, match="exactly one"):
        gramgen.generate(model, "x")
    with pytest.raises(ValueError, match="exactly one"):   # configuration errors are ValueErrors
        gramgen.generate(model, "x")
    with pytest.raises(gramgen.GramgenError, match="exactly one"):
        gramgen.generate(model, "x", regex="a", lark='start: "a"')
    with pytest.raises(gramgen.GramgenError, match="sampler 'smc'.*temperature 1"):
        gramgen.generate(model, "x", regex="a", sampler="smc", temperature=0.7)
    with pytest.raises(gramgen.GramgenError, match="sampler 'beam'"):
        gramgen.generate(model, "x", regex="a", sampler="beam")
    with pytest.raises(gramgen.GramgenError, match="speculative"):
        gramgen.generate(model, "x", regex="a", speculative=object())
    with pytest.raises(gramgen.GramgenError, match="num_particles"):
        gramgen.generate(model, "x", regex="a", num_particles=4)
    with pytest.raises(gramgen.GramgenError, match="max_new_tokens"):
        gramgen.generate(model, "x", regex="a", max_new_tokens=0)
    with pytest.raises(gramgen.GramgenError, match="temperature"):
        gramgen.generate(model, "x", regex="a", temperature=-1)
    with pytest.raises(gramgen.GramgenError, match="pydantic"):
        gramgen.generate(model, "x", schema=int)
    with pytest.raises(gramgen.ConfigurationError, match="top_p"):
        gramgen.generate(model, "x", regex="a", temperature=1.0, top_p=1.5)
    with pytest.raises(gramgen.ConfigurationError, match="prompt"):
        gramgen.generate(model, 42, regex="a")
    with pytest.raises(gramgen.GramgenError, match="gramgen.Model"):
        gramgen.generate(model.hf_model, "x", regex="a")


def test_compiled_grammars_are_cached(model):
    a = target_for(model.vocab, lark=PERSON).compiled
    b = target_for(model.vocab, lark=PERSON).compiled
    assert a is b
    g = gramgen.Grammar.from_lark(PERSON)
    assert target_for(model.vocab, grammar=g).compiled is target_for(model.vocab, grammar=g).compiled


LARK_GRAMMARS = {
    "sql": (builtin_grammar_text("sql"), "Write a SQL query that lists the names of all users."),
    "arithmetic": (None, "Write this expression without spaces: 3*(4+5)"),
    "person": (PERSON, "Describe Carol, 41, from Oslo, as JSON."),
}


@pytest.mark.parametrize("name", sorted(LARK_GRAMMARS))
def test_lark_grammar_outputs_parse_with_lark(model, name):
    text, prompt = LARK_GRAMMARS[name]
    if text is None:
        text = (require_shared() / "data" / "lark" / "syncode" / "calc.lark").read_text()
    out = gramgen.generate(model, prompt, lark=text, max_new_tokens=40)
    assert out.complete, out
    lark.Lark(text, parser="earley").parse(out.text)


# -- JSON Schema (needs Grammar.from_json_schema) -----------------------------------------

def _dev_schemas(n: int, seed: int = 5, max_chars: int = 2500) -> list[dict]:
    """A fixed seeded draw of ``n`` dev schemas of at most ``max_chars`` characters (large
    Kubernetes / Schema Store schemas take tens of seconds to compile: not for CI)."""
    rows = []
    for path in sorted((require_shared() / "data" / "jsonschemabench").glob("*/dev.jsonl")):
        # split on "\n" only: some schemas hold U+0085 / U+2028, which splitlines() splits on
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")
                    if line.strip())
    rows = [r for r in rows if len(json.dumps(r["schema"])) <= max_chars]
    return random.Random(seed).sample(rows, n)


def test_pydantic_schema_gives_an_instance(model):
    import pydantic

    class City(pydantic.BaseModel):
        name: str
        country: str

    out = gramgen.generate(model, "Describe Paris as JSON with name and country.", schema=City,
                           max_new_tokens=40)
    assert out.complete, out
    assert isinstance(out.value, City)
    assert out.value == City.model_validate_json(out.text)


def test_jsonschemabench_completed_outputs_validate(model):
    """30 dev schemas (fixed seeded draw), one batch with a grammar per row: every completed
    output validates with jsonschema; how many compiled / completed is printed."""
    import jsonschema

    entries = _dev_schemas(30)
    compiled, kept = [], []
    for entry in entries:
        try:
            g = gramgen.Grammar.from_json_schema(entry["schema"])
            compiled.append(gramgen.compile(g, model.vocab))
        except (gramgen.SchemaError, gramgen.CompileLimitError):
            continue   # an unsupported keyword or a size budget: a clear error, counted below
        kept.append(entry)
    assert len(compiled) >= 15, f"only {len(compiled)} of 30 schemas compiled"
    # a short prompt: the grammar alone shapes the output, and 30 long prompts would make
    # the batch's prefill the slowest part of the test
    prompt = model.prompt_ids("Output a short JSON example.")
    population = [Sequence(list(prompt), MatcherConstraint(cg.matcher())) for cg in compiled]
    population = run(model, population, MaskedSampler(Constrained(), model.vocab), max_new_tokens=64)
    results = [_as_result(model, seq) for seq in population]
    done = [(e, r) for e, r in zip(kept, results) if r.complete]
    print(f"\njsonschemabench: {len(compiled)}/30 compiled, {len(done)} completed within 64 tokens,"
          f" {sum(r.stats.forced_tokens for r in results)} forced tokens")
    assert len(done) >= 5, f"only {len(done)} outputs completed"
    for entry, result in done:
        jsonschema.validate(result.value, entry["schema"])
    for result in results:
        if not result.complete:
            assert result.value is None


def _as_result(model, seq, parse: bool = True):
    """The public fields of a loop sequence, parsed as JSON when complete and ``parse``."""
    text = b"".join(model.vocab.token_bytes(t) for t in seq.tokens).decode("utf-8")
    complete = seq.finish in ("eos", "grammar")
    return gramgen.GenerationResult(text=text, value=json.loads(text) if complete and parse else None,
                                    tokens=seq.tokens, logprob=seq.logprob,
                                    finish_reason=seq.finish, complete=complete, stats=seq.stats)


def test_rows_with_different_grammars_and_a_fully_forced_row(model):
    """The loop takes one constraint per row; a row the grammar forces completely needs
    no forward pass and must not disturb the others."""
    # one byte: exactly one token spells it (a longer literal has several tokenizations,
    # all allowed, so it is sampled, not forced)
    forced = gramgen.compile(gramgen.Grammar.from_regex(r"\{"), model.vocab)
    choice = gramgen.compile(gramgen.Grammar.from_regex("(red|green|blue)"), model.vocab)
    population = [Sequence(model.prompt_ids("Open a brace."), MatcherConstraint(forced.matcher())),
                  Sequence(model.prompt_ids("A color?"), MatcherConstraint(choice.matcher()))]
    population = run(model, population, MaskedSampler(Constrained(), model.vocab), max_new_tokens=5)
    first, second = population
    assert first.finish == "grammar" and second.finish in ("grammar", "eos")
    first, second = _as_result(model, first, False), _as_result(model, second, False)
    assert first.text == "{" and first.finish_reason == "grammar" and first.complete
    assert first.stats.forward_passes == 0 and first.stats.sampled_tokens == 0
    alone = gramgen.generate(model, "A color?", grammar=choice, max_new_tokens=5)
    assert second.tokens == alone.tokens and second.complete


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    from gramgen.hf import cache_dir

    monkeypatch.setenv("GRAMGEN_CACHE_DIR", str(tmp_path / "g"))
    assert cache_dir() == tmp_path / "g"
    monkeypatch.delenv("GRAMGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "gramgen"


def test_local_folder_and_wrapped_models_behave_alike(model):
    """The converted cache entry is a plain Hugging Face folder: load_model reads it like any
    local model, and Model() wraps an already loaded one; both give the same greedy output."""
    from gramgen.hf import converted_folder

    folder = converted_folder("smollm2")
    assert (folder / "config.json").is_file() and not list(folder.parent.glob(".smollm2-*"))
    again = gramgen.load_model(str(folder), device="cpu")
    wrapped = gramgen.Model(model.hf_model, model.tokenizer)
    assert wrapped.vocab.fingerprint == model.vocab.fingerprint == again.vocab.fingerprint
    outs = [gramgen.generate(m, "A color?", regex="(red|green|blue)", max_new_tokens=4).tokens
            for m in (model, again, wrapped)]
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("sampler", ["awrs", "smc", "asap"])
def test_generate_with_the_correct_samplers(model, sampler):
    """sampler= runs the same loop with another step; outputs stay in the language."""
    outs = gramgen.generate(model, ["Pick a digit:", "Another digit:"], regex=r"[0-9]{1,2}", chat=False,
                            sampler=sampler, seed=3, max_new_tokens=4,
                            num_particles=4 if sampler == "smc" else None)
    assert len(outs) == 2
    for out in outs:
        assert out.complete and re.fullmatch(r"[0-9]{1,2}", out.text), out
        assert out.logprob < 0 and out.finish_reason in ("eos", "grammar")
    if sampler == "smc":
        assert "log_ml" in outs[0].extras
